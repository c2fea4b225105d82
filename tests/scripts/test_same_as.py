"""Configurations that coincide (docs/sim.md#configurations-that-coincide): pyramid at N = 32 with its default
window 32 keeps what uniform keeps, and adakv does for tova and streaming; sim says so in a same_as column (the
run label of the first earlier configuration at the same budget with the same kept positions at every step),
in one note line on stderr, and plot's report says so in its summary table. Checked against the results
themselves: for every pair of configurations at one budget, their rows' numbers are equal exactly when the
later one's same_as names the first such earlier one; pyramid:window=8 differs and is not marked. Refused:
nothing (every configuration is legal). TAP.
    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_same_as.py"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

import pandas as pd  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
NUMBERS = ["n_queries", "out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean", "attn_recall_min", "head_budget",
           "head_budget_mean"]


def run(*args):
    return subprocess.run([KVTRACE] + [str(a) for a in args], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        trace, res, an, figs = (os.path.join(tmp, n) for n in ("t.h5", "res", "an", "figs"))
        r = run("synth", "--like", "stories260k", "--tokens", 160, "--seed", 5, "--quiet", "-o", trace)
        check(r.returncode == 0, "synth", r.stderr)
        r = run("sim", trace, "--policies", "tova,streaming,snapkv", "--allocators",
                "uniform,pyramid,adakv,pyramid:window=8", "--budgets", "32,48", "--chunk", 16, "-o", res)
        if not check(r.returncode == 0, "sim: 3 policies x 4 allocators x 2 budgets, nothing refused", r.stderr):
            return finish()
        notes = [l for l in r.stderr.splitlines() if "note:" in l]
        rows = pd.read_csv(os.path.join(res, "results.csv"), keep_default_na=False)
        runs = list(dict.fromkeys(zip(rows.run, rows.budget)))
        table = {k: rows[(rows.run == k[0]) & (rows.budget == k[1])] for k in runs}
        bad, marked = [], 0
        for i, (run_i, b) in enumerate(runs):
            mine = table[(run_i, b)]
            equal = [run_j for run_j, bj in runs[:i] if bj == b and
                     (table[(run_j, bj)][NUMBERS].values == mine[NUMBERS].values).all()]
            said = set(mine.same_as)
            want = {equal[0] if equal else ""}
            marked += bool(equal)
            if said != want:
                bad.append((run_i, b, sorted(said), sorted(want)))
        check(not bad and marked > 0, "same_as names the first earlier run at the same budget whose every row is equal, "
              "and nothing else (%d of %d runs marked)" % (marked, len(runs)), bad[:4])
        pyr = rows[(rows.allocator == "pyramid:beta=20:window=32") & (rows.budget == 32)]
        w8 = rows[(rows.allocator == "pyramid:beta=20:window=8") & (rows.budget == 32)]
        check(len(pyr) and (pyr.same_as == pyr.run.str.replace("pyramid:beta=20:window=32", "uniform", regex=False)).all()
              and len(w8) and (w8.same_as == "").all(),
              "pyramid at N = 32 (window 32) is marked the same as uniform; pyramid:window=8 is not")
        check(len(notes) == 1 and ("%d configurations" % (marked,)) in notes[0] and "same_as" in notes[0],
              "one note line on stderr, with the count", notes)
        summ = pd.read_csv(os.path.join(res, "summary.csv"), keep_default_na=False)
        check(set(zip(summ.run, summ.budget, summ.same_as)) == set(zip(rows.run, rows.budget, rows.same_as)),
              "summary.csv carries the same same_as")
        r = run("analyze", trace, "--results", res, "-o", an, "--quiet")
        r2 = run("plot", an, "-o", figs, "--quiet") if r.returncode == 0 else r
        page = open(os.path.join(figs, "report.html"), encoding="utf-8").read() if r2.returncode == 0 else ""
        check(r2.returncode == 0 and "kept exactly the positions of an earlier configuration" in page
              and "<th>same as</th>" in page, "report.html's summary table says which rows coincide", r2.stderr)
        r = run("sim", trace, "--policies", "tova", "--allocators", "uniform,pyramid", "--budgets", 32, "--chunk", 16,
                "--quiet", "-o", os.path.join(tmp, "q"))
        check(r.returncode == 0 and not r.stderr, "--quiet: no note (the column still says it)", r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
