"""The tables of docs/findings.md from scripts/findings.sh's output directory, as Markdown on stdout.
    /usr/bin/python3 scripts/findings_tables.py [DIR [full|screen|rho|inmodel]]      (default out/findings, all)
Every number is read from a CSV kvtrace wrote (fidelity's answer.csv and summary.csv, sim's and analyze's
spans_summary.csv, summary.csv, study_spearman.csv); the paired intervals and the rank correlation between
offline and in-model are computed here: a 95% percentile bootstrap over prompts (10,000 resamples, seed 0) and
Spearman's rho with average ranks."""
import csv
import json
import math
import os
import random
import subprocess
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "out/findings"
TASKS = ("niah", "multikey", "multivalue", "multiquery", "vt", "cwe")


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def bootstrap(values, reps=10000, seed=0):
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    return means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den > 0 else float("nan")


def short(config):
    """keydiff:anchor=norm:metric=cos:window=0 -> keydiff; only the parameters that differ from the defaults."""
    name, _, params = config.partition(":")
    keep = {"keydiff": ("window",)}.get(name, ())
    extra = [p for p in params.split(":") if p and p.split("=")[0] in keep and p.split("=")[1] not in ("0",)]
    return ":".join([name] + extra)


def ci(lo, hi, pct=True):
    f = (lambda v: "%.0f" % (100 * v)) if pct else (lambda v: "%.2f" % v)
    return "[%s, %s]" % (f(lo), f(hi))


def item_share(answer, continuation, task):
    """RULER's string_match_all: the share of the answer's items found anywhere in the continuation."""
    items = answer.split(" ") if task == "vt" else answer.split(", ")
    return sum(x in continuation for x in items) / len(items)


def full_rows(piece, task, L):
    path = os.path.join(OUT, piece, "%s-%d" % (task, L), "answer.csv")
    return rows(path) if os.path.exists(path) else None


def full_table():
    print("| task | haystack | length | prompts | full cache: exact match | 95% interval (%) | RULER's item share "
          "(full) | streaming at N = L/4: exact match |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    cells = [("full", t, "word list" if t == "cwe" else "noise") for t in TASKS] + [("prose", "niah",
                                                                                        "Sherlock Holmes")]
    for piece, task, hay in cells:
        for L in (1024, 2048):
            a = full_rows(piece, task, L)
            if a is None:
                continue
            full = [float(r["exact_match_full"]) for r in a]
            ev = [float(r["exact_match_evict"]) for r in a]
            share = [item_share(r_answer(piece, task, L, r["trace"]), r["continuation_full"], task) for r in a]
            lo, hi = bootstrap(full)
            print("| %s | %s | %d | %d | %d (%.0f%%) | %s | %.2f | %d |" % (
                task, hay, L, len(a), sum(full), 100 * sum(full) / len(a), ci(lo, hi), sum(share) / len(share),
                sum(ev)))


def r_answer(piece, task, L, trace):
    """The prompt's answer text, from the prompts file the piece wrote."""
    with open(os.path.join(OUT, piece, "%s-%d.jsonl" % (task, L))) as f:
        for line in f:
            x = json.loads(line)
            if x["id"] == trace:
                return x["answer"]
    raise KeyError(trace)


def label(config, allocator):
    return short(config) + ("" if allocator == "uniform" else " under " + allocator)


def screen_configs(sp):
    """Every policy under uniform, then snapkv and keydiff under the other allocators."""
    seen = list(dict.fromkeys((r["config"], r["allocator"]) for r in sp))
    return [c for c in seen if c[1] == "uniform"] + \
        [c for c in seen if c[1] != "uniform" and short(c[0]) in ("snapkv", "keydiff")]


def cell(rs, col):
    if not rs:
        return ""
    r = rs[0]
    return "%.2f %s" % (float(r[col]), ci(float(r[col + "_ci_lo"]), float(r[col + "_ci_hi"]), False))


def screen_tables(L):
    d = os.path.join(OUT, "screen", "niah-%d" % L, "an")
    if not os.path.exists(os.path.join(d, "spans_summary.csv")):
        return
    sp = [r for r in rows(os.path.join(d, "spans_summary.csv")) if r["span"] == "needle"]
    budgets = sorted({int(r["budget"]) for r in sp})
    chunks = sorted({int(r["chunk"]) for r in sp})
    quarter = min(budgets, key=lambda n: abs(n - L / 4))
    configs = screen_configs(sp)

    def pick(c, n, b, table=sp):
        return [x for x in table if (x["config"], x["allocator"]) == c and int(x["budget"]) == n and
                int(x["chunk"]) == b]
    ntr = int(sp[0]["n_traces"])
    bname = {b: ("one shot (B = %d)" % b if b >= L else "B = %d" % b) for b in chunks}
    print("\n### niah at %d tokens: offline screen over %d prompts\n" % (L, ntr))
    print("The needle's share in the final cache (`retention_final`, mean [95%% interval]) at N = %d, by prefill "
          "chunk:\n" % quarter)
    print("| policy | " + " | ".join(bname[b] for b in chunks) + " |")
    print("| --- |" + " ---: |" * len(chunks))
    for c in configs:
        print("| %s | %s |" % (label(*c), " | ".join(cell(pick(c, quarter, b), "retention_final") for b in chunks)))
    print("\nThe same at B = %d, by budget:\n" % chunks[0])
    print("| policy | " + " | ".join("N = %d (%.0f%%)" % (n, 100 * n / L) for n in budgets) + " |")
    print("| --- |" + " ---: |" * len(budgets))
    for c in configs:
        print("| %s | %s |" % (label(*c), " | ".join(cell(pick(c, n, chunks[0]), "retention_final")
                                                   for n in budgets)))
    sm = [r for r in rows(os.path.join(d, "summary.csv")) if r["phase"] == "all"]
    print("\nWhole-run measures at N = %d, B = %d (sim's `summary.csv`, phase all): attention recall, output "
          "error, log-det volume of the kept keys:\n" % (quarter, chunks[0]))
    print("| policy | attn_recall_mean | out_rel_err_mean | final_logdet_mean |")
    print("| --- | ---: | ---: | ---: |")
    for c in configs:
        rs = pick(c, quarter, chunks[0], sm)
        print("| %s | %s | %s | %s |" % (label(*c), cell(rs, "attn_recall_mean"), cell(rs, "out_rel_err_mean"),
                                         cell(rs, "final_logdet_mean")))


def rho_table(L):
    d = os.path.join(OUT, "screen", "niah-%d" % L, "an")
    if not os.path.exists(os.path.join(d, "study_spearman.csv")):
        return
    print("\nniah at %d tokens:\n" % L)
    rho = rows(os.path.join(d, "study_spearman.csv"))
    layers = sorted({int(r["layer"]) for r in rho})
    per = {l: [r for r in rho if int(r["layer"]) == l] for l in layers}
    pw = [sum(float(r["rho_pairwise"]) for r in per[l]) / len(per[l]) for l in layers]
    an = [sum(float(r["rho_anchor"]) for r in per[l]) / len(per[l]) for l in layers]
    heads = [float(r["rho_anchor"]) for r in rho]
    print("Spearman ρ between a key's distinctiveness and the attention it receives (analyze's "
          "`study_spearman.csv`: mean over %s prompts, then over each layer's query heads):\n" % rho[0]["n_traces"])
    print("| distinctiveness | mean over layers | lowest layer | highest layer | layers with ρ > 0.5 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, v in (("pairwise (mean cosine to the other keys)", pw), ("anchor (cosine to the mean key)", an)):
        print("| %s | %.3f | %.3f (layer %d) | %.3f (layer %d) | %d of %d |" % (
            name, sum(v) / len(v), min(v), layers[v.index(min(v))], max(v), layers[v.index(max(v))],
            sum(x > 0.5 for x in v), len(v)))
    print("\nAnchor ρ per layer: " + ", ".join("%d: %.2f" % (l, x) for l, x in zip(layers, an)) +
          ". Over the %d (layer, query head) pairs: median %.2f, %d negative." % (
              len(heads), sorted(heads)[len(heads) // 2], sum(x < 0 for x in heads)))


def inmodel_table(L=1024):
    d = os.path.join(OUT, "inmodel", "niah-%d" % L)
    if not os.path.exists(os.path.join(d, "answer.csv")):
        return
    a = rows(os.path.join(d, "answer.csv"))
    configs = list(dict.fromkeys(r["config"] for r in a))
    chunks = sorted({int(r["chunk"]) for r in a})
    n = len({r["trace"] for r in a})
    print("\nIn-model exact match under eviction, niah at %d tokens, N = %s (a quarter), %d prompts; Δ is paired "
          "against the full cache of the same prompts, with its 95%% bootstrap interval:\n" % (L, a[0]["budget"], n))
    head = []
    for b in chunks:
        head += ["B = %d: answered" % b, "Δ vs full (points)"]
    print("| policy | " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * len(head))
    for c in configs:
        cells = []
        for b in chunks:
            r = [x for x in a if x["config"] == c and int(x["chunk"]) == b]
            ev = [float(x["exact_match_evict"]) for x in r]
            dl = [float(x["exact_match_evict"]) - float(x["exact_match_full"]) for x in r]
            lo, hi = bootstrap(dl)
            cells += ["%d of %d" % (sum(ev), len(ev)), "%+.0f %s" % (100 * sum(dl) / len(dl), ci(lo, hi))]
        print("| %s | %s |" % (short(c), " | ".join(cells)))
    sp_path = os.path.join(OUT, "screen", "niah-%d" % L, "an", "spans_summary.csv")
    if os.path.exists(sp_path):
        sp = [r for r in rows(sp_path) if r["span"] == "needle"]
        print("\nOffline predicts in-model (Spearman ρ over the policies, within each chunk, at N = %s): sim's "
              "needle retention vs in-model exact match:\n" % a[0]["budget"])
        for b in chunks:
            off, inm = [], []
            for c in configs:
                s = [x for x in sp if x["config"] == c and x["allocator"] == "uniform" and int(x["chunk"]) == b and
                     x["budget"] == a[0]["budget"]]
                r = [float(x["exact_match_evict"]) for x in a if x["config"] == c and int(x["chunk"]) == b]
                if s and r:
                    off.append(float(s[0]["retention_final"]))
                    inm.append(sum(r) / len(r))
            print("- B = %d: ρ = %.2f over %d policies" % (b, spearman(off, inm), len(off)))


def budgets_table(L=1024):
    """In-model exact match across budgets at B = 128: the budgets piece (10%, 50%; snapkv under adakv at
    10, 25, 50%) beside the inmodel piece's quarter, each paired against the full cache."""
    a = []
    for f in ("budgets/niah-%d-uniform" % L, "budgets/niah-%d-adakv" % L, "inmodel/niah-%d" % L):
        path = os.path.join(OUT, f, "answer.csv")
        if os.path.exists(path):
            a += [r for r in rows(path) if int(r["chunk"]) == 128]
    if not any(r["budget"] != str(L // 4) for r in a):
        return
    runs = list(dict.fromkeys((r["config"], r["allocator"]) for r in a))
    budgets = sorted({int(r["budget"]) for r in a})
    n = len({r["trace"] for r in a})
    print("\nIn-model exact match by budget, niah at %d tokens, prefill chunk B = 128, %d prompts; Δ is paired "
          "against the full cache of the same prompts, with its 95%% bootstrap interval:\n" % (L, n))
    head = []
    for b in budgets:
        head += ["N = %d (%d%%): answered" % (b, round(100 * b / L)), "Δ vs full (points)"]
    print("| policy | " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * len(head))
    for c, al in runs:
        cells = []
        for b in budgets:
            r = [x for x in a if (x["config"], x["allocator"]) == (c, al) and int(x["budget"]) == b]
            if not r:
                cells += ["", ""]
                continue
            ev = [float(x["exact_match_evict"]) for x in r]
            dl = [float(x["exact_match_evict"]) - float(x["exact_match_full"]) for x in r]
            lo, hi = bootstrap(dl)
            cells += ["%d of %d" % (sum(ev), len(ev)), "%+.0f %s" % (100 * sum(dl) / len(dl), ci(lo, hi))]
        print("| %s | %s |" % (label(c, al), " | ".join(cells)))
    sp_path = os.path.join(OUT, "screen", "niah-%d" % L, "an", "spans_summary.csv")
    if not os.path.exists(sp_path):
        return
    sp = [r for r in rows(sp_path) if r["span"] == "needle" and int(r["chunk"]) == 128]
    print("\nOffline predicts in-model, per budget (Spearman ρ over the configurations at B = 128): sim's needle "
          "retention vs in-model exact match:\n")
    for b in budgets:
        off, inm = [], []
        for c, al in runs:
            o = [float(x["retention_final"]) for x in sp
                 if (x["config"], x["allocator"]) == (c, al) and int(x["budget"]) == b]
            r = [float(x["exact_match_evict"]) for x in a if (x["config"], x["allocator"]) == (c, al) and
                 int(x["budget"]) == b]
            if o and r:
                off.append(o[0])
                inm.append(sum(r) / len(r))
        print("- N = %d: ρ = %.2f over %d configurations" % (b, spearman(off, inm), len(off)))


def peers_table(L=1024):
    """The headline cell: kvpress's pipeline and kvtrace's --evict-until on the same prompts (one-shot context
    compression, the question kept), and kvtrace under chunked prefill when run, each paired against the full
    cache of the same side."""
    d = os.path.join(OUT, "peers", "niah-%d" % L)
    if not os.path.exists(os.path.join(d, "peer_kvpress.csv")):
        return
    a = rows(os.path.join(d, "peer_kvpress.csv"))
    full = {r["id"]: r for r in a if r["press"] == "full"}
    sides = [("kvpress_correct", "kvpress_correct", "kvpress pipeline"),
             ("kvtrace_correct", "kvtrace_correct", "kvtrace, context once")]
    if "kvtrace_chunked_correct" in a[0]:
        sides.append(("kvtrace_chunked_correct", "kvtrace_correct", "kvtrace, chunked B = %s" % a[0]["chunk"]))
    print("\nniah at %d tokens, %d prompts; N = kvpress's int(Tc (1 - ratio)) of the Tc context tokens; exact match "
          "(answered), and Δ paired against the full cache of the same prompts and side, with its 95%% bootstrap "
          "interval:\n" % (L, len(full)))
    print("| press (kvtrace policy) | ratio | " + " | ".join("%s | Δ (points)" % t for _, _, t in sides) +
          " | mean Jaccard (least) | same answer |")
    print("| --- |" + " ---: |" * (3 + 2 * len(sides)))
    for press, ratio in dict.fromkeys((r["press"], r["ratio"]) for r in a):
        g = [r for r in a if r["press"] == press and r["ratio"] == ratio]
        cells = []
        for col, full_col, _ in sides:
            v = [float(r[col]) for r in g]
            dl = [float(r[col]) - float(full[r["id"]][full_col]) for r in g]
            lo, hi = bootstrap(dl)
            cells += ["%d of %d" % (sum(v), len(v)), "%+.0f %s" % (100 * sum(dl) / len(dl), ci(lo, hi))]
        jm = sum(float(r["jaccard_mean"]) for r in g) / len(g)
        jl = min(float(r["jaccard_min"]) for r in g)
        same = sum(int(r["same_answer"]) for r in g)
        print("| %s (%s) | %g | %s | %.3f (%.3f) | %d of %d |" % (press, g[0]["policy"], float(ratio),
                                                                " | ".join(cells), jm, jl, same, len(g)))
    hf, kv = sum(float(r["kvpress_s"]) for r in a), sum(float(r["kvtrace_s"]) for r in a)
    print("\nWall time of the one-shot runs (%d each, model loading excluded for kvpress, included for kvtrace's "
          "process per run): kvpress's pipeline %.0f s, kvtrace's capture %.0f s: kvtrace at %.2fx kvpress's speed."
          % (len(a), hf, kv, hf / kv))


def peers_figure(L=1024):
    """DIR/figures/peers_niah-L.png: exact match per press with 95% bootstrap intervals, one bar per side
    (kvpress's pipeline, kvtrace with the context compressed once, kvtrace under chunked prefill), by gnuplot."""
    d = os.path.join(OUT, "peers", "niah-%d" % L)
    if not os.path.exists(os.path.join(d, "peer_kvpress.csv")):
        return
    a = rows(os.path.join(d, "peer_kvpress.csv"))
    cols = ["kvpress_correct", "kvtrace_correct"] + (["kvtrace_chunked_correct"] if "kvtrace_chunked_correct" in a[0]
                                                     else [])
    figs = os.path.join(OUT, "figures")
    os.makedirs(figs, exist_ok=True)
    dat, png = os.path.join(figs, "peers_niah-%d.dat" % L), os.path.join(figs, "peers_niah-%d.png" % L)
    with open(dat, "w") as f:
        for press, ratio in dict.fromkeys((r["press"], r["ratio"]) for r in a):
            g = [r for r in a if r["press"] == press and r["ratio"] == ratio]
            label = press if press == "full" else "%s %g" % (press, float(ratio))
            vals = []
            for c in cols:
                v = [float(r[c]) for r in g]
                lo, hi = bootstrap(v)
                vals += [sum(v) / len(v), lo, hi]
            f.write('"%s" %s\n' % (label.replace("_", " "), " ".join("%.4f" % x for x in vals)))
    titles = ["kvpress pipeline (context once)", "kvtrace, context once (--evict-until)",
              "kvtrace, chunked prefill B = %s" % a[0].get("chunk", "")][:len(cols)]
    plots = ", ".join("'%s' using %d:%d:%d%s title '%s'" % (dat if i == 0 else "", 2 + 3 * i, 3 + 3 * i, 4 + 3 * i,
                                                           ":xtic(1)" if i == 0 else "", t)
                      for i, t in enumerate(titles))
    script = "\n".join([
        "set terminal pngcairo size 900,420 noenhanced font 'Sans,10' background rgb 'white'",
        "set output '%s'" % png,
        "set style data histograms", "set style histogram errorbars gap 2 lw 1", "set style fill solid 0.8 border -1",
        "set yrange [0:1.05]", "set ylabel 'exact match (share of %d prompts), 95%% interval'" % len(
            {r["id"] for r in a}),
        "set key outside top center horizontal", "set xtics rotate by -25", "set rmargin 12", "set bmargin 6",
        "set grid ytics",
        "set title 'niah at %d tokens, SmolLM2-135M-Instruct: N = int(Tc (1 - ratio))'" % L,
        "plot " + plots, ""])
    r = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("findings_tables: gnuplot failed: " + r.stderr.strip())
    print("\n%s" % png)


def main():
    """Every section, or the one named second: full, screen, rho, inmodel, budgets, peers, figure."""
    only = sys.argv[2] if len(sys.argv) > 2 else None
    if only in (None, "full"):
        full_table()
    for L in (1024, 2048):
        if only in (None, "screen"):
            screen_tables(L)
    for L in (1024, 2048):
        if only in (None, "rho"):
            rho_table(L)
    for L in (1024, 2048):
        if only in (None, "inmodel"):
            inmodel_table(L)
    if only in (None, "budgets"):
        budgets_table()
    for L in (1024, 2048):
        if only in (None, "peers"):
            peers_table(L)
        if only in (None, "figure"):
            peers_figure(L)
    for p in ("full", "prose", "screen", "inmodel", "budgets", "peers"):
        f = os.path.join(OUT, p, "seconds")
        if only is None and os.path.exists(f):
            print("\n%s: %s s wall" % (p, open(f).read().strip()))


if __name__ == "__main__":
    main()
