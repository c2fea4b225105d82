"""The needle study a researcher ran (docs/study.md, "Needle prompts"), replayed exactly, TAP: `prompts needle`
with 5 depths x 3 lengths (15 prompts of stories260K), `capture --prompts`, `sim` over spans x allocators x a
chunk sweep (keydiff, snapkv, tova, streaming, h2o under uniform, pyramid, adakv; budgets 32, 64; chunks 16,
32), `fidelity --prompts` on the same prompts and chunks, then `analyze` of sim's own output with `--baseline streaming`
and `--fidelity` (the join checked against pandas'), and `plot` of that: figure 8 (the allocators') drawn, the
heat maps of retention, attention recall and in-model exact match (figures 11-13) as pandas averages the
files, the paired table and its figure 14 in the report. Every recall and retention sim writes lies in [0, 1] (a recall is a
ratio of two sums from different float32 products of the same scores: with OpenBLAS's Haswell kernel 877 of the
36,000 span rows came out above 1, up to 1 + 1e-6, and analyze refused them), and analyze accepts the results.
The sim runs under OPENBLAS_CORETYPE=Haswell (the kernel that showed it) and the one the run was given.
Under ASan (the build-asan leg, tap.sanitized) the grid of prompts is 3 depths x 2 lengths (6 prompts) and every
step runs on it, each check the same: the same code paths at less than half ASan's time; the normal leg
replays the whole study.
    /usr/bin/python3 tests/scripts/test_needle_study.py [BUILD]"""
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, finish, model_file, sanitized, skip  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
# (depths, lengths, prompts): the researcher's study, or under ASan a smaller grid of the same (the docstring)
GRID = ("0,0.5,1", "150,450", 6) if sanitized(KV) else ("0,0.25,0.5,0.75,1", "150,300,450", 15)
STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\n"
         "One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high.\n"
         "Her friend Tom came to play too. They played with the ball all day and laughed a lot.\n"
         "When the sun went down, Lily went home. Her mom gave her a warm bowl of soup.\n"
         "Lily was happy. She went to bed and dreamed about the big red ball and her friend Tom.\n")


def run(*args, env=None):
    return subprocess.run([KV, *args], capture_output=True, text=True, env=env)


def fractions(path):
    """(rows, [(column, row, value)] of the recall and retention columns outside [0, 1])."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    cols = [c for c in (rows[0].keys() if rows else []) if ("recall" in c or "retention" in c)
            and not c.endswith(("_ci_lo", "_ci_hi"))]
    bad = [(c, i, r[c]) for i, r in enumerate(rows) for c in cols
           if r[c] not in ("", "nan") and not 0.0 <= float(r[c]) <= 1.0]
    return len(rows), bad


def heat_cells(fig):
    """The first configuration's cells of a heat map's .dat: {(budget, chunk, length index, depth index): v}."""
    rows = []
    if os.path.isfile(fig + ".dat"):
        text = open(fig + ".dat").read().split("\n\n\n")[0]
        rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    return {(int(b), int(c), int(li), int(di)): float(v) for b, c, li, di, v in rows}


def check_heat_map(frame, column, figs, fig, n_cells, what):
    """A heat map: per configuration, one cell per trace (depth x length), `column` of `frame` averaged
    over its rows of that trace (layers and kv heads for spans.csv), computed here with pandas, at every budget
    and chunk; NaN rows left out."""
    first = frame.iloc[0]
    mine = frame[(frame.config == first.config) & (frame.allocator == first.allocator)].dropna(subset=[column])
    want = mine.groupby(["budget", "chunk", "trace"])[column].mean()
    traces = want.index.get_level_values(2)
    lengths = sorted({int(t.split("-")[1]) for t in traces})
    depths = sorted({float(t.split("-")[2]) for t in traces})
    got = {(b, c, "needle-%d-%g" % (lengths[li], depths[di])): v for (b, c, li, di), v in
           heat_cells(os.path.join(figs, fig)).items()}
    ok = len(got) == len(want) == n_cells and all(abs(got[k] - v) < 1e-8 for k, v in want.items())
    check(ok and os.path.isfile(os.path.join(figs, fig + ".png")),
          "%s: per depth and length, one cell per trace, as pandas averages it (%d cells of the first "
          "configuration)" % (what, len(got)), (len(got), len(want)))


def check_join(res, fid, an):
    """analyze --fidelity: fidelity_join.csv is fidelity.csv's rows with a run in sim's results, beside
    summary_by_trace.csv's (phase all) and answer.csv's values of the same (trace, config, allocator, budget,
    chunk), joined here with pandas."""
    import pandas as pd
    key = ["trace", "config", "allocator", "budget", "chunk"]
    sim = pd.read_csv(os.path.join(res, "summary_by_trace.csv"))
    sim = sim[sim.phase == "all"][key + ["run", "out_rel_err_mean", "attn_recall_mean"]]
    fr = pd.read_csv(os.path.join(fid, "fidelity.csv"))[key + ["kl_mean", "greedy_agree", "ppl_full", "ppl_evict"]]
    ans = pd.read_csv(os.path.join(fid, "answer.csv"))
    ans = ans[key + [c for c in ans.columns if c.startswith(("answer_logprob", "answer_rank", "exact_match"))]]
    want = fr.merge(sim, on=key).merge(ans, on=key, how="left")
    got = pd.read_csv(os.path.join(an, "fidelity_join.csv"))
    both = got.merge(want, on=key, suffixes=("", "_want"))
    cols = [c for c in got.columns if c not in key + ["run"]]
    bad = [(c, int((abs(both[c] - both[c + "_want"]) > 1e-12 * (1 + abs(both[c + "_want"]))).sum())) for c in cols]
    bad = [b for b in bad if b[1]]
    check(len(got) == len(want) == len(both) == len(fr) and (both.run == both.run_want).all() and not bad,
          "fidelity_join.csv: fidelity.csv's %d rows beside summary_by_trace.csv's and answer.csv's, as pandas joins "
          "them" % len(fr), (len(got), len(want), len(both), bad))
    return got


def check_join_refusals(tmp, model, study, res, prompts):
    """--fidelity with a directory that is not fidelity --prompts', or shares no run with the results: exit 3,
    one line naming the file, nothing written."""
    one, other = os.path.join(tmp, "fid_one"), os.path.join(tmp, "fid_other")
    run("fidelity", "--model", model, "--prompt", "Once upon a time", "--generate", "40", "--policies", "streaming",
        "--budgets", "16", "--quiet", "-o", one)
    run("fidelity", "--prompts", prompts, "--model", model, "--policies", "streaming", "--budgets", "48", "--chunk",
        "32", "--quiet", "-o", other)
    for what, d in (("one prompt's fidelity output", one), ("no run in common", other),
                    ("a missing directory", os.path.join(tmp, "nowhere"))):
        out = os.path.join(tmp, "an_refused")
        r = run("analyze", study, "--results", res, "--fidelity", d, "--quiet", "-o", out)
        err = r.stderr.strip()
        check(r.returncode == 3 and err.count("\n") == 0 and d in err and not os.path.exists(out),
              "analyze --fidelity with %s: exit 3, one line naming it, nothing written" % what, (r.returncode, err))


def main():
    model = model_file()
    if not model:
        skip("the needle study replays", NO_MODEL)
        return finish()
    with tempfile.TemporaryDirectory(prefix="kvtrace-needle-") as tmp:
        return study(model, tmp)


def study(model, tmp):
    hay, prompts, study = (os.path.join(tmp, n) for n in ("hay.txt", "p.jsonl", "study"))
    with open(hay, "w") as f:
        f.write(STORY)
    r = run("prompts", "needle", "--haystack", hay, "--needle", "The secret code is 4721.", "--question",
            "What is the secret code?", "--answer", "4721", "--depths", GRID[0], "--lengths", GRID[1], "--model",
            model, "-o", prompts)
    if not check(r.returncode == 0, "prompts needle: %d depths x %d lengths" % (GRID[0].count(",") + 1,
                                                                                GRID[1].count(",") + 1), r.stderr):
        return finish()
    r = run("capture", "--prompts", prompts, "--model", model, "--chunk", "32", "--quiet", "-o", study)
    if not check(r.returncode == 0, "capture --prompts: the %d traces" % GRID[2], r.stderr):
        return finish()
    kernels = ["Haswell"] + ([os.environ["OPENBLAS_CORETYPE"]] if os.environ.get("OPENBLAS_CORETYPE") not in
                             (None, "", "Haswell") else [])
    for k in kernels:
        res, an = os.path.join(tmp, "res_" + k), os.path.join(tmp, "an_" + k)
        env = dict(os.environ, OPENBLAS_CORETYPE=k)
        r = run("sim", study, "--policies", "keydiff,snapkv,tova,streaming,h2o", "--allocators", "uniform,pyramid,adakv",
                "--budgets", "32,64", "--chunks", "16,32", "--quiet", "-o", res, env=env)
        if not check(r.returncode == 0, "sim: spans x allocators x chunks (OPENBLAS_CORETYPE=%s)" % k, r.stderr):
            continue
        for name in ("spans.csv", "results.csv", "summary.csv", "spans_summary.csv"):
            n, bad = fractions(os.path.join(res, name))
            check(n > 0 and not bad, "%s: every recall and retention of its %d rows in [0, 1] (%s)" % (name, n, k),
                  "%d outside, e.g. %s" % (len(bad), bad[:3]))
        if k != kernels[0]:
            r = run("analyze", study, "--results", res, "--quiet", "-o", an, env=env)
            check(r.returncode == 0, "analyze accepts sim's own output (%s)" % k, r.stderr)
            continue
        fid = os.path.join(tmp, "fid")
        r = run("fidelity", "--prompts", prompts, "--model", model, "--policies", "keydiff,streaming",
                "--allocators", "uniform,adakv", "--budgets", "32,64", "--chunks", "16,32", "--quiet", "-o", fid,
                env=env)
        check(r.returncode == 0, "fidelity --prompts on the study's prompts", r.stderr)
        r = run("analyze", study, "--results", res, "--baseline", "streaming", "--fidelity", fid, "--quiet", "-o", an,
                env=env)
        if not check(r.returncode == 0, "analyze accepts sim's own output, with --baseline and --fidelity (%s)" % k,
                     r.stderr):
            continue
        join = check_join(res, fid, an)
        figs = os.path.join(tmp, "figs")
        r = run("plot", an, "--quiet", "-o", figs)
        page = open(os.path.join(figs, "report.html"), encoding="utf-8").read() if r.returncode == 0 else ""
        check(r.returncode == 0 and os.path.isfile(os.path.join(figs, "fig8_alloc.png"))
              and "budgets.csv is missing" not in page,
              "plot of the study's analysis draws figure 8 (the allocators' budgets; it said budgets.csv was "
              "missing although sim ran with allocators)", r.stderr + page[-300:])
        import pandas as pd
        sp = pd.read_csv(os.path.join(res, "spans.csv"))
        sp = sp[sp.span == "needle"]
        check_heat_map(sp, "retention_final", figs, "fig11_needle", 2 * 2 * GRID[2], "figure 11: the needle's retention")
        check_heat_map(sp, "attn_recall", figs, "fig12_needle_recall", 2 * 2 * GRID[2],
                       "figure 12: the needle's attention recall")
        check_heat_map(join, "exact_match_evict", figs, "fig13_needle_answer", 2 * 2 * GRID[2],
                       "figure 13: exact match inside the model")
        check(os.path.isfile(os.path.join(figs, "fig14_paired.png")) and 'id="paired"' in page and
              all('fig1%d' % i in page for i in (1, 2, 3, 4)),
              "the report shows the heat maps, the paired table and its figure")
        check_join_refusals(tmp, model, study, res, prompts)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
