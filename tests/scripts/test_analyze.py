"""kvtrace analyze against an independent numpy recomputation (float64) on
synth traces and sim results: Spearman rho (average ranks written here),
log-det (slogdet; run rows also equal results.h5 final_logdet), PCA (eigh,
same sign rule), kept rows (pca_kept.csv), detail matrices and the default (median-rho)
detail head; the file contract of docs/outputs.md; byte-identical
outputs for 1 and 2 threads; traces without colsum or queries; corrupt
results directories and bad arguments (exit code, one error line, nothing
left behind); the real model when KVTRACE_MODEL_DIR is set. TAP."""
import csv
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, close, finish, model_file, skip  # noqa: E402
import datacmp  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
FILES = ["meta.csv", "spearman.csv", "logdet.csv", "pca.csv", "pca_kept.csv", "pca_var.csv", "detail.csv",
         "summary.csv", "timing.csv", "results.csv", "provenance.json", "budgets.csv", "head_importance.csv"]
RUN = "config,policy,params,budget,allocator,budget_fraction"
HEADERS = {
    "spearman.csv": "layer,q_head,kv_head,rho_pairwise,rho_anchor",
    "logdet.csv": RUN + ",layer,kv_head,logdet",
    "pca.csv": "layer,kv_head,position,pc1,pc2",
    "pca_kept.csv": RUN + ",layer,kv_head,position",
    "budgets.csv": RUN + ",layer,kv_head,head_budget,head_budget_mean",
    "head_importance.csv": "layer,kv_head,score,concentration",
    "pca_var.csv": "layer,kv_head,var_pc1,var_pc2,var_total",
    "detail.csv": "row,col,cos,attn",
    "meta.csv": "key,value",
}
META_KEYS = ["trace", "model", "creator", "L", "H", "K", "D", "T", "prompt_tokens", "capture_mode", "capture_chunk",
             "storage_dtype", "detail_layer", "detail_q_head", "detail_kv_head", "kvtrace_version"]


def run(*args):
    return subprocess.run([KVTRACE] + [str(a) for a in args], capture_output=True, text=True)


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def read_meta(out):
    return {r["key"]: r["value"] for r in read_csv(os.path.join(out, "meta.csv"))}


# ---- independent reference computations (float64) --------------------------

def avg_ranks(v):
    """1-based ranks, ties sharing the mean of their ranks."""
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    sv = v[order]
    a = 0
    while a < len(v):
        b = a + 1
        while b < len(v) and sv[b] == sv[a]:
            b += 1
        ranks[order[a:b]] = 0.5 * (a + 1 + b)
        a = b
    return ranks


def spearman(x, y):
    rx, ry = avg_ranks(x), avg_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return np.nan if den == 0 else (rx * ry).sum() / den


def x_pairwise(k):
    kn = k / np.linalg.norm(k, axis=1, keepdims=True)
    c = kn @ kn.T
    return -(c.sum(1) - np.diag(c)) / (len(k) - 1)


def x_anchor(k):
    mu = k.mean(0)
    return -(k @ mu) / (np.linalg.norm(k, axis=1) * np.linalg.norm(mu))


def logdet(k):
    kn = k / np.linalg.norm(k, axis=1, keepdims=True)
    return np.linalg.slogdet(kn.T @ kn / len(kn) + 1e-6 * np.eye(k.shape[1]))[1]


def pca(k):
    xc = k - k.mean(0)
    cov = xc.T @ xc / max(len(k) - 1, 1)
    w, v = np.linalg.eigh(cov)
    axes = [v[:, -1].copy(), v[:, -2].copy()]
    for a in axes:  # sign rule: the largest-|component| entry (first of equals) positive
        if a[np.argmax(np.abs(a))] < 0:
            a *= -1
    return (w[-1], w[-2], np.trace(cov)), np.stack([xc @ axes[0], xc @ axes[1]], 1)


def detail_ref(q, k, n):
    kn = k[:n] / np.linalg.norm(k[:n], axis=1, keepdims=True)
    cos = kn @ kn.T
    s = q[:n] @ k[:n].T / np.sqrt(k.shape[1])
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    a = np.exp(s - s.max(1, keepdims=True))
    return cos, a / a.sum(1, keepdims=True)


# ---- checks -----------------------------------------------------------------

def check_contract(out, with_results, n_runs):
    missing = [f for f in FILES[:7] + FILES[10:] + (FILES[7:10] if with_results else [])
               if not os.path.exists(os.path.join(out, f))]
    extra = [f for f in os.listdir(out) if f not in FILES]
    check(not missing and not extra and (with_results or not os.path.exists(os.path.join(out, "summary.csv"))),
          "every file of docs/analysis_dir.md, nothing else", "missing %s, extra %s" % (missing, extra))
    bad = []
    for name, header in HEADERS.items():
        with open(os.path.join(out, name)) as f:
            if f.readline().rstrip("\n") != header:
                bad.append(name)
    check(not bad, "CSV headers as in the contract", str(bad))
    with open(os.path.join(out, "pca_kept.csv")) as f:
        runs = {tuple(r[:6]) for r in csv.reader(f)} - {tuple(RUN.split(","))}
    check(len(runs) == n_runs, "pca_kept.csv: rows of %d runs" % n_runs, str(len(runs)))
    meta = read_meta(out)
    check(all(k in meta for k in META_KEYS) and ("results_dir" in meta) == with_results,
          "meta.csv has every required key", str(sorted(meta)))


def check_numbers(trace, out, res, several=True):
    with h5py.File(trace, "r") as t:
        keys = t["keys"][:].astype(np.float64)
        qs = t["queries"][:].astype(np.float64)
        colsum = t["attention/colsum"][:].astype(np.float64)
    L, K, T, D = keys.shape
    H = qs.shape[1]
    G = H // K
    rows = read_csv(os.path.join(out, "spearman.csv"))
    got = np.array([[float(r["rho_pairwise"]), float(r["rho_anchor"])] for r in rows])
    ref = []
    y_of = lambda l, h: colsum[l, h] / (T - np.arange(T))  # noqa: E731
    for l in range(L):
        for h in range(H):
            k = keys[l, h // G]
            ref.append([spearman(x_pairwise(k), y_of(l, h)), spearman(x_anchor(k), y_of(l, h))])
    check([(int(r["layer"]), int(r["q_head"]), int(r["kv_head"])) for r in rows] ==
          [(l, h, h // G) for l in range(L) for h in range(H)],
          "spearman.csv: one row per (layer, query head), layer-major, kv_head = q_head // (H/K)")
    close("rho_pairwise and rho_anchor equal numpy average-rank Spearman", got, np.array(ref), 1e-6, 0)

    ld = read_csv(os.path.join(out, "logdet.csv"))
    full = [r for r in ld if r["policy"] == "full_cache"]
    check(ld[:L * K] == full and all(r["params"] == "" and r["config"] == "full_cache" and int(r["budget"]) == T and
                                     r["allocator"] == "uniform" and r["budget_fraction"] == "" for r in full),
          "logdet.csv: the full_cache rows first, config full_cache, budget T, params empty, allocator uniform")
    close("full-cache logdet equals numpy slogdet", [float(r["logdet"]) for r in full],
          [logdet(keys[l, g]) for l in range(L) for g in range(K)], 1e-6, 1e-6)
    runs_rows = ld[L * K:]
    with h5py.File(os.path.join(res, "results.h5"), "r") as rh:
        names = sorted(rh["runs"].keys())
        groups = [rh["runs"][n] for n in names]
        want, kept_ref, sim_ld = [], [], []
        for g in groups:
            for l in range(L):
                for kv in range(K):
                    pos = [p for p in g["retained"][l, kv] if p >= 0]
                    want.append((*run_id(g), l, kv))
                    sim_ld.append(g["final_logdet"][l, kv])
                    kept_ref.append(logdet(keys[l, kv][pos]))
        retained = [g["retained"][:] for g in groups]
        run_ids = [run_id(g) for g in groups]
    got_ids = [(*csv_run_id(r), int(r["layer"]), int(r["kv_head"])) for r in runs_rows]
    check(got_ids == want, "logdet.csv: one block per run of results.h5, in its group order", str(got_ids[:3]))
    got_ld = np.array([float(r["logdet"]) for r in runs_rows])
    diff = [(r["logdet"], "%.9g" % x) for r, x in zip(runs_rows, sim_ld) if r["logdet"] != "%.9g" % x]
    check(len(runs_rows) == len(sim_ld) and not diff, "run logdet rows equal results.h5 final_logdet as printed (%.9g)",
          str(diff[:5]))
    close("run logdet rows equal numpy slogdet of the retained keys", got_ld, np.array(kept_ref), 1e-6, 1e-6)
    check_pca(out, keys, retained, run_ids)
    check_detail(out, keys, qs, G, rows)
    check_budgets(out, res, L, K, several)
    check_importance(out, keys, qs, 4, 64)


def run_id(g):
    """A run's key columns from its results.h5 group: (config, policy, params, budget, allocator, budget_fraction)."""
    f = g.attrs.get("budget_fraction")
    return (g.attrs["config"], g.attrs["policy"], g.attrs["params"], int(g.attrs["budget"]),
            g.attrs.get("allocator", "uniform"), "" if f is None else "%.9g" % f)


def csv_run_id(r):
    return (r["config"], r["policy"], r["params"], int(r["budget"]), r["allocator"], r["budget_fraction"])


def check_budgets(out, res, L, K, several):
    """budgets.csv: per run (group order) and (layer, kv_head), head_budget and head_budget_mean of results.h5."""
    want, mean_ref = [], []
    with h5py.File(os.path.join(res, "results.h5"), "r") as rh:
        for n in sorted(rh["runs"].keys()):
            g = rh["runs"][n]
            ret = g["retained"][:]
            for l in range(L):
                for kv in range(K):
                    want.append((*run_id(g), l, kv, int((ret[l, kv] >= 0).sum())))
                    mean_ref.append(g["head_budget_mean"][l, kv])
    rows = read_csv(os.path.join(out, "budgets.csv"))
    got = [(*csv_run_id(r), int(r["layer"]), int(r["kv_head"]), int(r["head_budget"])) for r in rows]
    check(got == want, "budgets.csv: head_budget is the count of results.h5's retained positions, per run in order",
          next(((a, b) for a, b in zip(got, want) if a != b), (len(got), len(want))))
    close("budgets.csv head_budget_mean equals results.h5's (nan where it is nan)",
          np.nan_to_num([float(r["head_budget_mean"]) for r in rows], nan=-1.0),
          np.nan_to_num(np.array(mean_ref, dtype=np.float64), nan=-1.0), 1e-6, 0)
    if several:
        check(len({r[4] for r in want}) > 1 and any(r[5] for r in want),
              "budgets.csv covers several allocators and a budget given as a fraction")


def importance_ref(keys, qs, S, W):
    """Per (layer, kv head): mean over its query heads and the queries i >= S + W (all when T <= S + W) of the
    causal attention mass on keys S <= j <= i - W, and of the largest weight. Whole T x T, float64."""
    L, K, T, D = keys.shape
    G = qs.shape[1] // K
    q0 = S + W if S + W < T else 0
    j = np.arange(T)
    out = np.zeros((L, K, 2))
    for l in range(L):
        for h in range(qs.shape[1]):
            s = qs[l, h] @ keys[l, h // G].T / np.sqrt(D)
            s = np.where(j[None, :] <= j[:, None], s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            outside = (j[None, :] >= S) & (j[None, :] <= j[:, None] - W)
            out[l, h // G, 0] += (p * outside).sum(axis=1)[q0:].mean() / G
            out[l, h // G, 1] += p.max(axis=1)[q0:].mean() / G
    return out.reshape(L * K, 2)


def check_importance(out, keys, qs, S, W, what=""):
    rows = read_csv(os.path.join(out, "head_importance.csv"))
    L, K = keys.shape[:2]
    check([(int(r["layer"]), int(r["kv_head"])) for r in rows] == [(l, g) for l in range(L) for g in range(K)],
          "head_importance.csv: one row per (layer, kv head)%s" % what)
    close("head_importance.csv score and concentration equal numpy (sinks %d, recent %d)%s" % (S, W, what),
          [[float(r["score"]), float(r["concentration"])] for r in rows], importance_ref(keys, qs, S, W), 1e-6, 1e-5)


def check_pca(out, keys, retained, run_ids):
    L, K, T, D = keys.shape
    var = read_csv(os.path.join(out, "pca_var.csv"))
    rows = np.loadtxt(os.path.join(out, "pca.csv"), delimiter=",", skiprows=1, ndmin=2)
    check(rows.shape == (L * K * T, 5), "pca.csv: one row per (layer, kv head, position)", str(rows.shape))
    got_var, ref_var, got_pc, ref_pc, idx_bad = [], [], [], [], []
    for l in range(L):
        for g in range(K):
            v, pc = pca(keys[l, g])
            i = l * K + g
            ref_var.append(v)
            got_var.append([float(var[i][c]) for c in ("var_pc1", "var_pc2", "var_total")])
            blk = rows[i * T:(i + 1) * T]
            got_pc.append(blk[:, 3:5])
            ref_pc.append(pc)
            if not (blk[:, 0] == l).all() or not (blk[:, 1] == g).all() or not (blk[:, 2] == np.arange(T)).all():
                idx_bad.append(("index columns", l, g))
    check(not idx_bad, "pca.csv: layer, kv_head, position in order", str(idx_bad[:3]))
    close("pca_var.csv equals numpy eigh of the covariance (ddof 1)", got_var, ref_var, 1e-6, 1e-5)
    close("pca.csv projections equal numpy's (same sign rule)", np.concatenate(got_pc), np.concatenate(ref_pc), 1e-4,
          1e-4)
    # pca_kept.csv: exactly results.h5's retained positions, run by run (group order), then layer, kv head, position
    want = [(*rid, l, g, int(p)) for rid, ret in zip(run_ids, retained) for l in range(L) for g in range(K)
            for p in ret[l, g] if p >= 0]
    got = [(*csv_run_id(r), int(r["layer"]), int(r["kv_head"]), int(r["position"]))
           for r in read_csv(os.path.join(out, "pca_kept.csv"))]
    check(got == want, "pca_kept.csv rows are results.h5's retained positions, in run order",
          "%d rows, want %d; first difference %s" % (len(got), len(want),
                                                     next(((a, b) for a, b in zip(got, want) if a != b), None)))


def check_detail(out, keys, qs, G, sp_rows):
    meta = read_meta(out)
    l, h = int(meta["detail_layer"]), int(meta["detail_q_head"])
    check(int(meta["detail_kv_head"]) == h // G, "meta.csv: detail_kv_head is detail_q_head // (H/K)")
    rho = [(float(r["rho_pairwise"]), i) for i, r in enumerate(sp_rows)]
    rho = sorted(x for x in rho if np.isfinite(x[0]))
    med = rho[(len(rho) - 1) // 2][1]
    H = qs.shape[1]
    check((l, h) == (med // H, med % H), "default detail head: the (lower) median rho_pairwise",
          "got %s, median %s" % ((l, h), (med // H, med % H)))
    check_detail_matrix(out, keys[l, h // G], qs[l, h])


def check_detail_matrix(out, k, q):
    n = min(64, len(k))
    d = np.loadtxt(os.path.join(out, "detail.csv"), delimiter=",", skiprows=1, ndmin=2)
    check(d.shape == (n * n, 4) and (d[:, 0] == np.repeat(np.arange(n), n)).all()
          and (d[:, 1] == np.tile(np.arange(n), n)).all(), "detail.csv: n x n rows, row-major", str(d.shape))
    cos, attn = detail_ref(q, k, n)
    close("detail cos equals numpy", d[:, 2], cos.ravel(), 1e-6, 1e-6)
    close("detail attn equals numpy causal softmax", d[:, 3], attn.ravel(), 1e-7, 1e-6)


def importance_options(tmp, trace, f16):
    """--sinks/--recent reach head_importance.csv; a window longer than the trace scores 0 over every query."""
    with h5py.File(trace, "r") as t:
        keys, qs = t["keys"][:].astype(np.float64), t["queries"][:].astype(np.float64)
    out = os.path.join(tmp, "an_imp")
    r = run("analyze", trace, "--sinks", 2, "--recent", 16, "--quiet", "-o", out)
    if check(r.returncode == 0, "--sinks 2 --recent 16", r.stderr):
        check_importance(out, keys, qs, 2, 16)
    with h5py.File(f16, "r") as t:
        keys, qs = t["keys"][:].astype(np.float64), t["queries"][:].astype(np.float64)
    out = os.path.join(tmp, "an_imp16")
    r = run("analyze", f16, "--recent", 100, "--quiet", "-o", out)
    if check(r.returncode == 0, "--recent 100 on a 70-token trace", r.stderr):
        check_importance(out, keys, qs, 4, 100, " (T <= sinks + recent: every query, score 0)")
        check(all(float(x["score"]) == 0 for x in read_csv(os.path.join(out, "head_importance.csv"))),
              "score is exactly 0 when no query sees a key outside the sinks and the window")


def importance_paths(tmp, trace):
    """Both head-importance passes (docs/analyze.md): the trace's recorded /attention/lse and /attention/max
    (O(T·(S+W)·D)) and an h5py copy without them (/attention/out goes too: it needs /attention/lse), the exact
    O(T²·D) pass; each equals numpy within check_importance's tolerance, and the two agree within 1e-6."""
    with h5py.File(trace, "r") as t:
        check("attention/max" in t and "attention/lse" in t, "synth writes /attention/lse and /attention/max")
        keys, qs = t["keys"][:].astype(np.float64), t["queries"][:].astype(np.float64)
    old = os.path.join(tmp, "no_stats.h5")
    shutil.copy(trace, old)
    with h5py.File(old, "r+") as f:
        del f["attention/max"], f["attention/lse"], f["attention/out"]
    got = []
    for what, path in ((" (recorded lse and max)", trace), (" (exact pass, no /attention/max)", old)):
        for S, W in ((4, 64), (2, 16), (0, 1)):
            out = os.path.join(tmp, "an_paths")
            r = run("analyze", path, "--sinks", S, "--recent", W, "--quiet", "--force", "-o", out)
            if check(r.returncode == 0, "analyze --sinks %d --recent %d%s" % (S, W, what), r.stderr):
                check_importance(out, keys, qs, S, W, what)
                got.append([[float(x["score"]), float(x["concentration"])]
                            for x in read_csv(os.path.join(out, "head_importance.csv"))])
    if len(got) == 6:
        close("the two passes agree", np.array(got[:3]), np.array(got[3:]), 1e-6, 0)


def leftovers(tmp):
    return [x for x in os.listdir(tmp) if ".tmp." in x]


def expect_error(tmp, args, code, what, must_say=None):
    """One failing command: its exit code, one 'kvtrace: error:' line, no output left."""
    out = os.path.join(tmp, "bad_out")
    r = run("analyze", *args, "--quiet", "-o", out)
    lines = r.stderr.strip().splitlines()
    ok = (r.returncode == code and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
          and (must_say is None or lines[0].startswith("kvtrace: error: " + must_say))
          and not os.path.exists(out) and not leftovers(tmp))
    check(ok, "%s: exit %d, one error line, nothing left" % (what, code), "rc %d: %s" % (r.returncode, r.stderr))


def corrupt(tmp, res, name, edit, run_name=None):
    """A copy of the results directory with results.h5 changed by edit(file, run group: the first by default)."""
    d = os.path.join(tmp, name)
    shutil.copytree(res, d)
    with h5py.File(os.path.join(d, "results.h5"), "r+") as f:
        first = run_name or sorted(f["runs"].keys())[0]
        edit(f, f["runs"][first])
    return d, first


def replace(g, name, data):
    del g[name]
    g[name] = data


def bad_results(tmp, trace, res, T):
    def swap(f, g):
        r = g["retained"][:]
        r[0, 0, [0, 1]] = r[0, 0, [1, 0]]
        replace(g, "retained", r)

    def out_of_range(f, g):
        r = g["retained"][:]
        r[1, 1, -1] = T + 5
        replace(g, "retained", r)

    def repeat(f, g):
        r = g["retained"][:]
        r[0, 1, 1] = r[0, 1, 0]
        replace(g, "retained", r)

    def after_pad(f, g):
        r = g["retained"][:]
        r[0, 0, 0] = -1
        replace(g, "retained", r)

    cases = [
        ("unsorted", swap, "retained"),
        ("out of range", out_of_range, "retained"),
        ("repeated position", repeat, "retained"),
        ("position after -1 padding", after_pad, "retained"),
        ("wrong shape", lambda f, g: replace(g, "retained", np.zeros((1, 2, 4), np.int32)), "retained"),
        ("rank 2", lambda f, g: replace(g, "retained", np.zeros((2, 2), np.int32)), "retained"),
        ("float positions", lambda f, g: replace(g, "retained", g["retained"][:].astype(np.float32)), "retained"),
        ("final_logdet shape", lambda f, g: replace(g, "final_logdet", np.zeros((2, 3))), "final_logdet"),
        ("missing final_logdet", lambda f, g: g.__delitem__("final_logdet"), "final_logdet"),
        ("missing budget attribute", lambda f, g: g.attrs.__delitem__("budget"), None),
        ("missing policy attribute", lambda f, g: g.attrs.__delitem__("policy"), None),
    ]
    for i, (what, edit, dset) in enumerate(cases):
        d, first = corrupt(tmp, res, "bad%d" % i, edit)
        where = os.path.join(d, "results.h5") + ": /runs/" + first + ("/" + dset if dset else "")
        expect_error(tmp, [trace, "--results", d], 3, "results.h5 with " + what, where)
        shutil.rmtree(d)
    d, _ = corrupt(tmp, res, "noruns", lambda f, g: f.__delitem__("runs"))
    expect_error(tmp, [trace, "--results", d], 3, "results.h5 without /runs", os.path.join(d, "results.h5") + ": /runs")
    shutil.rmtree(d)
    d = os.path.join(tmp, "trunc")
    shutil.copytree(res, d)
    p = os.path.join(d, "results.h5")
    data = open(p, "rb").read()
    open(p, "wb").write(data[:len(data) // 2])
    expect_error(tmp, [trace, "--results", d], 3, "truncated results.h5", p)
    os.remove(p)
    expect_error(tmp, [trace, "--results", d], 3, "results directory without results.h5", p)
    expect_error(tmp, [trace, "--results", os.path.join(tmp, "nosuch")], 1, "missing results directory: cannot open",
                 os.path.join(tmp, "nosuch") + ": cannot open")
    shutil.rmtree(d)


def padded_results_accepted(tmp, trace, res):
    """sim pads a cache smaller than N' with -1: accepted, and the padding is not a position."""
    with h5py.File(os.path.join(res, "results.h5"), "r") as rh:
        name = next(n for n in sorted(rh["runs"]) if rh["runs"][n].attrs["config"] == "streaming:sinks=4" and
                    rh["runs"][n].attrs["budget"] == 48 and rh["runs"][n].attrs["allocator"] == "uniform")

    def pad(f, g):
        r = g["retained"][:]
        replace(g, "retained", np.concatenate([r, -np.ones(r.shape[:2] + (3,), np.int32)], 2))
    d, first = corrupt(tmp, res, "padded", pad, name)
    out = os.path.join(tmp, "an_padded")
    r = run("analyze", trace, "--results", d, "--quiet", "-o", out)
    ok = r.returncode == 0 and not r.stderr
    if ok:
        a = read_csv(os.path.join(out, "logdet.csv"))
        b = read_csv(os.path.join(tmp, "an1", "logdet.csv"))
        ok = a == b
    check(ok, "-1 padded retained rows accepted, same log-dets", r.stderr)


def other_trace_warns(tmp, res):
    """Results simulated on another trace of the same shape: refused (exit 3, one line), nothing written."""
    other = os.path.join(tmp, "other.h5")
    r = run("synth", "--layers", 2, "--heads", 4, "--kv-heads", 2, "--head-dim", 16, "--tokens", 300, "--seed", 4,
            "--quiet", "-o", other)
    out = os.path.join(tmp, "an_other")
    r = run("analyze", other, "--results", res, "--quiet", "-o", out)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 3 and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
          and "another trace" in lines[0] and not os.path.exists(out),
          "results of another trace: exit 3, one error line, nothing written", r.stderr)


def bad_args(tmp, trace, res, good_out):
    expect_error(tmp, [os.path.join(tmp, "nosuch.h5")], 1, "missing trace (cannot open: exit 1 as every verb)")
    expect_error(tmp, [trace, "--detail", "2,0"], 2, "--detail layer out of range")
    expect_error(tmp, [trace, "--detail", "0,4"], 2, "--detail head out of range")
    expect_error(tmp, [trace, "--detail", "0"], 2, "--detail without a comma")
    expect_error(tmp, [trace, "--threads", "0"], 2, "--threads 0")
    expect_error(tmp, [trace, trace], 2, "two traces")
    r = run("analyze", trace, "--quiet")
    check(r.returncode == 2 and "-o" in r.stderr, "missing -o: exit 2", r.stderr)
    before = open(os.path.join(good_out, "meta.csv")).read()
    r = run("analyze", trace, "--results", res, "--quiet", "-o", good_out)
    check(r.returncode == 2 and "--force" in r.stderr and open(os.path.join(good_out, "meta.csv")).read() == before
          and not leftovers(tmp), "existing output refused without --force, left as it was", r.stderr)
    r = run("analyze", trace, "--quiet", "--force", "-o", good_out)
    check(r.returncode == 0 and not os.path.exists(os.path.join(good_out, "summary.csv")) and not leftovers(tmp),
          "--force replaces the whole directory", r.stderr)
    r = run("analyze", "--help")
    check(r.returncode == 0 and "usage: kvtrace analyze" in r.stdout, "--help")


def pairwise_long(tmp):
    """rho_pairwise at T = 2048 with exact ties (duplicated keys) and a zero key: analyze's O(T·D)
    identity (k̂_j·Σk̂ − k̂_j·k̂_j)/(T−1) against numpy's T² cosines, average ranks; tolerance 1e-9 on ρ
    (the x values agree to ~1e-15, the csv prints ρ to 9 digits; tied keys stay tied on both sides)."""
    trace = os.path.join(tmp, "long.h5")
    r = run("synth", "--layers", 1, "--heads", 2, "--kv-heads", 1, "--head-dim", 64, "--tokens", 2048, "--seed", 9,
            "--quiet", "-o", trace)
    check(r.returncode == 0, "synth T = 2048 trace", r.stderr)
    with h5py.File(trace, "r+") as t:
        k = t["keys"][:]
        k[0, 0, 1000:1100] = k[0, 0, 100:200]   # 100 keys repeated exactly: x ties
        k[0, 0, 7] = 0                          # cosine 0 with every key
        t["keys"][...] = k
        colsum = t["attention/colsum"][:].astype(np.float64)
    out = os.path.join(tmp, "an_long")
    r = run("analyze", trace, "--quiet", "-o", out)
    if not check(r.returncode == 0, "analyze T = 2048", r.stderr):
        return
    kd = k[0, 0].astype(np.float64)
    kn = np.linalg.norm(kd, axis=1, keepdims=True)
    khat = np.divide(kd, kn, out=np.zeros_like(kd), where=kn > 0)
    c = khat @ khat.T
    x = -(c.sum(1) - np.diag(c)) / (len(kd) - 1)
    T = len(kd)
    ref = [spearman(x, colsum[0, h] / (T - np.arange(T))) for h in range(2)]
    got = [float(r["rho_pairwise"]) for r in read_csv(os.path.join(out, "spearman.csv"))]
    close("rho_pairwise at T = 2048 (ties, a zero key) equals numpy's T² brute force", np.array(got),
          np.array(ref), 1e-9, 0)


def strip_trace(src, dst, drop):
    with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
        for k, v in s.attrs.items():
            d.attrs[k] = v
        for name in ("tokens", "keys", "values", "queries", "attention/colsum"):
            if name not in drop:
                d[name] = s[name][:]


def missing_datasets(tmp, trace):
    noc = os.path.join(tmp, "nocolsum.h5")
    strip_trace(trace, noc, ["attention/colsum"])
    out = os.path.join(tmp, "an_noc")
    r = run("analyze", noc, "--quiet", "-o", out)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 0 and len(lines) == 1 and lines[0].startswith("kvtrace: warning:") and "colsum" in lines[0],
          "trace without colsum: exit 0, one warning line", r.stderr)
    if r.returncode == 0:
        with open(os.path.join(out, "spearman.csv")) as f:
            check(f.read() == HEADERS["spearman.csv"] + "\n", "without colsum spearman.csv holds only its header")
        meta = read_meta(out)
        check((meta["detail_layer"], meta["detail_q_head"]) == ("0", "0"), "without colsum the detail head is 0,0")
        check_contract(out, False, 0)
    noq = os.path.join(tmp, "noqueries.h5")
    strip_trace(trace, noq, ["attention/colsum", "queries"])
    out = os.path.join(tmp, "an_noq")
    r = run("analyze", noq, "--quiet", "--detail", "1,2", "-o", out)
    check(r.returncode == 0 and "queries" in r.stderr and len(r.stderr.strip().splitlines()) == 2,
          "trace without queries: exit 0, a warning each for colsum and queries", r.stderr)
    if r.returncode == 0:
        d = np.loadtxt(os.path.join(out, "detail.csv"), delimiter=",", skiprows=1)
        with h5py.File(noq, "r") as t:
            k = t["keys"][1, 1].astype(np.float64)[:64]
        kn = k / np.linalg.norm(k, axis=1, keepdims=True)
        check(np.isnan(d[:, 3]).all() and np.allclose(d[:, 2], (kn @ kn.T).ravel(), atol=1e-6),
              "without queries detail.csv has the cosines of --detail 1,2 and attn nan")


def model_trace(tmp):
    model = model_file()
    if not model:
        skip("analyze a stories260K capture", NO_MODEL)
        return
    t = os.path.join(tmp, "model.h5")
    r = run("capture", "--model", model, "--prompt", "Once upon a time", "--generate", 100, "--quiet", "-o", t)
    check(r.returncode == 0, "capture stories260K", r.stderr)
    res = os.path.join(tmp, "model_res")
    r = run("sim", t, "--policies", "full,keydiff,streaming,h2o", "--budgets", "16,48", "--chunk", "16", "--quiet",
            "-o", res)
    check(r.returncode == 0, "sim on the captured trace", r.stderr)
    out = os.path.join(tmp, "model_an")
    r = run("analyze", t, "--results", res, "--quiet", "-o", out)
    check(r.returncode == 0 and not r.stderr, "analyze the captured trace", r.stderr)
    if r.returncode == 0:
        check_contract(out, True, 8)
        check_numbers(t, out, res, False)


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-analyze-")
    try:
        trace = os.path.join(tmp, "t.h5")
        r = run("synth", "--layers", 2, "--heads", 4, "--kv-heads", 2, "--head-dim", 16, "--tokens", 300,
                "--seed", 3, "--quiet", "-o", trace)
        check(r.returncode == 0, "synth trace", r.stderr)
        res = os.path.join(tmp, "res")
        r = run("sim", trace, "--policies", "full,keydiff,streaming,knorm", "--allocators", "uniform,pyramid,adakv",
                "--budgets", "48,33%", "--chunk", 16, "--quiet", "-o", res)
        check(r.returncode == 0, "sim results", r.stderr)
        outs = []
        for th in (1, 2):
            out = os.path.join(tmp, "an%d" % th)
            r = run("analyze", trace, "--results", res, "--threads", th, "--quiet", "-o", out)
            check(r.returncode == 0 and not r.stderr and not r.stdout, "analyze with %d thread(s), quiet" % th,
                  r.stderr)
            outs.append(out)
        check_contract(outs[0], True, 24)
        check(datacmp.dir_diff(*outs) == [],
              "every file byte-identical for 1 and 2 threads (provenance.json aside: it names --threads)",
              datacmp.dir_diff(*outs))
        provs = [json.load(open(os.path.join(o, "provenance.json"))) for o in outs]
        check([p["argv"][p["argv"].index("--threads") + 1] for p in provs] == ["1", "2"],
              "provenance.json records the --threads that made it", [p["argv"] for p in provs])
        check(all(filecmp.cmp(os.path.join(res, f), os.path.join(outs[0], f), shallow=False)
                  for f in ("summary.csv", "timing.csv", "results.csv")),
              "summary.csv, timing.csv and results.csv are byte copies")
        check_numbers(trace, outs[0], res)
        out = os.path.join(tmp, "an_detail")
        r = run("analyze", trace, "--detail", "1,3", "--quiet", "-o", out)
        if check(r.returncode == 0, "--detail 1,3", r.stderr):
            meta = read_meta(out)
            prov = json.load(open(os.path.join(out, "provenance.json")))
            check((meta["detail_layer"], meta["detail_q_head"]) == ("1", "3") and
                  prov["command"].startswith("kvtrace analyze ") and "--detail 1,3" in prov["command"],
                  "meta.csv names the chosen head, provenance.json the command")
            with h5py.File(trace, "r") as t:
                check_detail_matrix(out, t["keys"][1, 1].astype(np.float64), t["queries"][1, 3].astype(np.float64))
        bad_results(tmp, trace, res, 300)
        padded_results_accepted(tmp, trace, res)
        other_trace_warns(tmp, res)
        bad_args(tmp, trace, res, outs[0])
        missing_datasets(tmp, trace)
        f16 = os.path.join(tmp, "t16.h5")
        r = run("synth", "--layers", 1, "--heads", 2, "--kv-heads", 1, "--head-dim", 8, "--tokens", 70, "--dtype",
                "f16", "--quiet", "-o", f16)
        out = os.path.join(tmp, "an16")
        r = run("analyze", f16, "--quiet", "-o", out)
        check(r.returncode == 0 and len(read_csv(os.path.join(out, "spearman.csv"))) == 2, "float16 trace", r.stderr)
        importance_options(tmp, trace, f16)
        importance_paths(tmp, trace)
        pairwise_long(tmp)
        model_trace(tmp)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
