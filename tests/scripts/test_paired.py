"""analyze --baseline CONFIG[@ALLOCATOR] (docs/analyze.md#paired-differences-against-a-baseline---baseline):
paired.csv holds every other configuration minus the baseline at the same budget and chunk, paired over the
traces, recomputed here from sim's summary_by_trace.csv with numpy (the means and the 95% percentile
bootstrap interval of the mean difference over the study's resamples, core/rng.c's stream restated in
tests/lib/kvrng.py), for a study of four synthetic traces over three policies, two allocators, two
budgets and two chunks; plot's report shows the table. A policy name with one configuration names it; an unknown configuration, a policy
with several, an allocator the baseline never ran under, and --baseline with two --results are usage
errors (exit 2, one line, no output). TAP.
    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_paired.py"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402
from kvrng import Rng  # noqa: E402

import pandas as pd  # noqa: E402

KV = os.environ["KVTRACE"]
METRICS = ("out_rel_err_mean", "attn_recall_mean")


def run(*args):
    return subprocess.run([KV] + [str(a) for a in args], capture_output=True, text=True)


def resamples(n, B=2000, seed=21):
    r = Rng(seed, n, 0, 0)
    return np.array([r.below(n) for _ in range(B * n)], dtype=np.int64).reshape(B, n)


def study(tmp):
    d = os.path.join(tmp, "study")
    os.makedirs(d)
    with open(os.path.join(d, "index.jsonl"), "w") as idx:
        for i, T in enumerate((90, 110, 130, 100)):
            name = "p%d.h5" % i
            r = run("synth", "--like", "stories260k", "--tokens", T, "--seed", 10 + i, "--quiet", "-o",
                    os.path.join(d, name))
            check(r.returncode == 0, "synth trace %d" % i, r.stderr)
            sha = hashlib.sha256(open(os.path.join(d, name), "rb").read()).hexdigest()
            idx.write(json.dumps({"id": "p%d" % i, "file": name, "tokens": T, "sha256": sha}) + "\n")
    return d


def expected(by, base_config, base_alloc):
    """{(run, budget, metric): (n, mean, base, diff, lo, hi)} from summary_by_trace.csv."""
    rows = by[by.phase == "all"]
    out = {}
    for (run_, budget), g in rows.groupby(["run", "budget"], sort=False):
        cfg = g.iloc[0]
        base = rows[(rows.config == base_config) & (rows.allocator == base_alloc) & (rows.chunk == cfg.chunk) &
                    (rows.budget == budget)]
        if base.empty or base.iloc[0].run == run_:
            continue
        m = g.merge(base, on="trace", suffixes=("", "_b"))
        for metric in METRICS:
            x, y = m[metric].to_numpy(float), m[metric + "_b"].to_numpy(float)
            d = x - y
            idx = resamples(len(d))
            means = d[idx].mean(axis=1)
            out[(run_, budget, metric)] = (len(d), x.mean(), y.mean(), d.mean(), np.percentile(means, 2.5),
                                           np.percentile(means, 97.5))
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        d = study(tmp)
        res, an = os.path.join(tmp, "res"), os.path.join(tmp, "an")
        r = run("sim", d, "--policies", "tova,knorm,streaming", "--allocators", "uniform,pyramid:window=8",
                "--budgets", "24,40", "--chunks", "8,16", "--quiet", "-o", res)
        if not check(r.returncode == 0, "sim: 3 policies x 2 allocators x 2 budgets x 2 chunks over 4 traces",
                     r.stderr):
            return finish()
        r = run("analyze", d, "--results", res, "--baseline", "tova", "--quiet", "-o", an)
        if not check(r.returncode == 0, "analyze --baseline tova (a policy with one configuration)", r.stderr):
            return finish()
        got = pd.read_csv(os.path.join(an, "paired.csv"))
        want = expected(pd.read_csv(os.path.join(res, "summary_by_trace.csv")), "tova:scope=layer", "uniform")
        bad = []
        for _, g in got[got.metric.isin(METRICS)].iterrows():
            w = want.get((g.run, g.budget, g.metric))
            v = (g.n_traces, g["mean"], g.baseline_mean, g.diff_mean, g.diff_ci_lo, g.diff_ci_hi)
            if w is None or w[0] != v[0] or not np.allclose(v[1:], w[1:], rtol=1e-7, atol=1e-12):
                bad.append((g.run, g.budget, g.metric, v, w))
        check(len(got) == len(want) == 20 * 2 and not bad,   # 24 configurations, 4 of them the baselines
              "paired.csv: every other configuration's mean difference from tova at its budget and chunk, and its "
              "95%% interval paired over the 4 traces, as numpy computes them (%d rows)" % len(got), bad[:3])
        check(set(got.baseline) == {"tova:scope=layer@uniform/8", "tova:scope=layer@uniform/16"},
              "the baseline of each chunk is tova under uniform at that chunk")
        figs = os.path.join(tmp, "figs")
        r = run("plot", an, "--quiet", "-o", figs)
        page = open(os.path.join(figs, "report.html"), encoding="utf-8").read() if r.returncode == 0 else ""
        check(r.returncode == 0 and "Paired differences against the baseline" in page
              and page.count("<td>out_rel_err_mean</td>") == 20,
              "plot's report shows the paired table (20 configurations' error rows)", r.stderr)
        for spec, word in (("nosuch", "no such configuration"), ("tova@cake", "no runs under allocator"),
                           ("pyramid", "no such configuration")):
            out = os.path.join(tmp, "x")
            r = run("analyze", d, "--results", res, "--baseline", spec, "--quiet", "-o", out)
            lines = r.stderr.strip().splitlines()
            check(r.returncode == 2 and len(lines) == 1 and word in lines[0] and not os.path.exists(out),
                  "--baseline %s: exit 2, one line (%s), no output" % (spec, word), r.stderr)
        r = run("sim", d, "--policies", "tova,tova:scope=group", "--budgets", 24, "--chunk", 8, "--quiet", "-o",
                os.path.join(tmp, "two"))
        r = run("analyze", d, "--results", os.path.join(tmp, "two"), "--baseline", "tova", "--quiet", "-o",
                os.path.join(tmp, "y"))
        check(r.returncode == 2 and "several configurations" in r.stderr, "--baseline tova when two tova "
              "configurations ran: exit 2, give the whole label", r.stderr)
        r = run("analyze", d, "--results", res, "--results", os.path.join(tmp, "two"), "--baseline", "tova",
                "--quiet", "-o", os.path.join(tmp, "z"))
        check(r.returncode == 2 and "exactly one --results" in r.stderr, "--baseline with two --results: exit 2",
              r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
