"""Span retention in the analysis and the report (docs/plot.md#the-figures, figure 10): the report
shows span retention with confidence intervals per policy and budget. Synthetic traces with /spans (two of
three hold the span 'tail') are simulated with --chunks; `analyze` copies sim's spans.csv and
spans_summary.csv after checking them against their schemas (a damaged one: exit 3, one line,
nothing written), and `plot` draws figure 10 (fig10_spans_S.dat: one file per span name, one
block per configuration at the first chunk, budget then mean lo hi of retention_mean,
retention_final, attn_recall) and the report's span table. Checked against pandas: the summary's
means recomputed from spans.csv (mean over layers and kv heads, then over traces), its intervals
from the bootstrap's resamples (tests/lib/kvrng.py), the figure's data and the table's cells from
spans_summary.csv; bands only with several traces; no spans: the figure and table say so. TAP.
    /usr/bin/python3 tests/scripts/test_span_report.py [BUILD]"""
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
os.environ.setdefault("KVTRACE", os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
from tap import check, finish  # noqa: E402
import test_analyze_study as tas  # noqa: E402  (write_trace, run, bootstrap_idx, mean_ci, close, dat_blocks)

STATS = ["retention_mean", "retention_final", "attn_recall"]
KEY = ["span", "config", "budget", "chunk", "allocator"]


def write_spans(path, spans):
    with h5py.File(path, "a") as f:
        g = f.create_group("spans")
        g.attrs["description"] = "test spans"
        g.create_dataset("names", data=[n for n, _, _ in spans], dtype=h5py.string_dtype("utf-8"))
        g["starts"] = np.array([s for _, s, _ in spans], dtype=np.int64)
        g["ends"] = np.array([e for _, _, e in spans], dtype=np.int64)


def make_study(tmp):
    d = os.path.join(tmp, "study")
    os.makedirs(d)
    paths = []
    spans = ([("needle", 10, 16), ("tail", 30, 40)], [("needle", 20, 25)], [("needle", 5, 9), ("tail", 44, 50)])
    for i, (T, P) in enumerate(((70, 50), (64, 40), (75, 60))):
        paths.append(os.path.join(d, "p%d.h5" % i))
        tas.write_trace(paths[-1], 40 + i, T, P)
        write_spans(paths[-1], spans[i])
    return paths


def sim(paths, out):
    return tas.run("sim", *paths, "--policies", "keydiff,tova,streaming", "--budgets", "16,24", "--chunks", "8,16",
                   "--quiet", "-o", out)


def check_summary(an):
    """spans_summary.csv from spans.csv in pandas: per trace the mean over layers and kv heads, then over traces."""
    rows = pd.read_csv(os.path.join(an, "spans.csv"), keep_default_na=False, na_values=["nan"])
    summ = pd.read_csv(os.path.join(an, "spans_summary.csv"), keep_default_na=False, na_values=["nan"])
    per_trace = rows.groupby(["trace"] + KEY, sort=False)[STATS].mean().reset_index()
    order = list(dict.fromkeys(rows.trace))
    ok_mean, ok_ci, n = True, True, 0
    for _, r in summ.iterrows():
        sel = per_trace[(per_trace.span == r.span) & (per_trace.config == r.config) & (per_trace.budget == r.budget) &
                        (per_trace.chunk == r.chunk) & (per_trace.allocator == r.allocator)]
        sel = sel.set_index("trace").loc[[t for t in order if t in set(sel.trace)]]
        ok_mean = ok_mean and len(sel) == r.n_traces
        idx = tas.bootstrap_idx(len(sel))
        for s in STATS:
            m, lo, hi = tas.mean_ci(sel[s].to_numpy(), idx)
            ok_mean = ok_mean and tas.close(r[s], m, 1e-8)
            ok_ci = ok_ci and tas.close(r[s + "_ci_lo"], lo, 1e-8) and tas.close(r[s + "_ci_hi"], hi, 1e-8)
        n += 1
    check(ok_mean and n == len(per_trace.groupby(KEY)), "spans_summary.csv: %d rows, each the mean over traces of the "
          "mean over layers and kv heads of spans.csv, n_traces as held (pandas)" % n)
    check(ok_ci, "spans_summary.csv: the 95% intervals from the bootstrap's resamples (numpy)")
    return summ


def check_figure(figs, summ, band):
    names = list(dict.fromkeys(summ.span))
    first = summ.chunk.iloc[0]
    ok = True
    for i, name in enumerate(names[:4]):
        got = tas.dat_blocks(os.path.join(figs, "fig10_spans_%d.dat" % i))
        sel = summ[(summ.span == name) & (summ.chunk == first)]
        want = {}
        for _, r in sel.sort_values("budget").iterrows():
            want.setdefault(r.config, []).append([r.budget] + [r[s + e] for s in STATS for e in ("", "_ci_lo", "_ci_hi")])
        ok = ok and got.keys() == want.keys() and all(
            len(got[c]) == len(want[c]) and all(tas.close(a, b, 1e-8) for x, y in zip(got[c], want[c])
                                                for a, b in zip(x, y)) for c in want)
    check(ok, "fig10_spans_S.dat: per span name, per configuration, by budget at the first chunk (%d): the three "
          "statistics and their intervals as spans_summary.csv's" % first)
    gp = open(os.path.join(figs, "fig10_spans.gp")).read()
    check(("filledcurves" in gp) == band and os.path.isfile(os.path.join(figs, "fig10_spans.png")),
          "fig10_spans rendered, confidence bands %s" % ("drawn" if band else "absent with one trace"))


def report_rows(figs):
    page = open(os.path.join(figs, "report.html"), encoding="utf-8").read()
    part = page[page.index('<h2 id="spans">'):]
    part = part[:part.index("</table>")] if "</table>" in part else part
    return page, [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
                  for tr in re.findall(r"<tr>(<td.*?)</tr>", part)]


def check_table(figs, summ):
    _, got = report_rows(figs)
    want = []
    for _, r in summ.iterrows():
        policy, _, params = r.config.partition(":")
        cells = [r.span, policy, params, r.allocator, str(r.budget), str(r.chunk), str(r.n_traces)]
        for s in STATS:
            c = "%.4f" % r[s]
            if r.n_traces > 1:
                c += " [%.4f, %.4f]" % (r[s + "_ci_lo"], r[s + "_ci_hi"])
            cells.append(c)
        want.append(cells)
    check(got == want, "report.html's span table: one row per spans_summary.csv row (span, policy, params, "
          "allocator, budget, chunk, traces, mean [lo, hi] of each statistic)",
          lambda: "got %s\nwant %s" % (got[:2], want[:2]))


def refused(p, out, *words):
    return p.returncode == 3 and not os.path.exists(out) and p.stderr.count("\n") == 1 and \
        all(w in p.stderr for w in words)


def damage(src, dst, name, edit):
    shutil.copytree(src, dst)
    path = os.path.join(dst, name)
    if edit is None:
        os.remove(path)
        return
    lines = open(path).read().splitlines(True)
    open(path, "w").write("".join(edit(lines)))


def set_cell(col, value):
    def edit(lines):
        head = lines[0].rstrip("\n").split(",")
        cells = lines[1].rstrip("\n").split(",")
        cells[head.index(col)] = value
        return [lines[0], ",".join(cells) + "\n"] + lines[2:]
    return edit


def rename_run(lines):
    """Every row of the first row's configuration renamed: whole grids, of a run results.h5 does not hold."""
    head = lines[0].rstrip("\n").split(",")
    j = head.index("config")
    config = lines[1].split(",")[j]
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        if cells[j] == config:
            cells[j] = "nosuch"
        out.append(",".join(cells))
    return out


def refusals(tmp, paths, res, an):
    cases = [("spans_summary.csv", set_cell("retention_final", "1.5"), "spans_summary.csv", "retention_final"),
             ("spans.csv", lambda l: l[:-1], "spans.csv", "rows"),
             ("spans.csv", rename_run, "spans.csv", "nosuch"),
             ("spans.csv", None, "spans.csv", "missing")]
    for i, (name, edit, *words) in enumerate(cases):
        bad, out = os.path.join(tmp, "res_bad%d" % i), os.path.join(tmp, "an_bad%d" % i)
        damage(res, bad, name, edit)
        p = tas.run("analyze", *paths, "--results", bad, "--quiet", "-o", out)
        check(refused(p, out, *words), "analyze: a damaged %s (%s): exit 3, one line, nothing written" % (
            name, words[-1]), p.stderr)
    for i, (name, edit, *words) in enumerate(cases[:3]):
        bad, out = os.path.join(tmp, "an_cut%d" % i), os.path.join(tmp, "figs_bad%d" % i)
        damage(an, bad, name, edit)
        p = tas.run("plot", bad, "--quiet", "-o", out)
        check(refused(p, out, *words), "plot: a damaged %s in the analysis (%s): exit 3, one line, nothing written" % (
            name, words[-1]), p.stderr)


def one_trace(tmp, paths):
    res, an, figs = (os.path.join(tmp, n) for n in ("res1", "an1", "figs1"))
    p = sim(paths[:1], res)
    p = p.returncode == 0 and tas.run("analyze", paths[0], "--results", res, "--quiet", "-o", an)
    if not check(p and p.returncode == 0, "one trace with spans: sim and analyze", p and p.stderr):
        return
    check(all(tas.same_bytes(os.path.join(an, n), os.path.join(res, n)) for n in ("spans.csv", "spans_summary.csv")),
          "one trace: spans.csv and spans_summary.csv copied")
    p = tas.run("plot", an, "--quiet", "-o", figs)
    if check(p.returncode == 0, "one trace: plot", p.stderr):
        summ = check_summary(an)
        check_figure(figs, summ, False)
        check_table(figs, summ)


def no_spans(tmp):
    t, res, an, figs = (os.path.join(tmp, n) for n in ("plain.h5", "res0", "an0", "figs0"))
    tas.write_trace(t, 7, 60, 40)
    p = sim([t], res)
    p = p.returncode == 0 and tas.run("analyze", t, "--results", res, "--quiet", "-o", an)
    p = p and p.returncode == 0 and tas.run("plot", an, "--quiet", "-o", figs)
    if not check(p and p.returncode == 0, "a trace without spans: sim, analyze, plot", p and p.stderr):
        return
    page, rows = report_rows(figs)
    check(not os.path.exists(os.path.join(an, "spans.csv")) and not os.path.exists(os.path.join(figs, "fig10_spans.gp"))
          and "Not drawn: no spans" in page and "No spans: spans_summary.csv is missing" in page and rows == [],
          "no spans: no span files, figure 10 not drawn and the span table skipped, each with a note")


def main():
    with tempfile.TemporaryDirectory(prefix="kvtrace_span_report_") as tmp:
        paths = make_study(tmp)
        res, an, figs = (os.path.join(tmp, n) for n in ("res", "an", "figs"))
        p = sim(paths, res)
        if not check(p.returncode == 0, "sim over 3 traces with spans, --chunks 8,16", p.stderr):
            return finish()
        p = tas.run("analyze", *paths, "--results", res, "--quiet", "-o", an)
        if not check(p.returncode == 0, "analyze over the study", p.stderr):
            return finish()
        check(all(tas.same_bytes(os.path.join(an, n), os.path.join(res, n)) for n in ("spans.csv", "spans_summary.csv")),
              "study: spans.csv and spans_summary.csv copied into the analysis")
        summ = check_summary(an)
        check(set(summ[summ.span == "tail"].n_traces) == {2} and set(summ[summ.span == "needle"].n_traces) == {3},
              "n_traces: 3 for needle, 2 for tail (held by two traces)")
        p = tas.run("plot", an, "--quiet", "-o", figs)
        if check(p.returncode == 0, "plot over the study", p.stderr):
            check_figure(figs, summ, True)
            check_table(figs, summ)
        refusals(tmp, paths, res, an)
        one_trace(tmp, paths)
        no_spans(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
