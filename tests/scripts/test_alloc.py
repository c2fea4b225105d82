"""Budget allocators in sim (uniform, pyramid, adakv), checked against computations
written here from docs/allocators.md's definitions (numpy), not from the C:

- conservation at every step (sim --step-counts), a property test over random
  synthetic traces, budgets and chunk sizes, for every policy x allocator:
  static (uniform, pyramid): a stream keeps exactly its capacity whenever its
  candidates exceed it, and once every stream is full the total is L*K*N;
  dynamic (adakv): a layer keeps exactly K*N at every step its candidates
  exceed that, each head between 1 and its candidates;
- pyramid's capacities equal the closed form (largest remainder rounding);
- adakv:alpha=1 gives uniform's numbers;
- an independent replay of pyramid and adakv (knorm, tova:scope=group) gives
  the same kept sets;
- uniform gives the values of a run without --allocators on the demo trace (of an older build
  named by $KVTRACE_MAIN when set; the new columns aside);
- --budgets F%: N = floor(F/100 * T), budget_fraction recorded;
- bad input: exit 2, one line, nothing written. TAP."""
import csv
import math
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
# an older build to compare uniform against (the build before allocators); without it, the same build run
# without --allocators is the baseline (a fresh clone or CI has no older build)
MAIN = os.environ.get("KVTRACE_MAIN")
POLICIES = ["full", "keydiff", "knorm", "streaming", "random", "primekv", "h2o", "tova", "tova:scope=group",
            "snapkv:window=4", "oracle"]
# the conservation property tests take every registered policy (the ten later ones of docs/policies.md too; small
# windows, partitions and sketches for these short traces; kvzip reads the rows random_trace adds)
ALL_POLICIES = POLICIES + ["expected_attention", "lagkv:lag=8", "cur", "qfilter", "capkv", "chunkkv:size=4",
                           "compactor:chunk=16:sketch=4", "criticalkv", "scissorhands", "kvzip",
                           "h2o:normalize=age", "snapkv:preset=paper"]


def run(*args):
    return subprocess.run([KVTRACE] + [str(a) for a in args], capture_output=True, text=True)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def pyramid_caps(N, L, w=32, beta=20.0):
    """docs/allocators.md's formula, rounded by largest remainder (ties to the lower layer)."""
    if L == 1:
        return np.array([N])
    lo = (N - w) / beta
    hi = 2 * (N - w) - lo
    x = np.array([w + hi - l * (hi - lo) / (L - 1) for l in range(L)])
    f = np.floor(x)
    extra = int(round(L * N - f.sum()))
    order = sorted(range(L), key=lambda l: (-(x[l] - f[l]), l))
    out = f.astype(np.int64)
    for l in order[:extra]:
        out[l] += 1
    return out


def chunks(T, P, B, C):
    out, p0 = [], 0
    while p0 < T:
        p1 = p0 + B if p0 < P else p0 + C
        if p0 < P and p1 > P:
            p1 = P
        out.append((p0, min(p1, T)))
        p0 = out[-1][1]
    return out


def runs_of(res):
    with h5py.File(os.path.join(res, "results.h5"), "r") as f:
        return [(g.attrs["policy"], g.attrs["params"], g.attrs["allocator"], int(g.attrs["budget"]),
                 g["retained"][:], g["head_budget"][:], g["step_candidates"][:] if "step_candidates" in g else None,
                 g["step_kept"][:] if "step_kept" in g else None) for _, g in sorted(f["runs"].items())]


def check_conservation(res, L, K, T, tag):
    bad = []
    for policy, params, alloc, N, ret, hb, cand, kept in runs_of(res):
        name = "%s %s N=%d" % (policy + (":" + params if params else ""), alloc, N)
        layer_scope = policy == "tova" and params == "scope=layer"
        if (ret >= 0).sum(axis=2).tolist() != hb.tolist():
            bad.append("%s: head_budget is not the retained count" % name)
        if policy == "full":
            if not (kept == cand).all():
                bad.append("%s: full evicted" % name)
            continue
        if alloc.startswith("adakv") and not layer_scope:
            for l in range(L):
                c, k = cand[l].sum(axis=0), kept[l].sum(axis=0)
                ev = c > K * N
                if not (k[ev] == K * N).all():
                    bad.append("%s: layer %d keeps %s, not K*N = %d, at evicting steps" % (name, l, k[ev][:5], K * N))
                if not (kept[l][:, ~ev] == cand[l][:, ~ev]).all():
                    bad.append("%s: layer %d evicted below its total" % (name, l))
                if ev.any() and not ((kept[l][:, ev] >= 1) & (kept[l][:, ev] <= cand[l][:, ev])).all():
                    bad.append("%s: a head keeps < 1 or more than its candidates" % name)
            continue
        caps = np.full((L, K), N) if alloc == "uniform" or alloc.startswith("adakv") else \
            np.repeat(pyramid_caps(N, L, *pyramid_params(alloc))[:, None], K, axis=1)
        check_static(name, cand, kept, caps, N, bad)
    check(not bad, "%s: conservation at every step (%s)" % (tag, res), "; ".join(bad[:5]))


def check_static(name, cand, kept, caps, N, bad):
    """The static rule: stream (l, g) keeps exactly caps[l, g] whenever its
    candidates exceed it (all of them otherwise), and once every stream is
    full the total is L*K*N. Failures are appended to `bad`."""
    L, K = caps.shape
    full_step = np.ones(cand.shape[2], bool)
    for l in range(L):
        for g in range(K):
            ev = cand[l, g] > caps[l, g]
            if not (kept[l, g][ev] == caps[l, g]).all() or not (kept[l, g][~ev] == cand[l, g][~ev]).all():
                bad.append("%s: (%d, %d) does not keep its capacity %d" % (name, l, g, caps[l, g]))
            full_step &= cand[l, g] >= caps[l, g]
    if full_step.any() and not (kept.sum(axis=(0, 1))[full_step] == L * K * N).all():
        bad.append("%s: once every stream is full the total is not L*K*N" % name)


def pyramid_params(alloc):
    kv = dict(p.split("=") for p in alloc.split(":")[1:])
    return int(kv.get("window", 32)), float(kv.get("beta", 20))


def random_trace(tmp, rng, trial, seed):
    """A synthetic trace of random shape (1-3 layers, 1, 2 or 4 kv heads, 60-140 tokens) for the property tests."""
    L, K = int(rng.integers(1, 4)), int(rng.choice([1, 2, 4]))
    H, T = K * int(rng.choice([1, 2])), int(rng.integers(60, 140))
    P = int(rng.integers(T // 3, T))
    trace = os.path.join(tmp, "prop%d.h5" % trial)
    r = run("synth", "--layers", L, "--heads", H, "--kv-heads", K, "--head-dim", 8, "--tokens", T,
            "--prompt-len", P, "--seed", seed, "--quiet", "-o", trace)
    check(r.returncode == 0, "synth trace %d (L=%d H=%d K=%d T=%d)" % (trial, L, H, K, T), r.stderr)
    if r.returncode == 0:  # kvzip's scores: synth records no reconstruction pass, random weights stand in
        with h5py.File(trace, "r+") as f:
            f["attention/kvzip"] = rng.random((L, H, T)).astype(np.float32)
    return trace, L, K, T


def property_test(tmp):
    rng = np.random.default_rng(17)
    cases = 0
    for trial in range(4):
        trace, L, K, T = random_trace(tmp, rng, trial, trial)
        budgets = sorted({int(rng.integers(4, 12)), int(rng.integers(12, T // 2))})
        B, C = int(rng.integers(1, 20)), int(rng.integers(1, 5))
        res = os.path.join(tmp, "prop%d" % trial)
        r = run("sim", trace, "--policies", ",".join(ALL_POLICIES), "--allocators",
                "uniform,pyramid:window=3:beta=4,adakv,adakv:alpha=0", "--budgets",
                ",".join(map(str, budgets)), "--chunk", B, "--decode-chunk", C, "--step-counts", "--quiet",
                "-o", res)
        check(r.returncode == 0, "sim trial %d (N=%s, B=%d, C=%d)" % (trial, budgets, B, C), r.stderr)
        if r.returncode == 0:
            check_conservation(res, L, K, T, "trial %d" % trial)
            cases += len(ALL_POLICIES) * 4 * len(budgets)
    print("# conservation: %d (policy, allocator, budget) runs over 4 random traces" % cases)


def write_trace(path, L=3, H=4, K=2, D=8, T=70, P=50, seed=9):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["kvtrace_schema"] = np.array([1, 0], dtype=np.int32)
        for k, v in dict(creator="test_alloc", model_name="brute", architecture="llama", rope_style="neox",
                         capture_mode="full", storage_dtype="f32").items():
            a[k] = v
        for k, v in dict(n_layers=L, n_heads=H, n_kv_heads=K, head_dim=D, n_tokens=T, prompt_len=P,
                         vocab_size=100, capture_chunk=0).items():
            a[k] = np.int64(v)
        a["rope_theta"] = 10000.0
        f["tokens"] = rng.integers(0, 100, T).astype(np.int32)
        f["keys"] = (rng.normal(size=D) + rng.normal(size=(L, K, T, D)) * rng.uniform(0.3, 2, size=(L, K, 1, 1))
                     ).astype(np.float32)
        f["values"] = rng.normal(size=(L, K, T, D)).astype(np.float32)
        f["queries"] = (1.5 * rng.normal(size=(L, H, T, D))).astype(np.float32)
    with h5py.File(path, "r") as f:
        return f["keys"][:].astype(np.float64), f["queries"][:].astype(np.float64)


def scores(policy, keys, queries, pos, p1, G, g):
    """keys [n][D] of kv head g; the policy's score of each candidate (higher keeps)."""
    if policy == "knorm":
        return -np.linalg.norm(keys, axis=1)
    q = queries[g * G:(g + 1) * G, p1 - 1]           # tova:scope=group: the chunk's last query, the group's heads
    s = q @ keys.T / math.sqrt(keys.shape[1])
    a = np.exp(s - s.max(axis=1, keepdims=True))
    return (a / a.sum(axis=1, keepdims=True)).mean(axis=0)


def rank(sc, pos):
    return sorted(range(len(sc)), key=lambda i: (-sc[i], -pos[i]))


def adakv_counts(sc, pos, N, alpha, comparable):
    K = len(sc)
    f = max(1, int(math.floor(alpha * N + 1e-9)))
    order = [rank(sc[x], pos[x]) for x in range(K)]
    counts = [min(f, len(sc[x])) for x in range(K)]
    keys = []
    for x in range(K):
        s = np.asarray(sc[x])
        fin = s[np.isfinite(s)]
        mu, sd = (fin.mean(), fin.std()) if len(fin) else (0.0, 0.0)
        z = s if comparable else np.where(np.isfinite(s), (s - mu) / sd if sd > 0 else 0.0, s)
        keys += [(-z[i], -pos[x][i], x) for i in order[x][counts[x]:]]
    for _, _, x in sorted(keys)[:K * N - sum(counts)]:
        counts[x] += 1
    return counts


def numpy_replay(keys, queries, policy, alloc, N, B, C, P, alpha=0.2):
    """Final kept positions [L][K] under pyramid (window 4, beta 3) or adakv."""
    L, K, T, _ = keys.shape
    G = queries.shape[1] // K
    caps = pyramid_caps(N, L, 4, 3.0) if alloc == "pyramid" else None
    out = []
    for l in range(L):
        kept = [[] for _ in range(K)]
        for p0, p1 in chunks(T, P, B, C):
            cand = [kept[g] + list(range(p0, p1)) for g in range(K)]
            sc = [scores(policy, keys[l, g, cand[g]], queries[l], cand[g], p1, G, g) for g in range(K)]
            if alloc == "pyramid":
                counts = [min(caps[l], len(cand[g])) for g in range(K)]
            elif sum(map(len, cand)) > K * N:
                counts = adakv_counts(sc, cand, N, alpha, policy != "knorm")
            else:
                counts = [len(c) for c in cand]
            kept = [sorted(cand[g][i] for i in rank(sc[g], cand[g])[:counts[g]]) for g in range(K)]
        out.append(kept)
    return out


def same_kept(ret, want, what):
    """One check: results.h5's retained [L][K][width] (-1 padded) equals want[l][g] (lists of positions)."""
    L, K = ret.shape[:2]
    diff = [(l, g) for l in range(L) for g in range(K) if [p for p in ret[l, g] if p >= 0] != want[l][g]]
    check(not diff, what, "differ at %s: %s vs %s" % (diff[:3], ret[diff[0]].tolist() if diff else "",
                                                      want[diff[0][0]][diff[0][1]] if diff else ""))


def independent_replay(tmp):
    trace = os.path.join(tmp, "brute.h5")
    keys, queries = write_trace(trace)
    L, K, T = keys.shape[:3]
    B, C, P = 8, 3, 50
    for policy in ("knorm", "tova:scope=group"):
        for alloc, spec in (("pyramid", "pyramid:window=4:beta=3"), ("adakv", "adakv")):
            for N in (6, 13):
                res = os.path.join(tmp, "brute_%s_%s_%d" % (policy.replace(":", "_"), alloc, N))
                r = run("sim", trace, "--policies", policy, "--allocators", spec, "--budgets", N, "--chunk", B,
                        "--decode-chunk", C, "--quiet", "-o", res)
                check(r.returncode == 0, "sim %s %s N=%d" % (policy, spec, N), r.stderr)
                if r.returncode:
                    continue
                same_kept(runs_of(res)[0][4], numpy_replay(keys, queries, policy.split(":")[0], alloc, N, B, C, P),
                          "%s %s N=%d: kept sets equal the numpy replay's" % (policy, spec, N))
                if alloc == "pyramid":
                    hb = runs_of(res)[0][5]
                    want_caps = np.minimum(pyramid_caps(N, L, 4, 3.0), T)
                    check((hb == want_caps[:, None]).all(), "pyramid N=%d: head_budget = the closed form %s" %
                          (N, want_caps.tolist()), str(hb.tolist()))


def alpha_one_is_uniform(tmp):
    trace = os.path.join(tmp, "brute.h5")
    res = os.path.join(tmp, "alpha1")
    r = run("sim", trace, "--policies", "snapkv,h2o,knorm,tova:scope=group", "--allocators", "uniform,adakv:alpha=1",
            "--budgets", "5,12,40", "--chunk", 8, "--decode-chunk", 2, "--quiet", "-o", res)
    check(r.returncode == 0, "sim uniform vs adakv:alpha=1", r.stderr)
    rows = read_csv(os.path.join(res, "results.csv"))
    a = [{k: v for k, v in row.items() if k not in ("allocator", "run", "same_as")} for row in rows if row["allocator"] == "uniform"]
    b = [{k: v for k, v in row.items() if k not in ("allocator", "run", "same_as")} for row in rows if row["allocator"] == "adakv:alpha=1"]
    check(all(row["same_as"] == row["run"].replace("@adakv:alpha=1/", "@uniform/") for row in rows
              if row["allocator"] == "adakv:alpha=1"), "adakv:alpha=1's rows say same_as uniform's run")
    check(a == b and len(a) > 0, "adakv:alpha=1 gives uniform's results.csv (%d rows)" % len(a))
    runs = runs_of(res)
    uni = {(p, q, n): ret.tolist() for p, q, al, n, ret, *_ in runs if al == "uniform"}
    ada = {(p, q, n): ret.tolist() for p, q, al, n, ret, *_ in runs if al != "uniform"}
    check(uni == ada, "adakv:alpha=1 keeps uniform's sets")


def fractions(tmp):
    trace = os.path.join(tmp, "brute.h5")   # T = 70
    res = os.path.join(tmp, "frac")
    r = run("sim", trace, "--policies", "knorm", "--budgets", "10%,25%,30", "--chunk", 8, "--quiet", "-o", res)
    check(r.returncode == 0, "sim --budgets 10%,25%,30", r.stderr)
    rows = read_csv(os.path.join(res, "summary.csv"))
    got = sorted({(int(x["budget"]), x["budget_fraction"], x["allocator"]) for x in rows})
    check(got == [(7, "0.1", "uniform"), (17, "0.25", "uniform"), (30, "", "uniform")],
          "N = floor(F*T) and budget_fraction recorded (empty for N given)", str(got))
    with h5py.File(os.path.join(res, "results.h5"), "r") as f:
        fr = sorted(float(g.attrs.get("budget_fraction", -1)) for g in f["runs"].values())
    check(fr == [-1, 0.1, 0.25], "results.h5: @budget_fraction only where given", str(fr))


def bad_input(tmp):
    trace = os.path.join(tmp, "brute.h5")
    cases = [("unknown allocator", ["--allocators", "nope"], "unknown allocator 'nope'"),
             ("unknown parameter", ["--allocators", "adakv:beta=2"], "unknown parameter 'beta'"),
             ("parameter out of range", ["--allocators", "adakv:alpha=2"], "out of range"),
             ("allocator twice", ["--allocators", "adakv,adakv:alpha=0.2"], "twice"),
             ("pyramid budget below its window", ["--allocators", "pyramid", "--budgets", "16"], "below its window"),
             ("budget 0%", ["--budgets", "0%"], "percentage"),
             ("budget 101%", ["--budgets", "101%"], "percentage"),
             ("budget 1% of 70 tokens", ["--budgets", "1%"], "less than one row"),
             ("budget fraction and N the same", ["--budgets", "10%,7"], "twice")]
    for what, args, says in cases:
        out = os.path.join(tmp, "bad")
        argv = ["sim", trace, "--policies", "knorm", "--chunk", 8, "-o", out] + args
        if "--budgets" not in args:
            argv += ["--budgets", 32]
        r = run(*argv)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and says in r.stderr and not os.path.exists(out),
              "%s: exit 2, one line, nothing written" % what, "rc %d: %s" % (r.returncode, r.stderr))


def main_label(row):
    """main's labels in today's form: h2o has since gained `normalize` and snapkv `pool` (defaults none, avg)."""
    row = dict(row)
    for key in ("params", "config"):
        if key in row:
            v = row[key]
            if row.get("policy", v.split(":")[0]) == "h2o":
                v = v.replace("recent=", "normalize=none:recent=")
            elif row.get("policy", v.split(":")[0]) == "snapkv":
                v = v.replace("window=", "pool=avg:window=")
            row[key] = v
    return row


def uniform_equals_main(tmp):
    model = os.environ.get("KVTRACE_MODEL_DIR")
    if not (model and os.path.exists(os.path.join(model, "stories260K.gguf"))):
        check(False, "the model for the demo-trace comparison", str(model))
        return
    trace = os.path.join(tmp, "demo.h5")
    r = run("capture", "--quiet", "--prompt", "Once upon a time", "--generate", 495, "--chunk", 32, "-o", trace)
    check(r.returncode == 0, "the demo trace (stories260K, 500 tokens)", r.stderr)
    args = [trace, "--policies", ",".join(POLICIES), "--budgets",
            "32,64,128,256", "--chunk", 32, "--quiet"]
    ours, theirs = os.path.join(tmp, "ours"), os.path.join(tmp, "theirs")
    base = [MAIN] if MAIN else [KVTRACE]
    r1 = run("sim", *args, "--allocators", "uniform", "-o", ours)
    r2 = subprocess.run(base + ["sim", *map(str, args), "-o", theirs], capture_output=True, text=True)
    check(r1.returncode == 0 and r2.returncode == 0, "sim here and main's sim on the demo trace", r1.stderr + r2.stderr)
    new = {"allocator", "budget_fraction", "head_budget", "head_budget_mean"}
    for name in ("results.csv", "summary.csv"):
        a = [{k: v for k, v in row.items() if k not in new} for row in read_csv(os.path.join(ours, name))]
        b = [{k: v for k, v in (main_label(row) if MAIN else row).items() if k not in new}
             for row in read_csv(os.path.join(theirs, name))]
        check(a == b, "uniform: %s equals main's, value for value (%d rows)" % (name, len(b)))
    a = [(x["config"], x["budget"], x["calls"], x["candidates"]) for x in read_csv(os.path.join(ours, "timing.csv"))]
    b = [(x["config"], x["budget"], x["calls"], x["candidates"])
         for x in (map(main_label, read_csv(os.path.join(theirs, "timing.csv"))) if MAIN else
                   read_csv(os.path.join(theirs, "timing.csv")))]
    check(a == b, "uniform: the same scoring calls and candidates as main")
    with h5py.File(os.path.join(ours, "results.h5"), "r") as f, h5py.File(os.path.join(theirs, "results.h5"), "r") as g:
        same = sorted(f["runs"]) == sorted(g["runs"]) and all(
            np.array_equal(f["runs"][n]["retained"][:], g["runs"][n]["retained"][:]) and
            np.array_equal(f["runs"][n]["final_logdet"][:], g["runs"][n]["final_logdet"][:]) for n in g["runs"])
    check(same, "uniform: results.h5 kept sets and log-dets equal main's")
    rows = read_csv(os.path.join(ours, "results.csv"))
    check(all(r["allocator"] == "uniform" and r["budget_fraction"] == "" for r in rows),
          "uniform: allocator 'uniform', budget_fraction empty")
    check(all(int(r["head_budget"]) == (500 if r["policy"] == "full" else int(r["budget"])) for r in rows),
          "uniform: head_budget = N (T for full)")


def main():
    with tempfile.TemporaryDirectory(prefix="kvt_alloc_") as tmp:
        independent_replay(tmp)
        alpha_one_is_uniform(tmp)
        fractions(tmp)
        bad_input(tmp)
        property_test(tmp)
        uniform_equals_main(tmp)
    finish()


if __name__ == "__main__":
    main()
