"""`kvtrace demo` end to end on the test model directory (KVTRACE_MODEL_DIR, made by
tests/run_all.sh): the pipeline runs, the report exists and links only files that
exist, the eight figures are PNGs (figure 4's legend lists the full cache once
although the demo runs `full` at every budget), every step's output is there, and an existing
directory is refused without --force and left as it was; the demo's provenance.json
and `kvtrace info` record the commands; and the commands report.html shows (capture,
sim, analyze, plot), re-run in a fresh folder, reproduce the demo's outputs byte for
byte: the trace's data, the results CSVs (timing.csv aside) and results.h5's data, the
analysis CSVs, the figures' data files and scripts (provenance aside, docs/provenance.md).
Skipped (TAP # SKIP) without the model.

Under ASan (the build-asan leg, tap.sanitized) the re-run of the report's four commands runs in the
normal leg only: it runs the same verbs on the same inputs as the demo's own first four steps, which
the ASan leg runs, so it adds no C path there, only ~40 s; its byte-for-byte checks are of the
commands shown, which the normal leg makes. So does the demo --short case (~40 s under ASan): the
--short path runs under ASan in test_progress.py (interval 0) and test_hostile_files.py (the
full-disk reference run and its file-size-limit case)."""
import filecmp
import html as htmllib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tap  # noqa: E402
import datacmp  # noqa: E402

KV = os.environ.get("KVTRACE") or os.path.join(os.environ.get("ROOT", "."), "build", "kvtrace")


def rerun(out, html, tmp, again=True):
    """The report's commands and the provenance's; with again, the commands run in a fresh folder, their
    outputs against the demo's."""
    m = re.search(r'<pre class="commands">(.*?)</pre>', html, re.S)
    cmds = [htmllib.unescape(l) for l in m.group(1).splitlines()] if m else []
    tap.check([c.split()[1] for c in cmds] == ["capture", "sim", "analyze", "plot"],
              "the report shows the commands capture, sim, analyze, plot", cmds)
    prov = json.load(open(os.path.join(out, "provenance.json")))
    steps = [s["command"] for s in prov["steps"]]
    tap.check(steps[:4] == cmds and prov["verb"] == "demo",
              "the demo's provenance.json records the same four commands first", prov)
    tap.check([c.split()[1:3] for c in steps[4:7]] == [["sim", "trace.h5"], ["analyze", "trace.h5"],
                                                       ["plot", "allocators/analysis"]]
              and "--allocators" in steps[4], "then the allocator study's three", steps[4:7])
    tap.check([c.split()[1:3] for c in steps[7:]] == [["prompts", "needle"], ["capture", "--prompts"],
                                                      ["sim", "needle/study"], ["fidelity", "--prompts"],
                                                      ["analyze", "needle/study"], ["plot", "needle/analysis"]],
              "then the needle study's six (prompts needle, capture --prompts, sim, fidelity, analyze, plot)",
              steps[7:])
    if not again:
        print("# ASan leg: the re-run of the report's commands runs in the normal leg (see the docstring)")
        return
    fresh = os.path.join(tmp, "fresh")
    os.makedirs(fresh)
    for c in cmds:
        words = shlex.split(c)
        r = subprocess.run([KV] + words[1:], cwd=fresh, capture_output=True, text=True)
        if not tap.check(words[0] == "kvtrace" and r.returncode == 0, "re-run: %s" % c[:60], r.stderr[-500:]):
            return
    tap.check(datacmp.h5_diff(os.path.join(out, "trace.h5"), os.path.join(fresh, "trace.h5")) == [],
              "re-run: the trace's data is byte-identical")
    diff = datacmp.dir_diff(os.path.join(out, "results"), os.path.join(fresh, "results"), skip=("timing.csv",))
    tap.check(not diff, "re-run: results.csv, summary.csv and results.h5's data are byte-identical", diff)
    diff = datacmp.dir_diff(os.path.join(out, "analysis"), os.path.join(fresh, "analysis"), skip=("timing.csv",))
    tap.check(not diff, "re-run: every analysis CSV is byte-identical (timing.csv aside)", diff)
    figs = sorted(f for f in os.listdir(os.path.join(fresh, "figures")) if f.endswith((".dat", ".gp")))
    differ = [f for f in figs if not filecmp.cmp(os.path.join(out, "figures", f), os.path.join(fresh, "figures", f),
                                                 shallow=False)
              and f != "fig6_timing.dat"]
    tap.check(len(figs) >= 12 and not differ, "re-run: the figures' data files and gnuplot scripts are byte-identical "
              "(%d files; fig6_timing.dat, made from timing.csv, aside)" % len(figs), differ)


def alloc_study(out):
    """The allocator study under allocators/: every allocator's runs, budgets exact, its figure drawn."""
    import pandas as pd
    res = os.path.join(out, "allocators", "results", "results.csv")
    if not tap.check(os.path.isfile(res), "the allocator study's results.csv is there"):
        return
    df = pd.read_csv(res)
    allocs = sorted(set(a.split(":")[0] for a in df["allocator"]))
    tap.check(allocs == ["adakv", "cake", "duo", "pyramid", "uniform"] and sorted(set(df["policy"])) ==
              ["keydiff", "snapkv", "tova"], "it runs snapkv, keydiff, tova under five allocators", (allocs, set(df["policy"])))
    tap.check(sorted(set(df["budget_fraction"].round(6))) == [0.1, 0.25],
              "at 10% and 25% of T (budget_fraction recorded)", set(df["budget_fraction"]))
    bud = pd.read_csv(os.path.join(out, "allocators", "analysis", "budgets.csv"))
    # every (run, layer, kv head) once; each run's heads keep at most L*K*N rows in all
    tot = bud.groupby(["config", "allocator", "budget"])["head_budget"].sum().reset_index()
    L, K = bud["layer"].nunique(), bud["kv_head"].nunique()
    tap.check(len(tot) == 30 and (tot["head_budget"] <= L * K * tot["budget"]).all(),
              "budgets.csv: 30 runs, none keeping more than L*K*N rows", tot.head())
    fig = os.path.join(out, "allocators", "figures", "fig8_alloc.png")
    rep = os.path.join(out, "allocators", "figures", "report.html")
    tap.check(os.path.isfile(fig) and os.path.isfile(rep) and "fig8_alloc.png" in open(rep).read(),
              "its report shows figure 8 (budgets per layer and head, error against memory)")


def needle_study(out):
    """The needle study under needle/: six prompts (two lengths, three depths) from the haystack the demo
    wrote, each with its needle and answer spans; span retention per policy, budget and chunk."""
    import csv
    d = os.path.join(out, "needle")
    lines = [json.loads(x) for x in open(os.path.join(d, "prompts.jsonl"))] if os.path.isdir(d) else []
    index = [json.loads(x) for x in open(os.path.join(d, "study", "index.jsonl"))] if lines else []
    tap.check(len(lines) == 6 and len(index) == 6 and all(x["tokens"] <= int(x["id"].split("-")[1]) for x in index),
              "needle/: six prompts, each within its length in tokens", index)
    rows = list(csv.DictReader(open(os.path.join(d, "results", "spans_summary.csv")))) if lines else []
    needle = [r for r in rows if r["span"] == "needle"]
    tap.check(len(needle) == 16 and all(r["n_traces"] == "6" and 0 <= float(r["retention_mean_ci_lo"]) <=
                                        float(r["retention_mean"]) <= float(r["retention_mean_ci_hi"]) <= 1
                                        for r in needle),
              "needle/results/spans_summary.csv: the needle's retention over six prompts with its interval, for "
              "four policies x two budgets x two chunks", needle[:2])
    same = lines and all(open(os.path.join(d, "analysis", n), "rb").read() ==
                         open(os.path.join(d, "results", n), "rb").read() for n in ("spans.csv", "spans_summary.csv"))
    page = open(os.path.join(d, "figures", "report.html"), encoding="utf-8").read() if same else ""
    spans = page[page.find('<h2 id="spans">'):] if page else ""
    tap.check(same and os.path.isfile(os.path.join(d, "figures", "fig10_spans.png")) and
              'id="fig10_spans"' in page and spans.count("<tr><td>needle</td>") == 16 and
              re.search(r"<td class=\"num\">0\.\d{4} \[0\.\d{4}, [01]\.\d{4}\]</td>", spans),
              "needle/figures/report.html: figure 10 (span retention) and the span table, the needle's 16 rows "
              "with their intervals; needle/analysis holds sim's span files")
    fid = list(csv.DictReader(open(os.path.join(d, "fidelity", "answer.csv")))) if lines else []
    prompts = {r["trace"] for r in fid}
    tap.check(len(prompts) == 6 and len(fid) == 6 * 8 and
              all(float(r["answer_logprob_full"]) < 0 and abs(float(r["answer_logprob_evict"]) - float(r["answer_logprob_full"])
                                                             - float(r["answer_logprob_delta"])) < 1e-6 for r in fid),
              "needle/fidelity/answer.csv: each prompt's answer log-probability under the four policies at two "
              "budgets against the full run's", fid[:2])
    join = list(csv.DictReader(open(os.path.join(d, "analysis", "fidelity_join.csv")))) if lines else []
    tap.check(len(join) == 6 * 8 and all(os.path.isfile(os.path.join(d, "figures", n + ".png")) for n in
                                         ("fig11_needle", "fig12_needle_recall", "fig13_needle_answer", "fig14_paired"))
              and 'id="paired"' in page,
              "needle/: analyze joins the in-model answers (fidelity_join.csv) and pairs against streaming; the report "
              "draws the heat maps and the paired differences", len(join))


def short(tmp):
    """demo --short: steps 1-4 only (the trace through sim, analyze and plot), no allocator or needle study."""
    out = os.path.join(tmp, "short")
    r = subprocess.run([KV, "demo", "--short", "-o", out, "--quiet"], capture_output=True, text=True)
    tap.check(r.returncode == 0 and out + "/figures/report.html" in r.stdout and "allocator" not in r.stdout,
              "demo --short exits 0 and prints its report's path alone", lambda: r.stdout + r.stderr[-2000:])
    kept = sorted(os.listdir(out)) if os.path.isdir(out) else []
    tap.check({"trace.h5", "results", "analysis", "figures"} <= set(kept)
              and not {"allocators", "needle"} & set(kept), "demo --short keeps the first four steps' outputs only",
              kept)
    prov = json.load(open(os.path.join(out, "provenance.json"))) if os.path.isfile(os.path.join(out, "provenance.json")) else {}
    verbs = [s.get("verb") for s in prov.get("steps", [])]
    tap.check(verbs == ["capture", "sim", "analyze", "plot"], "its provenance.json lists the four steps", prov.get("steps"))


def main():
    if not tap.model_file():
        tap.skip("kvtrace demo end to end", tap.NO_MODEL)
        return tap.finish()
    with tempfile.TemporaryDirectory(prefix="kvtrace_demo.") as tmp:
        out = os.path.join(tmp, "demo")
        r = subprocess.run([KV, "demo", "-o", out, "--quiet"], capture_output=True, text=True)
        tap.check(r.returncode == 0, "kvtrace demo exits 0", lambda: r.stderr[-2000:])
        figdir = os.path.join(out, "figures")   # where the report's own plot command (-o figures) writes
        report = os.path.join(figdir, "report.html")
        tap.check(out + "/figures/report.html" in r.stdout, "the report's path is printed at the end", r.stdout)
        tap.check(os.path.isfile(report), "report.html is written")
        html = open(report, encoding="utf-8").read() if os.path.isfile(report) else ""
        links = re.findall(r'(?:href|src)="([^"#][^"]*)"', html)
        local = [l for l in links if not re.match(r"[a-z]+:", l)]
        external = [l for l in links if re.match(r"[a-z]+:", l)]
        missing = [l for l in local if not os.path.exists(os.path.join(figdir, l))]
        tap.check(local and not missing, "the report links only files that exist (%d links)" % len(local), missing)
        tap.check(not external, "the report loads nothing from outside (offline)", external)
        for n in range(1, 9):
            pngs = [f for f in os.listdir(figdir) if f.startswith("fig%d_" % n) and f.endswith(".png")] \
                if os.path.isdir(figdir) else []
            ok = len(pngs) == 1 and open(os.path.join(figdir, pngs[0]), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
            tap.check(ok and pngs[0] in html, "figure %d is a PNG shown in the report" % n, pngs)
        gp4 = os.path.join(figdir, "fig4_logdet.gp")
        titles = re.findall(r"title '([^']*)'", open(gp4).read()) if os.path.isfile(gp4) else []
        tap.check(titles.count("full cache") == 1 and "full" not in titles and "oracle" in titles,
                  "figure 4's legend lists the full cache once (sim's full runs are not drawn again)", titles)
        for part in ["analysis/results.csv", "trace.h5", "results/summary.csv", "results/results.h5", "analysis/spearman.csv",
                     "analysis/meta.csv"]:
            tap.check(os.path.isfile(os.path.join(out, part)), "the demo keeps %s" % part)
        info = subprocess.run([KV, "info", os.path.join(out, "trace.h5")], capture_output=True, text=True)
        m = re.search(r"T=(\d+)", info.stdout)
        tap.check(m and 400 <= int(m.group(1)) <= 512, "the trace is a ~500-token run", info.stdout[:400])
        tap.check("provenance" in info.stdout and "kvtrace capture --model" in info.stdout,
                  "kvtrace info on the demo trace shows its provenance", info.stdout[-600:])
        alloc_study(out)
        needle_study(out)
        rerun(out, html, tmp, again=not tap.sanitized(KV))
        leftovers = [f for f in os.listdir(tmp) if f.startswith(".")]
        tap.check(not leftovers, "no temporary directory left beside it", leftovers)
        before = sorted(os.listdir(out)) if os.path.isdir(out) else []
        r = subprocess.run([KV, "demo", "-o", out, "--quiet"], capture_output=True, text=True)
        tap.check(r.returncode == 2 and r.stderr.count("kvtrace: error:") == 1 and "--force" in r.stderr,
                  "an existing directory is refused without --force (exit 2, one line)", r.stderr)
        tap.check(sorted(os.listdir(out)) == before, "and left as it was")
        if tap.sanitized(KV):
            print("# ASan leg: demo --short runs in the normal leg here (see the docstring)")
        else:
            short(tmp)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
