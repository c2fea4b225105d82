"""sim against a brute-force replay written here in numpy (float64): kept sets,
out_rel_err, attn_recall (mean, p95, min) and final log-det per (policy,
budget, layer, head, phase), for several (N, B, decode chunk) with a decode
phase (h2o, tova in both scopes, snapkv and oracle included: their attention is recomputed here); full and
N >= T exact; tova:scope=layer keeps one set for every kv head of a layer;
thread-count invariance; budgets replayed in lock step equal each budget alone; bad arguments. TAP."""
import csv
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402
import datacmp  # noqa: E402

KVTRACE = os.environ["KVTRACE"]


L, H, K, D, T, P = 2, 4, 2, 8, 61, 40


def write_trace(path, queries=True, seed=5):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["kvtrace_schema"] = np.array([1, 0], dtype=np.int32)
        for k, v in dict(creator="test_sim", model_name="brute", architecture="llama", rope_style="neox",
                         capture_mode="full", storage_dtype="f32").items():
            a[k] = v
        for k, v in dict(n_layers=L, n_heads=H, n_kv_heads=K, head_dim=D, n_tokens=T, prompt_len=P,
                         vocab_size=100, capture_chunk=0).items():
            a[k] = np.int64(v)
        a["rope_theta"] = 10000.0
        f["tokens"] = rng.integers(0, 100, T).astype(np.int32)
        mean = rng.normal(size=D)
        f["keys"] = (mean + 0.6 * rng.normal(size=(L, K, T, D))).astype(np.float32)
        f["values"] = rng.normal(size=(L, K, T, D)).astype(np.float32)
        if queries:
            f["queries"] = (1.5 * rng.normal(size=(L, H, T, D))).astype(np.float32)


def policy_scores(name, pos, keys, vals, N):
    if name == "streaming":
        return np.where(pos < 4, np.inf, pos.astype(np.float64))
    if name == "knorm":
        return -np.linalg.norm(keys, axis=1)
    if name == "keydiff":
        kn = keys / np.linalg.norm(keys, axis=1, keepdims=True)
        mu = kn.mean(0)
        return -(keys @ mu) / (np.linalg.norm(keys, axis=1) * np.linalg.norm(mu))
    if name == "keydiff:window=0.25":
        s = policy_scores("keydiff", pos, keys, vals, N)
        w = int(np.floor(0.25 * N))
        if w:
            s[np.argsort(pos)[-w:]] = np.inf
        return s
    raise ValueError(name)


def h2o_scores(acc, C, N, recent):
    s = np.array([acc.get(int(p), 0.0) for p in C])
    w = min(int(np.floor(recent * N + 1e-9)), N)
    if w:
        s[np.argsort(C)[-w:]] = np.inf
    return s


def select(scores, pos, N):
    order = sorted(range(len(pos)), key=lambda i: (-scores[i], -pos[i]))
    return np.sort(np.array(order[:N]))


def chunk_attention(qs, kf, C, i, G):
    """Softmax weights of query i of every stream head over the visible candidates, mean over heads."""
    vis = C[C <= i]
    total = np.zeros(len(vis))
    for j in range(len(qs) if len(vis) else 0):  # a window query may see no candidate
        s = kf[j // G][vis] @ qs[j, i].astype(np.float64) / np.sqrt(D)
        a = np.exp(s - s.max())
        total += a / a.sum()
    return vis, total / len(qs)


def snapkv_scores(qs, kf, C, now, G, window, kernel):
    i0 = max(0, now - window + 1)
    total = np.zeros(len(C))
    for i in range(i0, now + 1):
        vis, a = chunk_attention(qs, kf, C, i, G)
        total[: len(vis)] += a  # visible candidates are a prefix of C
    left = kernel // 2
    pooled = np.array([sum(total[c + o] for o in range(-left, kernel - left) if 0 <= c + o < len(C))
                       for c in range(len(C))]) / kernel
    return np.where(C >= i0, np.inf, pooled)


def oracle_scores(qs, kf, C, now, G):
    total = np.zeros(len(C))
    for i in range(now + 1, T):
        for j in range(len(qs)):
            s = kf[j // G][: i + 1] @ qs[j, i].astype(np.float64) / np.sqrt(D)
            a = np.exp(s - s.max())
            a /= a.sum()
            total += a[C] / len(qs)  # summed directly over the future queries
    return total


def brute(qs, ks, vs, policy, N, B, dc):
    """One stream (kv heads sharing a kept set; query head j uses stream kv head j // G):
    per stream query head, lists of (i, err, recall); the final kept positions."""
    G = H // K
    kf, vf = ks.astype(np.float64), vs.astype(np.float64)
    res = {j: [] for j in range(len(qs))}
    S = np.array([], dtype=np.int64)
    acc = {}  # h2o: attention received since entering, by position
    p0 = 0
    while p0 < T:
        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
        C = np.concatenate([S, np.arange(p0, p1)])
        if policy.startswith("h2o"):
            for i in range(p0, p1):  # step 3: every chunk query, mean over the stream's heads
                vis, a = chunk_attention(qs, kf, C, i, G)
                for p, w in zip(vis, a):
                    acc[int(p)] = acc.get(int(p), 0.0) + w
        for i in range(max(p0, N), p1):
            vis = C[C <= i]
            for j in range(len(qs)):
                qi, kj, vj = qs[j, i].astype(np.float64), kf[j // G], vf[j // G]
                s_full = kj[: i + 1] @ qi / np.sqrt(D)
                a_full = np.exp(s_full - s_full.max())
                a_full /= a_full.sum()
                o_full = a_full @ vj[: i + 1]
                s = kj[vis] @ qi / np.sqrt(D)
                a = np.exp(s - s.max())
                a /= a.sum()
                o = a @ vj[vis]
                res[j].append((i, np.linalg.norm(o - o_full) / np.linalg.norm(o_full), a_full[vis].sum()))
        if policy != "full" and len(C) > N:
            if policy.startswith("h2o"):
                scores = h2o_scores(acc, C, N, float(policy.split("=")[1]) if "=" in policy else 0.5)
            elif policy.startswith("tova"):
                scores = chunk_attention(qs, kf, C, p1 - 1, G)[1]  # the last query sees every candidate
            elif policy.startswith("snapkv"):
                w, kern = (4, 3) if "window=4" in policy else (32, 5)
                scores = snapkv_scores(qs, kf, C, p1 - 1, G, w, kern)
            elif policy == "oracle":
                scores = oracle_scores(qs, kf, C, p1 - 1, G)
            else:
                scores = policy_scores(policy, C, kf[0][C], vf[0][C], N)
            C = C[select(scores, C, N)]
        S = C
        p0 = p1
    return res, S


def stats(rows):
    if not rows:   # no query measured: undefined, NaN (docs/sim.md#metrics)
        return 0, float("nan"), float("nan"), float("nan"), float("nan")
    e = np.array([r[1] for r in rows])
    rc = np.array([r[2] for r in rows])
    return len(rows), e.mean(), np.percentile(e, 95), rc.mean(), rc.min()


def logdet(keys):
    kn = keys.astype(np.float64)
    kn /= np.linalg.norm(kn, axis=1, keepdims=True)
    return np.linalg.slogdet(kn.T @ kn / len(kn) + 1e-6 * np.eye(D))[1]


def run_sim(trace, out, policies, budgets, B, dc, threads="2"):
    return subprocess.run([KVTRACE, "sim", trace, "--policies", ",".join(policies), "--budgets",
                           ",".join(map(str, budgets)), "--chunk", str(B), "--decode-chunk", str(dc),
                           "--threads", threads, "--quiet", "-o", out], capture_output=True, text=True)


def compare(tmp, trace, B, dc):
    policies = ["full", "streaming", "knorm", "keydiff", "keydiff:window=0.25", "h2o", "h2o:recent=0.2", "tova",
                "tova:scope=group", "snapkv", "snapkv:window=4:kernel=3", "oracle"]
    budgets = [8, 19, 100]
    out = os.path.join(tmp, "res_%d_%d" % (B, dc))
    r = run_sim(trace, out, policies, budgets, B, dc)
    check(r.returncode == 0, "sim runs (B=%d, decode chunk %d)" % (B, dc), r.stderr)
    if r.returncode:
        return
    rows, naming_bad = {}, []
    with open(os.path.join(out, "results.csv")) as f:
        for row in csv.DictReader(f):
            rows[(row["policy"], row["params"], int(row["budget"]), int(row["layer"]), int(row["q_head"]), row["phase"])] = row
            label = row["policy"] + (":" + row["params"] if row["params"] else "")
            if row["config"] != label or int(row["kv_head"]) != int(row["q_head"]) // (H // K):
                naming_bad.append(row)
    check(not naming_bad, "results.csv: config is policy[:params], kv_head is q_head // (H/K) (B=%d, dc=%d)" % (B, dc),
          str(naming_bad[:2]))
    with h5py.File(trace, "r") as t, h5py.File(os.path.join(out, "results.h5"), "r") as rh:
        q, k, v = t["queries"][:], t["keys"][:], t["values"][:]
        runs = {(g.attrs["policy"], g.attrs["params"], int(g.attrs["budget"])): g for g in rh["runs"].values()}
        # the groups sort in sim's order (policy-major, budgets as given): run0001, run0002, ...
        order = [(rh["runs"][n].attrs["config"], int(rh["runs"][n].attrs["budget"])) for n in sorted(rh["runs"])]
        want_order = [(rows_cfg, N) for rows_cfg in dict.fromkeys(
            r[0] + (":" + r[1] if r[1] else "") for r in rows) for N in budgets]
        check(sorted(rh["runs"]) == ["run%04d" % (i + 1) for i in range(len(policies) * len(budgets))]
              and order == want_order, "results.h5: runs run0001.. in sim's order, each with its config (B=%d, dc=%d)"
              % (B, dc), str(order[:4]))
        worst, bad, kept_bad, ld_bad = 0.0, [], [], []
        for pol in policies:
            name = pol.split(":")[0]
            for N in budgets:
                want_params = {"keydiff": "anchor=norm:metric=cos:window=0", "keydiff:window=0.25":
                               "anchor=norm:metric=cos:window=0.25", "h2o": "normalize=none:recent=0.5", "h2o:recent=0.2": "normalize=none:recent=0.2",
                               "streaming": "sinks=4", "tova": "scope=layer", "tova:scope=group": "scope=group",
                               "snapkv": "kernel=5:pool=avg:window=32", "snapkv:window=4:kernel=3": "kernel=3:pool=avg:window=4"}.get(pol, "")
                run = runs[(name, want_params, N)]
                params = run.attrs["params"]
                G = H // K
                for l in range(L):
                    # a layer-scope policy replays the layer's kv heads as one stream
                    streams = [list(range(K))] if pol == "tova" else [[g] for g in range(K)]
                    for st in streams:
                        heads = [g * G + j for g in st for j in range(G)]
                        res, S = brute(q[l, heads], k[l, st], v[l, st], pol, N, B, dc)
                        for x, g in enumerate(st):
                            got_kept = [y for y in run["retained"][l, g] if y >= 0]
                            if list(got_kept) != list(S):
                                kept_bad.append((pol, N, l, g, list(S)[:10], got_kept[:10]))
                            ld = run["final_logdet"][l, g]
                            if abs(ld - logdet(k[l, g][S])) > 1e-6 + 1e-6 * abs(ld):
                                ld_bad.append((pol, N, l, g, ld, logdet(k[l, g][S])))
                        for sj, h in enumerate(heads):
                            for phase in ("prefill", "decode", "all"):
                                sel = [x for x in res[sj] if phase == "all" or (phase == "prefill") == (x[0] < P)]
                                want = stats(sel)
                                row = rows[(name, params, N, l, h, phase)]
                                got = (int(row["n_queries"]), float(row["out_rel_err_mean"]), float(row["out_rel_err_p95"]),
                                       float(row["attn_recall_mean"]), float(row["attn_recall_min"]))
                                if got[0] != want[0]:
                                    bad.append((pol, N, l, h, phase, "n", got[0], want[0]))
                                for a, b_ in zip(got[1:], want[1:]):
                                    if np.isnan(a) or np.isnan(b_):
                                        if not (np.isnan(a) and np.isnan(b_)):
                                            bad.append((pol, N, l, h, phase, "nan", got, want))
                                        continue
                                    worst = max(worst, abs(a - b_))
                                    if abs(a - b_) > 1e-6 * max(1.0, abs(b_)):  # relative above 1
                                        bad.append((pol, N, l, h, phase, got, want))
                                if got[0] == 0 and not all(np.isnan(x) for x in got[1:]):
                                    bad.append(("no query measured, yet not NaN", pol, N, phase, got))
                                elif got[0] and (pol == "full" or N >= T) and got[1:] != (0.0, 0.0, 1.0, 1.0):
                                    bad.append(("exact", pol, N, got))
        print("# B=%d dc=%d: max |sim - brute force| over all statistics %.3g" % (B, dc, worst))
        check(not kept_bad, "kept sets equal brute force (B=%d, dc=%d)" % (B, dc), "\n".join(map(str, kept_bad[:5])))
        check(not bad, "metrics equal brute force to 1e-6 (relative above 1); full and N>=T exact (B=%d, dc=%d)" % (B, dc),
              "\n".join(map(str, bad[:5])))
        check(not ld_bad, "final_logdet equals numpy slogdet (B=%d, dc=%d)" % (B, dc), "\n".join(map(str, ld_bad[:5])))


def threads_and_errors(tmp, trace):
    outs = []
    for th in ("1", "2"):
        out = os.path.join(tmp, "th" + th)
        r = run_sim(trace, out, ["full", "keydiff", "streaming", "random", "primekv", "h2o", "tova",
                                 "tova:scope=group", "snapkv", "oracle"], [8, 30], 5, 2, th)
        check(r.returncode == 0, "sim with %s thread(s)" % th, r.stderr)
        outs.append(out)
    for name in ("results.csv", "summary.csv"):
        check(filecmp.cmp(os.path.join(outs[0], name), os.path.join(outs[1], name), shallow=False),
              "%s byte-identical for 1 and 2 threads" % name)
    # results.h5's data; its provenance (root command, /provenance) names --threads
    diff = datacmp.h5_diff(os.path.join(outs[0], "results.h5"), os.path.join(outs[1], "results.h5"))
    check(not diff, "results.h5's data byte-identical for 1 and 2 threads (provenance aside)", "\n".join(diff))
    check(sorted(os.listdir(outs[0])) == ["provenance.json", "results.csv", "results.h5", "summary.csv",
                                          "summary_by_trace.csv", "timing.csv"],
          "the results directory: results.csv, summary.csv, summary_by_trace.csv, timing.csv, results.h5, "
          "provenance.json",
          os.listdir(outs[0]))
    noq = os.path.join(tmp, "noq.h5")
    write_trace(noq, queries=False)
    cases = [
        (["--budgets", "0"], 2, "budget 0"),
        (["--chunk", "0"], 2, "chunk 0"),
        (["--policies", "nosuch"], 2, "unknown policy"),
        (["--policies", "keydiff:window=2"], 2, "bad parameter value"),
        (["--policies", "keydiff:windw=0.1"], 2, "unknown parameter"),
        (["--policies", "keydiff,keydiff:window=0"], 2, "one configuration twice (defaults filled)"),
        (["--budgets", "8,16,8"], 2, "one budget twice"),
    ]
    for extra, code, what in cases:
        out = os.path.join(tmp, "bad")
        args = {"--policies": "keydiff", "--budgets": "8", "--chunk": "4"}
        for i in range(0, len(extra), 2):
            args[extra[i]] = extra[i + 1]
        cmd = [KVTRACE, "sim", trace, "-o", out] + [x for kv in args.items() for x in kv]
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == code and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
              and not os.path.exists(out) and not [x for x in os.listdir(tmp) if ".tmp." in x],
              "%s: exit %d, one line, no output left" % (what, code), "rc %d: %s" % (r.returncode, r.stderr))
    out = os.path.join(tmp, "bad")
    r = subprocess.run([KVTRACE, "sim", noq, "--policies", "keydiff", "--budgets", "8", "--chunk", "4", "-o", out],
                       capture_output=True, text=True)
    check(r.returncode == 3 and "queries" in r.stderr and not os.path.exists(out)
          and not [x for x in os.listdir(tmp) if ".tmp." in x], "trace without /queries: exit 3, nothing left", r.stderr)
    r = subprocess.run([KVTRACE, "sim", trace, "--policies", "keydiff", "--budgets", "8", "--chunk", "4", "--quiet",
                        "-o", outs[0]], capture_output=True, text=True)
    check(r.returncode == 2 and "--force" in r.stderr, "existing output directory refused without --force", r.stderr)


def lockstep_budgets(tmp):
    """A policy that shares work between budgets (oracle: the joiners' future attention) replays a
    stream's budgets in lock step; each budget's results must be exactly what it gives alone: every
    results.csv row and every dataset of its results.h5 run, bit for bit. T spans several of
    oracle's 64-query blocks; chunks aligned to them (64) and not (48, 7), with a decode phase."""
    global T, P
    saved = T, P
    T, P = 400, 330
    try:
        trace = os.path.join(tmp, "long.h5")
        write_trace(trace, seed=11)
    finally:
        T, P = saved
    policies, budgets = ["oracle", "keydiff", "h2o"], [8, 70, 130, 200]
    for B, dc in ((64, 1), (48, 5), (7, 3)):
        together = os.path.join(tmp, "lock_%d" % B)
        r = run_sim(trace, together, policies, budgets, B, dc)
        check(r.returncode == 0, "sim of %d budgets together (B=%d)" % (len(budgets), B), r.stderr)
        if r.returncode:
            return
        with open(os.path.join(together, "results.csv")) as f:
            head, *lines = f.read().splitlines()
        col = head.split(",").index("budget")
        bad = []
        for N in budgets:
            alone = os.path.join(tmp, "alone_%d_%d" % (B, N))
            r = run_sim(trace, alone, policies, [N], B, dc)
            if r.returncode:
                bad.append((N, r.stderr))
                continue
            with open(os.path.join(alone, "results.csv")) as f:
                mine = f.read().splitlines()[1:]
            if mine != [x for x in lines if int(x.split(",")[col]) == N]:
                bad.append((N, "results.csv rows differ"))
            with h5py.File(os.path.join(together, "results.h5"), "r") as a, \
                    h5py.File(os.path.join(alone, "results.h5"), "r") as b:
                runs_a = {(g.attrs["config"], int(g.attrs["budget"])): g for g in a["runs"].values()}
                for g in b["runs"].values():
                    ga = runs_a[(g.attrs["config"], N)]
                    for name, ds in g.items():
                        if ds[()].tobytes() != ga[name][()].tobytes():
                            bad.append((N, g.attrs["config"], name))
        check(not bad, "each budget's results in lock step are its results alone, bit for bit "
              "(oracle, keydiff, h2o; B=%d, decode chunk %d)" % (B, dc), str(bad[:4]))
        # oracle alone on 16 threads: grouping would leave threads idle, so every budget is its own task
        wide = os.path.join(tmp, "wide_%d" % B)
        r = run_sim(trace, wide, ["oracle"], budgets, B, dc, threads="16")
        with open(os.path.join(wide, "results.csv")) as f:
            rows = f.read().splitlines()[1:] if r.returncode == 0 else None
        check(rows == [x for x in lines if x.startswith("oracle,")], "oracle's budgets as separate tasks "
              "(16 threads) give its rows in lock step, bit for bit (B=%d)" % B, r.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-sim-")
    try:
        trace = os.path.join(tmp, "t.h5")
        write_trace(trace)
        for B, dc in ((4, 1), (7, 3), (64, 1)):
            compare(tmp, trace, B, dc)
        threads_and_errors(tmp, trace)
        lockstep_budgets(tmp)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
