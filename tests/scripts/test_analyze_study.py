"""`analyze` over a study (docs/analyze.md#a-study-several-traces-or-several-chunk-sizes): several traces (files, a directory holding index.jsonl)
with a sim run over them, and one trace with a --chunks sweep. Each (trace, chunk) analysis in
OUT/traces/ID/chunkB/ is byte for byte a one-trace analysis of that trace with a `sim --chunk B` run of it
alone; study_spearman.csv and study_logdet.csv hold each value's mean over traces and its 95%
percentile bootstrap interval, recomputed here in numpy (the resamples from tests/lib/kvrng.py's
restatement of core/rng.c); sim's CSVs are copied. `plot` of such a directory: figure 9 (error
versus chunk) and figure 5 (at the first chunk) drawn from summary.csv, with bands from its
intervals when there are several traces. Refusals: results of other traces, repeated
--results with a study, a study without --results. TAP."""
import csv
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402
from tracefile import write_root_attrs  # noqa: E402
from kvrng import Rng  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
L, H, K, D = 2, 4, 2, 8
POLICIES = "keydiff,tova,streaming"
BUDGETS = "16,24"


def write_trace(path, seed, T, P):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        write_root_attrs(f, "test_analyze_study", L, H, K, D, T, P)
        f.attrs["model_name"] = "brute"
        f["tokens"] = rng.integers(0, 100, T).astype(np.int32)
        f["keys"] = (rng.normal(size=D) + 0.6 * rng.normal(size=(L, K, T, D))).astype(np.float32)
        f["values"] = rng.normal(size=(L, K, T, D)).astype(np.float32)
        f["queries"] = (1.5 * rng.normal(size=(L, H, T, D))).astype(np.float32)
        f["attention/colsum"] = (rng.uniform(size=(L, H, T)) * (T - np.arange(T))).astype(np.float32)


def run(*args):
    return subprocess.run([KVTRACE, *args], capture_output=True, text=True)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def bootstrap_idx(n, B=2000, seed=21):
    r = Rng(seed, n, 0, 0)
    return np.array([r.below(n) for _ in range(B * n)], dtype=np.int64).reshape(B, n)


def mean_ci(x, idx):
    """numpy's mean and the percentile bootstrap interval (linear interpolation, numpy's default)."""
    x = np.asarray(x, dtype=np.float64)
    if np.isnan(x).any():
        return np.nan, np.nan, np.nan
    means = x[idx].mean(axis=1)
    return x.mean(), np.percentile(means, 2.5), np.percentile(means, 97.5)


def close(a, b, tol=2e-8):
    a, b = float(a), float(b)
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) <= tol * max(1.0, abs(b))


def same_bytes(a, b):
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def sim(traces, out, chunks):
    flag = ["--chunks", chunks] if "," in chunks else ["--chunk", chunks]
    return run("sim", *traces, "--policies", POLICIES, "--budgets", BUDGETS, *flag, "--threads", "2", "--quiet",
               "-o", out)


def check_trace_dirs(tmp, an, ids, paths, chunks):
    """Each (trace, chunk) analysis against a one-trace sim and analyze."""
    for tid, path in zip(ids, paths):
        for B in chunks:
            one_res = os.path.join(tmp, "one_%s_%d" % (tid, B))
            one_an = one_res + "_an"
            p = sim([path], one_res, str(B))
            q = run("analyze", path, "--results", one_res, "--quiet", "-o", one_an)
            if not check(p.returncode == 0 and q.returncode == 0, "one-trace sim and analyze of %s chunk %d" % (tid, B),
                         p.stderr + q.stderr):
                continue
            sub = os.path.join(an, "traces", tid, "chunk%d" % B)
            for name in ("logdet.csv", "spearman.csv", "pca_var.csv", "pca_kept.csv", "budgets.csv",
                         "head_importance.csv", "detail.csv"):
                check(same_bytes(os.path.join(sub, name), os.path.join(one_an, name)),
                      "traces/%s/chunk%d/%s is the one-trace analysis's, byte for byte" % (tid, B, name))


def check_means(an, ids, chunks):
    """study_*.csv against numpy over the per-trace CSVs."""
    n = len(ids)
    idx = bootstrap_idx(n)
    per = {t: rows(os.path.join(an, "traces", t, "chunk%d" % chunks[0], "spearman.csv")) for t in ids}
    got = rows(os.path.join(an, "study_spearman.csv"))
    ok = len(got) == L * H and len(got) > 0
    for i, r in enumerate(got):
        for col in ("rho_pairwise", "rho_anchor"):
            m, lo, hi = mean_ci([per[t][i][col] for t in ids], idx)
            ok = ok and r["n_traces"] == str(n) and (r["layer"], r["q_head"]) == (per[ids[0]][i]["layer"],
                                                                                 per[ids[0]][i]["q_head"])
            ok = ok and close(r[col], m, 1e-7) and close(r[col + "_ci_lo"], lo, 1e-7) and close(r[col + "_ci_hi"], hi,
                                                                                             1e-7)
    check(ok, "study_spearman.csv: means and bootstrap intervals over %d traces as numpy's" % n)
    got = rows(os.path.join(an, "study_logdet.csv"))
    full = [r for r in got if r["config"] == "full_cache"]
    runs = [r for r in got if r["config"] != "full_cache"]
    ok = len(full) == L * K and len(runs) == L * K * 3 * 2 * len(chunks)
    for r in got:
        vals = []
        for t in ids:
            B = r["chunk"] or str(chunks[0])
            for x in rows(os.path.join(an, "traces", t, "chunk" + B, "logdet.csv")):
                if (x["config"], x["allocator"], x["layer"], x["kv_head"]) == (r["config"], r["allocator"], r["layer"],
                                                                               r["kv_head"]) and \
                        (r["config"] == "full_cache" or x["budget"] == r["budget"]):
                    vals.append(x["logdet"])
        m, lo, hi = mean_ci(vals, idx)
        ok = ok and len(vals) == n and close(r["logdet"], m, 1e-7) and close(r["logdet_ci_lo"], lo, 1e-7) and \
            close(r["logdet_ci_hi"], hi, 1e-7)
    check(ok, "study_logdet.csv: the full cache's and every (run, chunk)'s mean and interval as numpy's", len(got))


def dat_blocks(path):
    """A figure's data file: {config label: [[x, y1, y2, ...], ...]} from its '# index i: POLICY PARAMS' blocks."""
    out, cur = {}, None
    for line in open(path):
        if line.startswith("# index"):
            words = line.split(":", 1)[1].split()
            cur = out.setdefault(words[0] + (":" + words[1] if len(words) > 1 else ""), [])
        elif line.strip() and not line.startswith("#"):
            cur.append([float(x) for x in line.split()])
    return out


def check_plot(an, study_of):
    """plot over the study's analysis: figure 9 (error versus chunk) and figure 5's bands from summary.csv."""
    figs = an + "_figs"
    p = run("plot", an, "--quiet", "-o", figs)
    if not check(p.returncode == 0, "plot over the analysis of %s" % study_of, p.stderr):
        return
    summ = [r for r in rows(os.path.join(an, "summary.csv")) if r["phase"] == "all"]
    band = int(summ[0]["n_traces"]) > 1
    cols = ["out_rel_err_mean", "attn_recall_mean"]
    if band:
        cols += ["out_rel_err_mean_ci_lo", "out_rel_err_mean_ci_hi", "attn_recall_mean_ci_lo", "attn_recall_mean_ci_hi"]
    ok = True
    for B in sorted({r["budget"] for r in summ}):
        got = dat_blocks(os.path.join(figs, "fig9_chunks_N%s.dat" % B))
        want = {}
        for r in summ:
            if r["budget"] == B:
                want.setdefault(r["config"], []).append([float(r["chunk"])] + [float(r[c]) for c in cols])
        for cfg in want:
            want[cfg].sort()
        ok = ok and got.keys() == want.keys() and all(
            len(got[c]) == len(want[c]) and all(len(x) == len(y) and all(close(a, b, 1e-8) for a, b in zip(x, y))
                                                for x, y in zip(got[c], want[c])) for c in want)
    check(ok, "%s: fig9_chunks_N*.dat: error, recall%s per chunk as summary.csv's" % (
        study_of, " and their intervals" if band else ""))
    first = summ[0]["chunk"]
    got = dat_blocks(os.path.join(figs, "fig5_error.dat"))
    want = {}
    for r in summ:
        if r["chunk"] == first:
            want.setdefault(r["config"], []).append([float(r["budget"])] + [float(r[c]) for c in cols])
    ok = got.keys() == want.keys() and all(
        len(got[c]) == len(want[c]) and all(len(x) == len(y) and all(close(a, b, 1e-8) for a, b in zip(x, y))
                                            for x, y in zip(got[c], sorted(want[c]))) for c in want)
    check(ok, "%s: fig5_error.dat at the first chunk (%s)%s" % (study_of, first, " with the intervals" if band else ""))
    gp5 = open(os.path.join(figs, "fig5_error.gp")).read()
    gp9 = open(os.path.join(figs, "fig9_chunks.gp")).read()
    check(("filledcurves" in gp5) == band and ("filledcurves" in gp9) == band,
          "%s: confidence bands (filledcurves) %s" % (study_of, "drawn" if band else "absent with one trace"))
    res = pd.read_csv(os.path.join(an, "results.csv"), keep_default_na=False)
    res = res[(res.phase == "all") & (res.chunk == int(first))]
    want = res.groupby(["config", "budget", "layer"], sort=True).out_rel_err_mean.mean()
    got = dat_blocks(os.path.join(figs, "fig7_layers.dat"))
    ok = sorted(got) == sorted(set(res.config)) and sum(len(v) for v in got.values()) == len(want)
    for cfg, pts in got.items():
        ok = ok and all(close(e, want[(cfg, int(b), int(layer))], 1e-8) for b, layer, e in pts)
    check(ok, "%s: fig7_layers.dat: per layer the mean over query heads%s at the first chunk (pandas)" % (
        study_of, " and traces" if band else ""))
    tim = pd.read_csv(os.path.join(an, "timing.csv"), keep_default_na=False)
    tim = tim[(tim.chunk == int(first)) & (tim.trace == tim.trace.iloc[0]) & (tim.calls > 0)]
    got = dat_blocks(os.path.join(figs, "fig6_timing.dat"))
    ok = sum(len(v) for v in got.values()) == len(tim)
    for cfg, pts in got.items():
        ok = ok and all(close(ns, tim[(tim.config == cfg) & (tim.budget == int(b))].score_ns_per_candidate.iloc[0],
                              1e-8) for b, ns, _ in pts)
    check(ok, "%s: fig6_timing.dat: the first trace's times at the first chunk" % study_of)
    check(os.path.isfile(os.path.join(figs, "fig9_chunks.png")) and os.path.isfile(os.path.join(figs, "fig5_error.png")),
          "%s: figures 5 and 9 rendered" % study_of)


def study(tmp):
    d = os.path.join(tmp, "study")
    os.makedirs(d)
    ids, paths = ["pa", "pb", "pc"], []
    for i, (t, T, P) in enumerate(zip(ids, (70, 64, 75), (50, 40, 60))):
        paths.append(os.path.join(d, t + ".h5"))
        write_trace(paths[-1], 30 + i, T, P)
    res = os.path.join(tmp, "res")
    p = sim(paths, res, "8,16")
    if not check(p.returncode == 0, "sim over 3 traces --chunks 8,16", p.stderr):
        return
    an = os.path.join(tmp, "an")
    p = run("analyze", *paths, "--results", res, "--quiet", "-o", an)
    if not check(p.returncode == 0, "analyze over 3 traces with a --chunks study's results", p.stderr):
        return
    dirs = sorted(os.listdir(os.path.join(an, "traces")))
    check(dirs == ids and all(sorted(os.listdir(os.path.join(an, "traces", t))) == ["chunk16", "chunk8"] for t in ids),
          "traces/ID/chunkB for every trace and chunk", dirs)
    for name in ("summary.csv", "summary_by_trace.csv", "timing.csv", "results.csv"):
        with open(os.path.join(an, name), "rb") as f, open(os.path.join(res, name), "rb") as g:
            check(f.read() == g.read(), "%s copied from the results" % name)
    check(os.path.exists(os.path.join(an, "provenance.json")), "provenance.json written")
    check_trace_dirs(tmp, an, ids, paths, (8, 16))
    check_means(an, ids, (8, 16))
    check_plot(an, "3 traces")
    # the same study named by its directory (index.jsonl)
    import hashlib
    import json
    with open(os.path.join(d, "index.jsonl"), "w") as f:
        for t, path in zip(ids, paths):
            with open(path, "rb") as g:
                h = hashlib.sha256(g.read()).hexdigest()
            T = h5py.File(path, "r").attrs["n_tokens"]
            f.write(json.dumps(dict(id=t, file=t + ".h5", tokens=int(T), sha256=h)) + "\n")
    an2 = os.path.join(tmp, "an2")
    p = run("analyze", d, "--results", res, "--quiet", "-o", an2)
    ok = p.returncode == 0
    for name in ("study_spearman.csv", "study_logdet.csv"):
        ok = ok and open(os.path.join(an, name)).read() == open(os.path.join(an2, name)).read()
    check(ok, "analyze study/ (index.jsonl) gives the same means", p.stderr)
    refusals(tmp, paths, res)


def refused(p, out, code, *words):
    return p.returncode == code and not os.path.exists(out) and p.stderr.count("\n") == 1 and \
        all(w in p.stderr for w in words)


def refusals(tmp, paths, res):
    out = os.path.join(tmp, "bad")
    p = run("analyze", *paths[:2], "--results", res, "-o", out)
    check(refused(p, out, 3, "pc", "not among"), "results holding a trace not given: exit 3, nothing written", p.stderr)
    p = run("analyze", paths[0], paths[2], paths[1], os.path.join(tmp, "one_pa_8", "..", "extra.h5"), "--results", res,
            "-o", out)
    check(p.returncode in (2, 3) and not os.path.exists(out), "a missing trace: refused, nothing written", p.stderr)
    p = run("analyze", *paths, "--results", res, "--results", os.path.join(tmp, "one_pa_8"), "-o", out)
    check(refused(p, out, 2, "one --results"), "a study with two --results: exit 2", p.stderr)
    p = run("analyze", *paths, "-o", out)
    check(refused(p, out, 2, "--results"), "a study without --results: exit 2", p.stderr)
    p = run("analyze", *paths, "--results", os.path.join(tmp, "one_pa_8"), "-o", out)
    check(refused(p, out, 3, "no run of trace"), "results of one trace for a study of three: exit 3", p.stderr)


def one_trace_chunks(tmp):
    """One trace, a --chunks sweep: a study of one trace (intervals collapse to the value)."""
    tr = os.path.join(tmp, "solo.h5")
    write_trace(tr, 7, 66, 44)
    res = os.path.join(tmp, "solo_res")
    p = sim([tr], res, "8,16")
    an = os.path.join(tmp, "solo_an")
    q = run("analyze", tr, "--results", res, "--quiet", "-o", an)
    if not check(p.returncode == 0 and q.returncode == 0, "analyze one trace with a --chunks run", p.stderr + q.stderr):
        return
    check(sorted(os.listdir(os.path.join(an, "traces", "solo"))) == ["chunk16", "chunk8"], "traces/solo/chunk8, chunk16")
    other = os.path.join(tmp, "solo_res32")
    p = sim([tr], other, "32")
    bad = os.path.join(tmp, "solo_bad")
    q = run("analyze", tr, "--results", res, "--results", other, "-o", bad)
    check(p.returncode == 0 and refused(q, bad, 2, res, "one --results"),
          "a --chunks run merged with another --results: exit 2, nothing written", q.stderr)
    got = rows(os.path.join(an, "study_logdet.csv"))
    check(all(r["n_traces"] == "1" and r["logdet"] == r["logdet_ci_lo"] == r["logdet_ci_hi"] for r in got) and got,
          "one trace: n_traces 1 and both ends equal the value")
    check_trace_dirs(tmp, an, ["solo"], [tr], (8, 16))
    check_plot(an, "one trace")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        study(tmp)
        one_trace_chunks(tmp)
    finish()


if __name__ == "__main__":
    main()
