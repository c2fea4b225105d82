"""Budget allocators headkv, duo, cake and global in sim, checked against computations
written here from docs/allocators.md's definitions (numpy), not from the C:

- conservation at every step (sim --step-counts), a property test over random
  synthetic traces, budgets and chunk sizes, for every policy that can pair
  with each: static (headkv, duo): a stream keeps exactly its capacity (the
  numpy capacities) whenever its candidates exceed it, and once every stream
  is full the total is L*K*N; dynamic with the whole model as the scope (cake,
  global): the model keeps exactly L*K*N at every step its candidates exceed
  that, each head between 1 and its candidates, and nothing is evicted below
  (a layer-scope policy, tova, is one stream per layer: under headkv and duo
  it gets the mean of its heads' capacities, rounded to keep the total);
- headkv's capacities equal the formula on a given head-score file; duo's
  streaming heads are the ratio least attending outside sinks + recent (from
  the trace's column sums) and keep exactly sinks + recent; the others' caps;
- an independent lock-step replay of cake (knorm) and global (tova:scope=group)
  gives the same kept sets;
- duo:ratio=0 gives uniform's numbers; global on a one-layer one-head trace
  gives uniform's numbers;
- bad input: head-score files of every bad shape (exit 3, one line naming the
  file, nothing written), headkv without a file, duo's budget too small,
  global with a policy whose scores do not compare, a lock-step replay over
  --max-memory (exit 2). TAP."""
import math
import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, finish  # noqa: E402
from test_alloc import (ALL_POLICIES, POLICIES, check_static, chunks, random_trace, rank, read_csv, run, runs_of,  # noqa: E402
                        same_kept, write_trace)

COMPARABLE = ["full", "streaming", "random", "h2o", "tova", "tova:scope=group", "snapkv:window=4", "oracle",
              "lagkv:lag=8", "cur", "scissorhands", "kvzip", "h2o:normalize=age"]


def write_scores(path, L, K, scores, header="layer,kv_head,score,extra", rows=None):
    with open(path, "w") as f:
        f.write(header + "\n")
        for l, g, s in rows if rows is not None else [(l, g, scores[l, g]) for l in range(L) for g in range(K)]:
            f.write("%s,%s,%s,x\n" % (l, g, s))


def headkv_caps(scores, N, beta=1.01):
    """docs/allocators.md's formula, s normalised to sum 1, largest remainder (ties to the
    lower stream), then every stream below 1 raised to 1 from the largest."""
    L, K = scores.shape
    S = L * K
    s = scores.reshape(-1) / scores.sum()
    c = s * (N / beta) * S + N - N / beta
    cap = np.floor(c).astype(np.int64)
    extra = S * N - int(cap.sum())
    for x in sorted(range(S), key=lambda x: (-(c[x] - math.floor(c[x])), x))[:extra]:
        cap[x] += 1
    for x in range(S):
        while cap[x] < 1:
            big = int(np.argmax(cap))
            cap[big] -= 1
            cap[x] += 1
    return cap.reshape(L, K)


def duo_rank_scores(colsum, K, sinks=4, recent=-1):
    """Per kv head: the share of its query heads' attention on keys neither
    sinks nor among the trace's last W positions (W = recent, 64 when auto)."""
    L, H, T = colsum.shape
    G = H // K
    W = recent if recent >= 0 else 64
    return np.array([[colsum[l, g * G:(g + 1) * G, sinks:max(sinks, T - W)].astype(np.float64).sum() / (G * T)
                      for g in range(K)] for l in range(L)])


def duo_caps(scores, N, ratio=0.5, sinks=4, recent=-1):
    L, K = scores.shape
    S = L * K
    flat = scores.reshape(-1)
    order = sorted(range(S), key=lambda x: (flat[x], x))   # least important first
    ns = int(math.floor(ratio * S + 1e-9))
    cs = sinks + (recent if recent >= 0 else min(64, N // 2))
    rest, m = S * N - ns * cs, S - ns
    cap = np.zeros(S, np.int64)
    streaming = np.zeros(S, bool)
    for r, x in enumerate(order):
        if r < ns:
            cap[x], streaming[x] = cs, True
        else:
            cap[x] = rest // m + (S - 1 - r < rest % m)
    return cap.reshape(L, K), streaming.reshape(L, K)


def layer_caps(caps, N):
    """A layer-scope policy keeps one set per layer: each layer gets the mean of
    its heads' capacities, by largest remainder over the layers (ties to the
    lower), so that the total stays L*K*N."""
    L, K = caps.shape
    sums = caps.sum(axis=1)
    out = sums // K
    extra = L * N - int(out.sum())
    for l in sorted(range(L), key=lambda l: (-(sums[l] % K), l))[:extra]:
        out[l] += 1
    return np.repeat(out[:, None], K, axis=1)


def check_model(name, cand, kept, L, K, N, bad):
    c, k = cand.sum(axis=(0, 1)), kept.sum(axis=(0, 1))
    ev = c > L * K * N
    if not (k[ev] == L * K * N).all():
        bad.append("%s: the model keeps %s, not L*K*N = %d, at evicting steps" % (name, k[ev][:5], L * K * N))
    if not (kept[:, :, ~ev] == cand[:, :, ~ev]).all():
        bad.append("%s: evicted below the model's total" % name)
    if ev.any() and not ((kept[:, :, ev] >= 1) & (kept[:, :, ev] <= cand[:, :, ev])).all():
        bad.append("%s: a head keeps < 1 or more than its candidates" % name)


def check_conservation(res, L, K, caps_of, tag):
    bad, n = [], 0
    for policy, params, alloc, N, ret, hb, cand, kept in runs_of(res):
        name = "%s %s N=%d" % (policy + (":" + params if params else ""), alloc, N)
        n += 1
        if (ret >= 0).sum(axis=2).tolist() != hb.tolist():
            bad.append("%s: head_budget is not the retained count" % name)
        if policy == "full":
            if not (kept == cand).all():
                bad.append("%s: full evicted" % name)
        elif alloc.startswith("cake") or alloc == "global":
            check_model(name, cand, kept, L, K, N, bad)
        else:
            caps = caps_of(alloc, N)
            check_static(name, cand, kept, layer_caps(caps, N) if policy == "tova" and params == "scope=layer"
                         else caps, N, bad)
    check(not bad and n > 0, "%s: conservation at every step (%d runs)" % (tag, n), "; ".join(bad[:5]))
    return n


def alloc_params(alloc):
    return {k: float(v) for k, v in (p.split("=") for p in alloc.split(":")[1:])}


def property_test(tmp):
    rng = np.random.default_rng(1717)
    cases = 0
    for trial in range(4):
        trace, L, K, T = random_trace(tmp, rng, trial, 100 + trial)
        hs = rng.uniform(0, 3, size=(L, K))
        if L * K > 1:
            hs[0, 0] = 0.0   # a head of no importance: its capacity is the base (at least 1)
        csv_path = os.path.join(tmp, "hs%d.csv" % trial)
        write_scores(csv_path, L, K, hs)
        budgets = sorted({int(rng.integers(4, 12)), int(rng.integers(12, T // 2))})
        B, C = int(rng.integers(1, 20)), int(rng.integers(1, 5))

        def caps_of(alloc, N):
            p = alloc_params(alloc)
            if alloc.startswith("headkv"):
                return headkv_caps(hs, N, p.get("beta", 1.01))
            sinks, recent = int(p.get("sinks", 4)), int(p.get("recent", -1))
            return duo_caps(hs, N, p.get("ratio", 0.5), sinks, recent)[0]   # the file ranks duo's heads too

        for what, policies, allocs in (
                ("static", ALL_POLICIES, "headkv,headkv:beta=2,duo:recent=2:sinks=1,duo:ratio=0.3:recent=1:sinks=2"),
                ("cake", ALL_POLICIES, "cake,cake:tau1=1:tau2=1:window=5"),
                ("global", COMPARABLE, "global")):
            res = os.path.join(tmp, "prop%d_%s" % (trial, what))
            r = run("sim", trace, "--policies", ",".join(policies), "--allocators", allocs, "--head-scores",
                    csv_path, "--budgets", ",".join(map(str, budgets)), "--chunk", B, "--decode-chunk", C,
                    "--step-counts", "--quiet", "-o", res) if what == "static" else \
                run("sim", trace, "--policies", ",".join(policies), "--allocators", allocs, "--budgets",
                    ",".join(map(str, budgets)), "--chunk", B, "--decode-chunk", C, "--step-counts", "--quiet",
                    "-o", res)
            check(r.returncode == 0, "sim trial %d %s (N=%s, B=%d, C=%d)" % (trial, what, budgets, B, C), r.stderr)
            if r.returncode == 0:
                cases += check_conservation(res, L, K, caps_of, "trial %d %s" % (trial, what))
    print("# conservation: %d (policy, allocator, budget) runs over 4 random traces" % cases)


def window_spread(keys, queries, pos, now, G, g, window=32):
    """Entropy and summed variance of the window attention of stream (layer, g):
    the last `window` query positions up to now over the candidates they can
    see (pos <= i), softmax per query head, mean over the group's heads, at
    the candidates before the window; unbiased variance over the window rows."""
    D = keys.shape[1]
    i0 = max(0, now - window + 1)
    cols = sum(1 for p in pos if p < i0)
    if cols == 0:
        return 0.0, 0.0
    rows = []
    for i in range(i0, now + 1):
        vis = sum(1 for p in pos if p <= i)
        s = queries[g * G:(g + 1) * G, i] @ keys[:vis].T / math.sqrt(D)
        a = np.exp(s - s.max(axis=1, keepdims=True))
        rows.append((a / a.sum(axis=1, keepdims=True)).mean(axis=0)[:cols])
    a = np.array(rows)
    H = -(a * np.log(a + 1e-10)).sum()
    V = a.var(axis=0, ddof=1).sum() if len(rows) > 1 else 0.0
    return H, V


def cake_counts(spreads, n, L, K, N, tau1=1.6, tau2=0.6):
    S = L * K
    w = []
    for l in range(L):
        Hs = sum(spreads[l * K + g][0] for g in range(K))
        Vs = sum(spreads[l * K + g][1] for g in range(K))
        w += [Hs ** (1 / tau1) * Vs ** (1 / tau2)] * K
    w = np.array(w)
    if not (w.sum() > 0) or not np.isfinite(w.sum()):
        w = np.ones(S)
    counts = [1] * S
    left = S * N - S
    saturated = True
    while left > 0 and saturated:
        op = [x for x in range(S) if counts[x] < n[x]]
        W = sum(w[x] for x in op)
        if not W > 0:
            break
        R, saturated = left, False
        for x in op:
            add = int(math.floor(R * w[x] / W))
            if add >= n[x] - counts[x]:
                add, saturated = n[x] - counts[x], True
            counts[x] += add
            left -= add
    while left > 0:
        for x in sorted([x for x in range(S) if counts[x] < n[x]], key=lambda x: (-w[x], x)):
            if left == 0:
                break
            counts[x] += 1
            left -= 1
    return counts


def global_counts(sc, pos, L, K, N):
    S = L * K
    order = [rank(sc[x], pos[x]) for x in range(S)]
    counts = [1] * S
    rest = [(-sc[x][i], -pos[x][i], x) for x in range(S) for i in order[x][1:]]
    for _, _, x in sorted(rest)[:S * N - S]:
        counts[x] += 1
    return counts


def tova_group(keys, queries, p1, G, g):
    q = queries[g * G:(g + 1) * G, p1 - 1]
    s = q @ keys.T / math.sqrt(keys.shape[1])
    a = np.exp(s - s.max(axis=1, keepdims=True))
    return (a / a.sum(axis=1, keepdims=True)).mean(axis=0)


def numpy_lockstep(keys, queries, alloc, N, B, C, P):
    """Final kept positions [L][K] of a lock-step replay: cake with knorm, global with tova:scope=group."""
    L, K, T, _ = keys.shape
    G = queries.shape[1] // K
    kept = [[[] for _ in range(K)] for _ in range(L)]
    for p0, p1 in chunks(T, P, B, C):
        cand = [kept[l][g] + list(range(p0, p1)) for l in range(L) for g in range(K)]
        n = [len(c) for c in cand]
        if alloc == "cake":
            sc = [-np.linalg.norm(keys[x // K, x % K, cand[x]], axis=1) for x in range(L * K)]
        else:
            sc = [tova_group(keys[x // K, x % K, cand[x]], queries[x // K], p1, G, x % K) for x in range(L * K)]
        if sum(n) > L * K * N:
            if alloc == "cake":
                spreads = [window_spread(keys[x // K, x % K, cand[x]], queries[x // K], cand[x], p1 - 1, G, x % K)
                           for x in range(L * K)]
                counts = cake_counts(spreads, n, L, K, N)
            else:
                counts = global_counts(sc, cand, L, K, N)
        else:
            counts = n
        for x in range(L * K):
            kept[x // K][x % K] = sorted(cand[x][i] for i in rank(sc[x], cand[x])[:counts[x]])
    return kept


def independent(tmp):
    trace = os.path.join(tmp, "brute.h5")
    keys, queries = write_trace(trace)
    L, K, T = keys.shape[:3]
    B, C, P = 8, 3, 50
    for alloc, policy in (("cake", "knorm"), ("global", "tova:scope=group")):
        for N in (6, 13):
            res = os.path.join(tmp, "brute_%s_%d" % (alloc, N))
            r = run("sim", trace, "--policies", policy, "--allocators", alloc, "--budgets", N, "--chunk", B,
                    "--decode-chunk", C, "--quiet", "-o", res)
            check(r.returncode == 0, "sim %s %s N=%d" % (policy, alloc, N), r.stderr)
            if r.returncode:
                continue
            same_kept(runs_of(res)[0][4], numpy_lockstep(keys, queries, alloc, N, B, C, P),
                      "%s (%s) N=%d: kept sets equal the numpy lock-step replay's" % (alloc, policy, N))


def static_caps(tmp):
    """headkv's capacities from a file, duo's head choice from the column sums."""
    L, H, K, T = 4, 4, 2, 200
    trace = os.path.join(tmp, "static.h5")
    r = run("synth", "--layers", L, "--heads", H, "--kv-heads", K, "--head-dim", 8, "--tokens", T,
            "--prompt-len", 150, "--seed", 5, "--quiet", "-o", trace)
    check(r.returncode == 0, "synth for the capacity checks", r.stderr)
    hs = np.array([[0.5, 3.0], [0.0, 1.0], [2.0, 2.0], [0.25, 7.0]])
    csv_path = os.path.join(tmp, "static.csv")
    write_scores(csv_path, L, K, hs)
    with h5py.File(trace, "r") as f:
        colsum = f["attention/colsum"][:]
    for N in (10, 24):
        res = os.path.join(tmp, "static_%d" % N)
        r = run("sim", trace, "--policies", "h2o,knorm", "--allocators", "headkv,headkv:beta=3,duo,duo:ratio=0.75",
                "--head-scores", csv_path, "--budgets", N, "--chunk", 16, "--quiet", "-o", res)
        check(r.returncode == 0, "sim headkv, duo with --head-scores N=%d" % N, r.stderr)
        r2 = run("sim", trace, "--policies", "h2o", "--allocators", "duo,duo:ratio=0.75", "--budgets", N,
                 "--chunk", 16, "--quiet", "-o", res + "_trace")
        check(r2.returncode == 0, "sim duo ranked by the trace's column sums N=%d" % N, r2.stderr)
        if r.returncode or r2.returncode:
            continue
        for src, d in (("file", res), ("colsum", res + "_trace")):
            for policy, params, alloc, n, ret, hb, *_ in runs_of(d):
                p = alloc_params(alloc)
                if alloc.startswith("headkv"):
                    want, stream = headkv_caps(hs, N, p["beta"]), None
                else:
                    want, stream = duo_caps(hs if src == "file" else duo_rank_scores(colsum, K), N, p["ratio"])
                check((hb == np.minimum(want, T)).all(), "%s %s N=%d (%s): head_budget = the numpy capacities %s" %
                      (policy, alloc, N, src, want.tolist()), str(hb.tolist()))
                if stream is None:
                    continue
                cs = 4 + min(64, N // 2)
                expect = list(range(4)) + list(range(T - (cs - 4), T))
                ok = all([q for q in ret[l, g] if q >= 0] == expect
                         for l in range(L) for g in range(K) if stream[l, g])
                check(ok and stream.sum() == int(p["ratio"] * L * K),
                      "%s %s N=%d (%s): the %d streaming heads keep sinks + the most recent" %
                      (policy, alloc, N, src, stream.sum()))


def equal_to_uniform(tmp):
    trace = os.path.join(tmp, "brute.h5")
    res = os.path.join(tmp, "duo0")
    r = run("sim", trace, "--policies", "snapkv,h2o,knorm", "--allocators", "uniform,duo:ratio=0", "--budgets",
            "5,12,40", "--chunk", 8, "--decode-chunk", 2, "--head-scores", os.path.join(tmp, "hs_brute.csv"),
            "--quiet", "-o", res)
    check(r.returncode == 0, "sim uniform vs duo:ratio=0", r.stderr)
    if r.returncode == 0:
        rows = read_csv(os.path.join(res, "results.csv"))
        a = [{k: v for k, v in x.items() if k not in ("allocator", "run", "same_as")} for x in rows if x["allocator"] == "uniform"]
        b = [{k: v for k, v in x.items() if k not in ("allocator", "run", "same_as")} for x in rows if x["allocator"] != "uniform"]
        check(a == b and len(a) > 0, "duo:ratio=0 gives uniform's results.csv (%d rows)" % len(a))
    one = os.path.join(tmp, "one.h5")
    r = run("synth", "--layers", 1, "--heads", 2, "--kv-heads", 1, "--head-dim", 8, "--tokens", 90,
            "--prompt-len", 60, "--seed", 3, "--quiet", "-o", one)
    res = os.path.join(tmp, "global1")
    r = run("sim", one, "--policies", "snapkv,h2o,tova:scope=group,streaming", "--allocators", "uniform,global",
            "--budgets", "5,20", "--chunk", 8, "--decode-chunk", 3, "--quiet", "-o", res)
    check(r.returncode == 0, "sim uniform vs global on one layer, one kv head", r.stderr)
    if r.returncode == 0:
        rows = read_csv(os.path.join(res, "results.csv"))
        drop = ("allocator", "run", "same_as")
        a = [{k: v for k, v in x.items() if k not in drop} for x in rows if x["allocator"] == "uniform"]
        b = [{k: v for k, v in x.items() if k not in drop} for x in rows if x["allocator"] == "global"]
        check(a == b and len(a) > 0, "global on a one-layer one-head trace gives uniform's results.csv (%d rows)"
              % len(a))
        runs = runs_of(res)
        uni = {(p, q, n): ret.tolist() for p, q, al, n, ret, *_ in runs if al == "uniform"}
        glo = {(p, q, n): ret.tolist() for p, q, al, n, ret, *_ in runs if al == "global"}
        check(uni == glo, "global on one stream keeps uniform's sets")


def bad_input(tmp):
    trace = os.path.join(tmp, "brute.h5")   # L = 3, K = 2
    L, K = 3, 2
    good = np.arange(1, L * K + 1, dtype=float).reshape(L, K)
    all_rows = [(l, g, good[l, g]) for l in range(L) for g in range(K)]
    files = [("a missing row", dict(rows=all_rows[:-1]), "has no row"),
             ("an extra row (layer beyond the trace)", dict(rows=all_rows + [(3, 0, 1.0)]), "not in the trace"),
             ("a kv head beyond the trace", dict(rows=all_rows[:-1] + [(2, 2, 1.0)]), "not in the trace"),
             ("a duplicate row", dict(rows=all_rows + [(1, 1, 2.0)]), "twice"),
             ("a NaN score", dict(rows=all_rows[:-1] + [(2, 1, "nan")]), "score"),
             ("a negative score", dict(rows=all_rows[:-1] + [(2, 1, -1.0)]), ">= 0"),
             ("an infinite score", dict(rows=all_rows[:-1] + [(2, 1, "inf")]), "score"),
             ("every score 0", dict(rows=[(l, g, 0) for l, g, _ in all_rows]), "every score is 0"),
             ("a wrong header", dict(rows=all_rows, header="layer,head,score"), "header"),
             ("a non-integer layer", dict(rows=all_rows[:-1] + [("1.5", 1, 1.0)]), "not an integer"),
             ("the shape of another model (L=2, K=3)",
              dict(rows=[(l, g, 1.0) for l in range(2) for g in range(3)]), "not in the trace")]
    for what, kw, says in files:
        path = os.path.join(tmp, "bad_scores.csv")
        write_scores(path, L, K, None, **kw)
        out = os.path.join(tmp, "bad")
        r = run("sim", trace, "--policies", "knorm", "--allocators", "headkv", "--head-scores", path,
                "--budgets", 8, "--chunk", 8, "-o", out)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 3 and len(lines) == 1 and says in r.stderr and "bad_scores.csv" in r.stderr and
              not os.path.exists(out), "head-score file with %s: exit 3, one line naming the file, nothing written"
              % what, "rc %d: %s" % (r.returncode, r.stderr))
    hs_good = os.path.join(tmp, "hs_brute.csv")
    write_scores(hs_good, L, K, good)
    cases = [("headkv without --head-scores", ["--allocators", "headkv"], "needs --head-scores", 2),
             ("--head-scores without headkv or duo", ["--allocators", "adakv", "--head-scores",
                                                      os.path.join(tmp, "hs_brute.csv")], "only by", 2),
             ("a missing head-score file", ["--allocators", "headkv", "--head-scores", os.path.join(tmp, "nope.csv")],
              "cannot open", 1),   # as every input the operating system refuses (docs/reliability.md)
             ("duo's budget too small for its streaming heads", ["--allocators", "duo", "--budgets", 6,
                                                                 "--head-scores", hs_good],
              "too small for its streaming heads", 2),
             ("duo with every head streaming", ["--allocators", "duo:ratio=1", "--head-scores", hs_good],
              "all 6 heads streaming", 2),
             ("duo without column sums or --head-scores", ["--allocators", "duo"], "has no /attention/colsum", 3),
             ("global with knorm (scores not comparable)", ["--allocators", "global"], "knorm's scores", 2),
             ("a lock-step replay over --max-memory", ["--allocators", "cake", "--max-memory", "0.00001"],
              "--max-memory", 2),
             ("unknown cake parameter", ["--allocators", "cake:tau=1"], "unknown parameter 'tau'", 2),
             ("cake window below 2", ["--allocators", "cake:window=1"], "out of range", 2)]
    for what, args, says, code in cases:
        out = os.path.join(tmp, "bad")
        argv = ["sim", trace, "--chunk", 8, "-o", out] + args
        if "--budgets" not in args:
            argv += ["--budgets", 32]
        if "--policies" not in args:
            argv += ["--policies", "knorm"]
        r = run(*argv)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == code and len(lines) == 1 and says in r.stderr and not os.path.exists(out),
              "%s: exit %d, one line, nothing written" % (what, code), "rc %d: %s" % (r.returncode, r.stderr))


def main():
    with tempfile.TemporaryDirectory(prefix="kvt_alloc2_") as tmp:
        write_trace(os.path.join(tmp, "brute.h5"))
        bad_input(tmp)   # also writes hs_brute.csv, a good file for brute.h5
        independent(tmp)
        static_caps(tmp)
        equal_to_uniform(tmp)
        property_test(tmp)
    finish()


if __name__ == "__main__":
    main()
