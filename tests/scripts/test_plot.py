"""kvtrace plot (docs/plot.md) on a fixture analysis directory (tests/lib/plot_fixture.py):
every figure rendered as a valid, non-trivial PNG (signature, IHDR size, IDAT
decoded with zlib and unfiltered: more than one colour), svg and pdf, the
scripts re-runnable from the figure directory, report.html (links only to
files that exist, every figure and caption, escaped input strings, offline),
skipped figures without results, and bad inputs: exit 3/2/1 with one error
line naming the file and no output left. TAP."""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, finish  # noqa: E402
from plot_fixture import make_fixture  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
FIGS = ["fig1_detail", "fig2_spearman", "fig3_pca", "fig4_logdet", "fig5_error", "fig6_timing", "fig7_layers",
        "fig8_alloc"]
SIZES = {"fig1_detail": (1200, 560), "fig8_alloc": (1200, 900)}


def run(args, env=None, cwd=None):
    p = subprocess.run([KVTRACE] + args, capture_output=True, text=True, env=env, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def png_pixels(path):
    """(width, height, set of distinct pixels) of an 8-bit non-interlaced PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("no PNG signature")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]:
            raise ValueError("bad CRC in chunk %r" % kind)
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or interlace:
        raise ValueError("unsupported depth %d / interlace %d" % (depth, interlace))
    bpp = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = w * bpp
    if len(raw) != h * (stride + 1):
        raise ValueError("IDAT holds %d bytes, expected %d" % (len(raw), h * (stride + 1)))
    prev = bytearray(stride)
    colours = set()
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            line[i] = (line[i] + (0, a, b, (a + b) // 2, paeth(a, b, c))[ft]) & 0xFF
        if y % 7 == 0:  # a sample of rows is plenty to see colours
            colours.update(bytes(line[i:i + bpp]) for i in range(0, stride, bpp))
        prev = line
    return w, h, colours


def leftovers(parent):
    return [n for n in os.listdir(parent) if ".tmp." in n]


def check_pngs(figdir):
    for name in FIGS:
        path = os.path.join(figdir, name + ".png")
        try:
            w, h, colours = png_pixels(path)
            want = SIZES.get(name, (1200, 500))
            if name == "fig5_error":   # at least 1200 wide: wider when its legend's labels need the room
                want = (max(w, 1200), 500)
            check((w, h) == want and len(colours) > 1, "%s.png: valid PNG, %dx%d, %d colours sampled"
                  % (name, w, h, len(colours)), "want %s and more than one colour" % (want,))
        except Exception as e:  # noqa: BLE001
            check(False, "%s.png is a valid PNG" % name, repr(e))
        for ext in ("gp", "dat"):
            check(os.path.getsize(os.path.join(figdir, "%s.%s" % (name, ext))) > 0, "%s.%s written" % (name, ext))


def check_report(figdir, drawn):
    html = open(os.path.join(figdir, "report.html"), encoding="utf-8").read()
    refs = re.findall(r'(?:href|src|data)="([^"#]+)"', html)
    missing = [r for r in refs if not os.path.isfile(os.path.join(figdir, r))]
    check(refs and not missing, "report.html links %d files, all exist" % len(refs), "missing: %s" % missing)
    check(not re.search(r"https?://|<script|@import|<link", html), "report.html is offline (no remote resources, no scripts)")
    for i, name in enumerate(FIGS):
        if name in drawn:
            ok = ('src="%s.png"' % name) in html and ("Figure %d." % (i + 1)) in html
            check(ok, "report.html shows %s with its heading" % name)
    check(html.count("How to read it") >= len(drawn), "report.html has a caption for every drawn figure")
    check("higher ρ means distinct keys receive more attention" in html or "fig2_spearman" not in drawn,
          "figure 2's caption says how to read rho")
    check("&lt;L2 &amp; friends&gt;" in html and "<L2 &" not in html, "strings from meta.csv are HTML-escaped")
    cmds = re.search(r'<pre class="commands">(.*?)</pre>', html, re.S)
    lines = [l.split()[:2] for l in cmds.group(1).splitlines()] if cmds else []
    check([v for _, v in lines] in (["synth", "sim", "analyze", "plot"], ["synth", "analyze", "plot"]) and
          "kvtrace synth --like stories260k" in html and "kvtrace analyze fixture.h5" in html,
          "report.html shows the commands in order: synth, sim (with results), analyze, plot", lines)
    return html


def check_figure_choices(an, fig):
    """Figure 7's data are results.csv's per-layer means (numpy); figure 5's error panel is on a log axis
    without the zeros; figure 4's legend lists the full cache once (sim's full runs not drawn again)."""
    import csv
    import numpy as np
    with open(os.path.join(an, "results.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] == "all"]
    want = {}
    for r in rows:
        want.setdefault((r["policy"], r["params"], int(r["budget"]), int(r["layer"])), []).append(
            float(r["out_rel_err_mean"]))
    got, block, name = {}, -1, None
    for line in open(os.path.join(fig, "fig7_layers.dat")):
        if line.startswith("# index"):
            parts = line.split()
            block, name = block + 1, (parts[3], parts[4] if len(parts) > 4 else "")
        elif line.strip() and not line.startswith("#"):
            b, l, e = line.split()
            got[name + (int(b), int(l))] = float(e)
    bad = [k for k, v in want.items() if k not in got or abs(got[k] - np.mean(v)) > 1e-7 * (1 + abs(np.mean(v)))]
    check(len(got) == len(want) and not bad, "fig7_layers.dat: out_rel_err_mean averaged over each layer's query heads "
          "(numpy), every configuration, budget and layer", bad[:5])
    gp7 = open(os.path.join(fig, "fig7_layers.gp")).read()
    check("B = 16 " in gp7 and "$1 == B" in gp7 and "set logscale y" in gp7 and "set xtics 1" in gp7,
          "fig7_layers.gp draws the smallest budget below T, chosen by its variable B, on a log axis")
    gp5 = open(os.path.join(fig, "fig5_error.gp")).read()
    check("set logscale y 10" in gp5 and "($2 > 0 ? $2 : NaN)" in gp5, "fig5_error.gp: the error panel on a log y "
          "axis, exact zeros (full) left out")
    gp4 = open(os.path.join(fig, "fig4_logdet.gp")).read()
    titles = re.findall(r"title '([^']*)'", gp4)
    check(titles.count("full cache") == 1 and "full" not in titles and "index" in gp4,
          "fig4_logdet.gp: the legend lists the full cache once", titles)


def expect_error(args, code, names, what, parent, figdir):
    rc, out, err = run(args)
    lines = err.strip().splitlines()
    ok = rc == code and len(lines) == 1 and lines[0].startswith("kvtrace: error:") and all(n in err for n in names)
    check(ok, "%s: exit %d, one error line naming %s" % (what, code, ", ".join(names)), "exit %d, stderr %r" % (rc, err))
    check(not os.path.exists(figdir) and not leftovers(parent), "%s: no output left" % what,
          os.listdir(parent))


def bad_inputs(tmp):
    cases = [  # file, transformation, names expected in the message
        ("spearman.csv", lambda s: s.replace("rho_anchor", "rho_anchr", 1), ["spearman.csv:1", "header"]),
        ("logdet.csv", lambda s: s.replace("\n", "\nknorm,knorm,,32,uniform,,0,0,abc\n", 1), ["logdet.csv:2", "logdet", "abc"]),
        ("logdet.csv", lambda s: s.replace("\n", "\nkeydiff,keydiff,window=0,32,uniform,,0,0,-3\n", 1),
         ["logdet.csv:2", "config 'keydiff' is not policy 'keydiff' with params 'window=0'"]),
        ("summary.csv", lambda s: s.replace("\n", "\nfull,full,,32,16,1\n", 1), ["summary.csv:2", "6 fields"]),
        ("spearman.csv", lambda s: s.replace("\n0,1,0,", "\n0,1,1,", 1), ["spearman.csv:3", "kv_head 1", "q_head 1"]),
        ("pca_kept.csv", lambda s: s.replace("\n", "\nstreaming:sinks=4,streaming,sinks=4,16,uniform,,1,0,96\n", 1),
         ["pca_kept.csv:2", "position", "96"]),
        ("meta.csv", lambda s: s.replace("\ndetail_kv_head,1\n", "\ndetail_kv_head,0\n"),
         ["meta.csv", "detail_kv_head 0 is not the kv head of detail_q_head 2"]),
        ("detail.csv", lambda s: s.rsplit("\n", 2)[0] + "\n", ["detail.csv", "rows"]),
        ("pca.csv", lambda s: s.replace("\n0,0,3,", "\n0,0,2,", 1), ["pca.csv:5", "twice"]),
        ("meta.csv", lambda s: s.replace("\nL,2\n", "\nL,two\n"), ["meta.csv:5", "'two'"]),
        ("meta.csv", None, ["meta.csv", "missing"]),
    ]
    for i, (name, change, names) in enumerate(cases):
        d = os.path.join(tmp, "bad%d" % i)
        make_fixture(d)
        path = os.path.join(d, name)
        if change is None:
            os.remove(path)
        else:
            s = open(path).read()
            open(path, "w").write(change(s))
        fig = os.path.join(d, "figures")
        expect_error([ "plot", d, "--quiet"], 3, names, "%s %s" % (name, "missing" if change is None else "malformed"),
                     d, fig)


def pca_panels(tmp, good):
    """--pca-policies: the panels by policy name or config label; an unknown entry is a usage error."""
    fig = os.path.join(tmp, "pca_pick")
    rc, out, err = run(["plot", good, "-o", fig, "--quiet", "--pca-policies",
                        "keydiff:anchor=norm:metric=cos:window=0.2,tova,keydiff"])
    dat = open(os.path.join(fig, "fig3_pca.dat")).read() if rc == 0 else ""
    check(rc == 0 and "kept_1 = keydiff:anchor=norm:metric=cos:window=0.2 budget=16;" in dat
          and "kept_2 = tova:scope=layer budget=16;" in dat and "kept_3 = keydiff:anchor=norm:metric=cos:window=0 "
          "budget=16;" in dat and "kept_4" not in dat, "--pca-policies: one panel per entry, in order, a policy name "
          "taking its first configuration", "exit %d %r %r" % (rc, err, dat[:300]))
    w, h, _ = png_pixels(os.path.join(fig, "fig3_pca.png")) if rc == 0 else (0, 0, 0)
    check((w, h) == (1200, 500), "three panels keep the default size", str((w, h)))
    fig4 = os.path.join(tmp, "pca_four")
    rc, out, err = run(["plot", good, "-o", fig4, "--quiet", "--pca-policies", "streaming,tova,keydiff,"
                        "keydiff:anchor=norm:metric=cos:window=0.2"])
    w, h, _ = png_pixels(os.path.join(fig4, "fig3_pca.png")) if rc == 0 else (0, 0, 0)
    check(rc == 0 and (w, h) == (1600, 500), "four panels: 400 pixels each", "exit %d %r %s" % (rc, err, (w, h)))
    bad = os.path.join(tmp, "pca_bad")
    expect_error(["plot", good, "-o", bad, "--pca-policies", "tova,h2o"], 2, ["--pca-policies", "'h2o'", "pca_kept.csv"],
                 "--pca-policies entry that matches no run", tmp, bad)
    expect_error(["plot", good, "-o", bad, "--pca-policies", "keydiff:window=0.2"], 2, ["'keydiff:window=0.2'"],
                 "--pca-policies partial config spelling", tmp, bad)
    expect_error(["plot", good, "-o", bad, "--pca-policies", "tova,,keydiff"], 2, ["empty entry"],
                 "--pca-policies empty entry", tmp, bad)
    expect_error(["plot", good, "-o", bad, "--pca-policies", ",".join(["tova"] * 9)], 2, ["at most 8"],
                 "--pca-policies with 9 entries", tmp, bad)


def gnuplot_failures(tmp, good):
    fig = os.path.join(tmp, "nognuplot")
    empty = os.path.join(tmp, "emptybin")
    os.makedirs(empty)
    env = dict(os.environ, PATH=empty)
    rc, out, err = run(["plot", good, "-o", fig, "--quiet"], env=env)
    check(rc == 1 and "gnuplot" in err and "not found" in err and len(err.strip().splitlines()) == 1,
          "gnuplot missing from PATH: exit 1, one clear error line", "exit %d, %r" % (rc, err))
    check(not os.path.exists(fig) and not leftovers(tmp), "gnuplot missing: no output left", os.listdir(tmp))
    for label, body, words in (("exits 1", "echo 'line 3: undefined variable: foo' >&2\nexit 1\n", ["undefined variable"]),
                               ("writes nothing", "exit 0\n", ["missing"])):
        fake = os.path.join(tmp, "fakebin")
        os.makedirs(fake, exist_ok=True)
        with open(os.path.join(fake, "gnuplot"), "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(os.path.join(fake, "gnuplot"), 0o755)
        rc, out, err = run(["plot", good, "-o", fig, "--quiet"], env=dict(os.environ, PATH=fake + ":/usr/bin:/bin"))
        check(rc == 1 and all(w in err for w in words) and len(err.strip().splitlines()) == 1,
              "gnuplot %s: exit 1, its message on one line" % label, "exit %d, %r" % (rc, err))
        check(not os.path.exists(fig) and not leftovers(tmp), "gnuplot %s: no output left" % label)


def read_blocks(path, ncols):
    """A data file's blocks: {block comment (after 'index N: '): [rows of floats]}."""
    import numpy as np
    out, name = {}, None
    for line in open(path):
        if line.startswith("# index"):
            name = line.split(": ", 1)[1].strip()
            out[name] = []
        elif line.strip() and not line.startswith("#"):
            out[name].append([float(x) for x in line.split()[:ncols]])
    return {k: np.array(v) for k, v in out.items()}


def check_fig8(an, fig, allocs):
    """Figure 8's data files equal an independent pandas computation from budgets.csv and summary.csv."""
    import numpy as np
    import pandas as pd
    b = pd.read_csv(os.path.join(an, "budgets.csv"), keep_default_na=False, na_values=["nan"])
    s = pd.read_csv(os.path.join(an, "summary.csv"), keep_default_na=False, na_values=["nan"])
    nf = b[b.policy != "full"]
    heat = nf.groupby(["allocator", "budget", "layer", "kv_head"]).head_budget.mean()
    lines = heat.groupby(["allocator", "budget", "layer"]).mean()
    got_heat, got_lines = read_blocks(os.path.join(fig, "fig8_alloc_heat.dat"), 4), read_blocks(
        os.path.join(fig, "fig8_alloc.dat"), 3)
    ok = sorted(got_heat) == sorted(allocs) and sorted(got_lines) == sorted(allocs)
    for a in allocs if ok else []:
        want_h = heat.loc[a].reset_index().to_numpy(float)
        want_l = lines.loc[a].reset_index().to_numpy(float)
        ok = ok and np.allclose(got_heat[a], want_h) and np.allclose(got_lines[a], want_l)
    check(ok, "fig8_alloc.dat / _heat.dat: head_budget per allocator, budget, layer (and kv head), mean over the "
          "non-full configurations (pandas), allocators %s" % ",".join(allocs))
    mem = b.groupby(["config", "allocator", "budget"]).head_budget.sum().rename("memory").reset_index()
    m = mem.merge(s[s.phase == "all"], on=["config", "allocator", "budget"], how="left")
    got = read_blocks(os.path.join(fig, "fig8_alloc_memory.dat"), 3)
    ok = len(got) == len(m.groupby(["config", "allocator"]))
    for (c, a), grp in m.groupby(["config", "allocator"]):
        want = grp.sort_values("memory")[["memory", "out_rel_err_mean", "budget"]].to_numpy(float)
        key = "%s %s" % (c, a)
        ok = ok and key in got and got[key].shape == want.shape and np.allclose(got[key], want, rtol=1e-7)
    check(ok, "fig8_alloc_memory.dat: per (config, allocator) the run's sum of head_budget against summary.csv's "
          "out_rel_err_mean (pandas), sorted by memory")
    gp = open(os.path.join(fig, "fig8_alloc.gp")).read()
    check("B = 16 " in gp and gp.count("with boxxyerror") == len(allocs) and "set logscale y" in gp,
          "fig8_alloc.gp: budget B = 16 (smallest below T), one heat map per allocator, error on a log axis")


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace_plot.")
    try:
        good = os.path.join(tmp, "an")
        make_fixture(good)
        rc, out, err = run(["plot", good])
        fig = os.path.join(good, "figures")
        check(rc == 0 and os.path.isdir(fig), "plot on the fixture: exit 0, DIR/figures written", "exit %d %r" % (rc, err))
        check_pngs(fig)
        check_report(fig, FIGS)
        check_figure_choices(good, fig)
        check_fig8(good, fig, ["uniform"])
        two = os.path.join(tmp, "two")
        make_fixture(two, allocs=("uniform", "pyramid"))
        rc, out, err = run(["plot", two, "--quiet"])
        check(rc == 0 and all(os.path.isfile(os.path.join(two, "figures", n + ".png")) for n in FIGS),
              "plot on a fixture with two allocators: exit 0, every figure drawn", "exit %d %r" % (rc, err))
        if rc == 0:
            check_fig8(two, os.path.join(two, "figures"), ["pyramid", "uniform"])
        check(not leftovers(good), "no temporary directory left beside FIGDIR")
        # the scripts are re-runnable from FIGDIR by relative name
        os.remove(os.path.join(fig, "fig5_error.png"))
        p = subprocess.run(["gnuplot", "fig5_error.gp"], cwd=fig, capture_output=True, text=True)
        check(p.returncode == 0 and os.path.getsize(os.path.join(fig, "fig5_error.png")) > 0,
              "cd FIGDIR && gnuplot fig5_error.gp redraws the figure", p.stderr)
        # an existing FIGDIR needs --force
        before = sorted(os.listdir(fig))
        rc, out, err = run(["plot", good, "--quiet"])
        check(rc == 2 and "--force" in err and len(err.strip().splitlines()) == 1 and sorted(os.listdir(fig)) == before
              and not leftovers(good), "existing FIGDIR without --force: exit 2, left as it was", "exit %d %r" % (rc, err))
        rc, out, err = run(["plot", good, "--force", "--quiet"])
        check(rc == 0 and err == "" and os.path.isfile(os.path.join(fig, "report.html")) and not leftovers(good),
              "--force replaces FIGDIR; --quiet prints nothing", "exit %d %r" % (rc, err))
        for target in (good, tmp):
            rc, out, err = run(["plot", good, "-o", target, "--force", "--quiet"])
            check(rc == 2 and "the output is the input %s" % good in err and os.path.isfile(os.path.join(good, "meta.csv")),
                  "-o %s --force is refused: it would replace the analysis directory" %
                  ("DIR" if target == good else "DIR's parent"), "exit %d %r" % (rc, err))
        for fmt, magic in (("svg", (b"<?xml", b"<svg")), ("pdf", (b"%PDF",))):
            out_dir = os.path.join(tmp, fmt)
            rc, out, err = run(["plot", good, "-o", out_dir, "--format", fmt, "--quiet"])
            heads = [open(os.path.join(out_dir, "%s.%s" % (n, fmt)), "rb").read(5) if rc == 0 else b"" for n in FIGS]
            check(rc == 0 and all(any(h.startswith(m) for m in magic) for h in heads),
                  "--format %s: every figure starts with %s" % (fmt, " or ".join(m.decode() for m in magic)),
                  "exit %d %r %r" % (rc, err, heads))
            if rc == 0:
                html = open(os.path.join(out_dir, "report.html")).read()
                refs = re.findall(r'(?:href|src|data)="([^"#]+)"', html)
                check(all(os.path.isfile(os.path.join(out_dir, r)) for r in refs) and "fig1_detail.%s" % fmt in html,
                      "--format %s: report.html links the %s files" % (fmt, fmt))
        # without sim results: figures 3, 5, 6 are skipped with a note
        nores = os.path.join(tmp, "nores")
        make_fixture(nores, with_results=False)
        rc, out, err = run(["plot", nores, "--quiet"])
        figdir = os.path.join(nores, "figures")
        html = open(os.path.join(figdir, "report.html")).read() if rc == 0 else ""
        skipped = ["fig3_pca", "fig5_error", "fig6_timing", "fig7_layers", "fig8_alloc", "fig9_chunks", "fig10_spans",
                   "fig11_needle", "fig12_needle_recall", "fig13_needle_answer", "fig14_paired"]
        check(rc == 0 and html.count("Not drawn:") == len(skipped) and all(not os.path.exists(os.path.join(figdir, n + ".png"))
                                                                 for n in skipped),
              "without results: exit 0, figures 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14 skipped with a note each",
              "exit %d %r" % (rc, err))
        check(rc == 0 and "summary.csv is missing" in html, "without results: the summary table's absence is explained")
        refs = re.findall(r'(?:href|src|data)="([^"#]+)"', html)
        check(all(os.path.isfile(os.path.join(figdir, r)) for r in refs), "without results: only existing files linked")
        # header-only files and all-NaN correlations skip their figure with a note, not an error
        part = os.path.join(tmp, "partial")
        make_fixture(part)
        for name in ("detail.csv", "logdet.csv"):
            with open(os.path.join(part, name)) as f:
                head = f.readline()
            with open(os.path.join(part, name), "w") as f:
                f.write(head)
        with open(os.path.join(part, "spearman.csv")) as f:
            rows = f.read().splitlines()
        with open(os.path.join(part, "spearman.csv"), "w") as f:
            f.write("\n".join([rows[0]] + [",".join(r.split(",")[:3] + ["nan", "nan"]) for r in rows[1:]]) + "\n")
        rc, out, err = run(["plot", part, "--quiet"])
        figdir = os.path.join(part, "figures")
        html = open(os.path.join(figdir, "report.html")).read() if rc == 0 else ""
        notes = re.findall(r"Not drawn: ([^<]*)", html)
        check(rc == 0 and len(notes) == 9 and any("detail.csv has no rows" in n for n in notes)
              and any(n.startswith("fidelity_join.csv is missing") for n in notes)
              and any(n.startswith("paired.csv is missing") for n in notes)
              and any(n.startswith("no spans") for n in notes)
              and any(n.startswith("spans.csv is missing") for n in notes)
              and any("logdet.csv has no rows" in n for n in notes) and any("NaN" in n for n in notes)
              and any("one chunk size only" in n for n in notes),
              "header-only detail.csv and logdet.csv, all-NaN spearman.csv: figures 1, 2, 4 skipped with notes (13: no "
              "fidelity_join.csv, 14: no paired.csv) "
              "(and 9: one chunk, 10 and 11: no spans)",
              "exit %d %r %r" % (rc, err, notes))
        check(rc == 0 and os.path.isfile(os.path.join(figdir, "fig5_error.png")) and
              not os.path.exists(os.path.join(figdir, "fig1_detail.png")), "the other figures are drawn")
        bad_inputs(tmp)
        pca_panels(tmp, good)
        expect_error(["plot", good, "-o", os.path.join(tmp, "x"), "--format", "gif"], 2, ["--format"],
                     "--format gif", tmp, os.path.join(tmp, "x"))
        expect_error(["plot", os.path.join(tmp, "nonexistent")], 1, ["nonexistent", "cannot open"],
                     "a missing DIR: cannot open (an OS error, exit 1, as for every input)", tmp,
                     os.path.join(tmp, "nonexistent"))
        afile = os.path.join(tmp, "afile")
        open(afile, "w").close()
        expect_error(["plot", afile, "-o", os.path.join(tmp, "y")], 2, ["afile", "is not a directory"],
                     "a file given as DIR: is not a directory, exit 2", tmp, os.path.join(tmp, "y"))
        gnuplot_failures(tmp, good)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
