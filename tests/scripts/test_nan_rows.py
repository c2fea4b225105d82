"""Rows where nothing was measured are NaN, not a perfect score, and the summaries skip them
(docs/sim.md#metrics). A study of two synthetic traces, T = 40 and T = 120, replayed at N = 64:
the short trace has no query at a position >= N, so its results.csv rows have n_queries 0 and
nan for the four measures (they said error 0 and recall 1), its summary_by_trace.csv rows too;
summary.csv, over the traces, is the long trace's alone (its interval the value itself), computed
here from summary_by_trace.csv with pandas; analyze and plot take the directory. TAP.
    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_nan_rows.py"""
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

import pandas as pd  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
MEASURES = ["out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean", "attn_recall_min"]


def run(*args):
    return subprocess.run([KVTRACE] + [str(a) for a in args], capture_output=True, text=True)


def study(tmp):
    d = os.path.join(tmp, "study")
    os.makedirs(d)
    with open(os.path.join(d, "index.jsonl"), "w") as idx:
        for name, T, seed in (("short", 40, 1), ("long", 120, 2)):
            path = os.path.join(d, name + ".h5")
            r = run("synth", "--like", "stories260k", "--tokens", T, "--seed", seed, "--quiet", "-o", path)
            check(r.returncode == 0, "synth %s (T = %d)" % (name, T), r.stderr)
            with open(path, "rb") as f:
                sha = hashlib.sha256(f.read()).hexdigest()
            idx.write(json.dumps({"id": name, "file": name + ".h5", "tokens": T, "sha256": sha}) + "\n")
    return d


def main():
    with tempfile.TemporaryDirectory() as tmp:
        d = study(tmp)
        res = os.path.join(tmp, "res")
        r = run("sim", d, "--policies", "tova,knorm", "--budgets", 64, "--chunk", 16, "--quiet", "-o", res)
        if not check(r.returncode == 0, "sim of the two-trace study at N = 64", r.stderr):
            return finish()
        rows = pd.read_csv(os.path.join(res, "results.csv"))
        short, long_ = rows[rows.trace == "short"], rows[rows.trace == "long"]
        check(len(short) > 0 and (short.n_queries == 0).all() and short[MEASURES].isna().all().all(),
              "the short trace's results.csv rows: n_queries 0, nan for the four measures (%d rows)" % len(short),
              short.head(3).to_string())
        check(long_[long_.phase == "all"][MEASURES].notna().all().all(), "the long trace's rows are measured")
        by = pd.read_csv(os.path.join(res, "summary_by_trace.csv"))
        check(by[by.trace == "short"][MEASURES].isna().all().all(), "summary_by_trace.csv: the short trace's rows nan")
        summ = pd.read_csv(os.path.join(res, "summary.csv"))
        bad = []
        for _, s in summ[summ.phase == "all"].iterrows():
            want = by[(by.trace == "long") & (by.config == s.config) & (by.phase == "all")].iloc[0]
            for m in MEASURES:
                if not (math.isclose(s[m], want[m], rel_tol=1e-8, abs_tol=1e-12)
                        and s[m + "_ci_lo"] == s[m] and s[m + "_ci_hi"] == s[m]):
                    bad.append((s.config, m, s[m], want[m], s[m + "_ci_lo"], s[m + "_ci_hi"]))
        check(len(summ) and not bad, "summary.csv over the traces: the measured trace's values alone (the short "
              "trace's nan skipped, not averaged in as 0 and 1), the interval the value itself", bad)
        an, figs = os.path.join(tmp, "an"), os.path.join(tmp, "figs")
        r = run("analyze", d, "--results", res, "-o", an, "--quiet")
        check(r.returncode == 0, "analyze takes the results with nan rows", r.stderr)
        r2 = run("plot", an, "-o", figs, "--quiet") if r.returncode == 0 else r
        check(r2.returncode == 0, "plot draws them", r2.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
