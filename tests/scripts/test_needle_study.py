"""The needle study a researcher ran (docs/study.md, "Needle prompts"), replayed exactly, TAP: `prompts needle`
with 5 depths x 3 lengths (15 prompts of stories260K), `capture --prompts`, `sim` over spans x allocators x a
chunk sweep (keydiff, snapkv, tova, streaming, h2o under uniform, pyramid, adakv; budgets 32, 64; chunks 16,
32), then `analyze` of sim's own output and `plot` of that (figure 8, the allocators', drawn). Every recall and retention sim writes lies in [0, 1] (a recall is a
ratio of two sums from different float32 products of the same scores: with OpenBLAS's Haswell kernel 877 of the
36,000 span rows came out above 1, up to 1 + 1e-6, and analyze refused them), and analyze accepts the results.
The sim runs under OPENBLAS_CORETYPE=Haswell (the kernel that showed it) and the one the run was given.
    /usr/bin/python3 tests/scripts/test_needle_study.py [BUILD]"""
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
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


def check_heat_map(res, figs):
    """Figure 11: per configuration, one cell per trace (5 depths x 3 lengths), the needle's retention_final
    averaged over layers and kv heads of spans.csv (computed here with pandas), at every budget and chunk."""
    import pandas as pd
    sp = pd.read_csv(os.path.join(res, "spans.csv"))
    sp = sp[sp.span == "needle"]
    first = sp.iloc[0]
    want = sp[(sp.config == first.config) & (sp.allocator == first.allocator)].groupby(
        ["budget", "chunk", "trace"]).retention_final.mean()
    path = os.path.join(figs, "fig11_needle.dat")
    rows = []
    if os.path.isfile(path):
        text = open(path).read().split("\n\n\n")[0]
        rows = [l.split() for l in text.splitlines() if l and not l.startswith("#")]
    lengths, depths = sorted({int(t.split("-")[1]) for t in want.index.get_level_values(2)}), \
        sorted({float(t.split("-")[2]) for t in want.index.get_level_values(2)})
    got = {(int(b), int(c), "needle-%d-%g" % (lengths[int(li)], depths[int(di)])): float(v) for b, c, li, di, v in rows}
    ok = len(got) == len(want) == 2 * 2 * 15 and all(abs(got[k] - v) < 1e-8 for k, v in want.items())
    check(ok and os.path.isfile(os.path.join(figs, "fig11_needle.png")),
          "figure 11: the needle's retention_final per depth and length, one cell per trace, as pandas averages "
          "spans.csv (%d cells of the first configuration)" % len(got))


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
            "What is the secret code?", "--answer", "4721", "--depths", "0,0.25,0.5,0.75,1", "--lengths",
            "150,300,450", "--model", model, "-o", prompts)
    if not check(r.returncode == 0, "prompts needle: 5 depths x 3 lengths", r.stderr):
        return finish()
    r = run("capture", "--prompts", prompts, "--model", model, "--chunk", "32", "--quiet", "-o", study)
    if not check(r.returncode == 0, "capture --prompts: the 15 traces", r.stderr):
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
        r = run("analyze", study, "--results", res, "--quiet", "-o", an, env=env)
        check(r.returncode == 0, "analyze accepts sim's own output (%s)" % k, r.stderr)
        if r.returncode == 0 and k == kernels[0]:
            figs = os.path.join(tmp, "figs")
            r = run("plot", an, "--quiet", "-o", figs)
            page = open(os.path.join(figs, "report.html"), encoding="utf-8").read() if r.returncode == 0 else ""
            check(r.returncode == 0 and os.path.isfile(os.path.join(figs, "fig8_alloc.png"))
                  and "budgets.csv is missing" not in page,
                  "plot of the study's analysis draws figure 8 (the allocators' budgets; it said budgets.csv was "
                  "missing although sim ran with allocators)", r.stderr + page[-300:])
            check_heat_map(res, figs)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
