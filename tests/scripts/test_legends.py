"""No legend covers data, checked in every gnuplot script kvtrace writes for the report kinds a user
makes: plot of one trace (the fixture with several allocators), plot of a needle study run over spans,
allocators and a chunk sweep (stories260K), and fidelity's figure. In each script a legend is either
unset, `outside` (gnuplot shrinks the plot to make room), or `at screen X` right-aligned in a margin
the panels leave free: the multiplot's right margin R (or the right edge of the panels placed with
set origin/size at the legend's height), with the legend's width fitting between R and X (its longest
title at the terminal's Sans 10, about 7.4 px a character, plus sample and box: measured on
fidelity.png, a label of 58 characters spans 423 px), and `maxrows` so that gnuplot does not wrap it
into a second column over a panel. A long title is centred on the canvas, not on a plot area that a
legend narrows (figure 7's was cut at the left). With Chromium on the machine, a screenshot of every
report is kept in BUILD/screenshots/ for a person to look at. TAP.
    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_legends.py"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402
import plot_fixture  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
KV = os.environ["KVTRACE"]
BUILD = os.environ.get("BUILD", "build")
STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
         "One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high. "
         "Her friend Tom came to play too. They played with the ball all day and laughed a lot.\n")
POSITION = re.compile(r"\b(at|inside|left|right|top|bottom|center|outside|horizontal|vertical)\b")


def run(*args, cwd=None):
    return subprocess.run([KV] + [str(a) for a in args], capture_output=True, text=True, cwd=cwd)


def key_px(titles, font=10.0):
    return 7.4 * font / 10 * max([8] + [len(t) for t in titles]) + 90


def panels(text):
    """(x0, x1, y0, y1) in screen fractions of every plot command drawn with set origin / set size."""
    out, origin, size = [], None, None
    for line in text.splitlines():
        m = re.match(r"set origin ([0-9.e-]+),\s*([0-9.e-]+)", line)
        if m:
            origin = (float(m.group(1)), float(m.group(2)))
        m = re.match(r"set size ([0-9.e-]+),\s*([0-9.e-]+)", line)
        if m:
            size = (float(m.group(1)), float(m.group(2)))
        if re.match(r"s?plot\b", line) and origin and size:
            out.append((origin[0], origin[0] + size[0], origin[1], origin[1] + size[1]))
    return out


def problems(path):
    """What is wrong with the legends and titles of one script, as strings."""
    text = open(path, encoding="utf-8").read()
    size = re.search(r"set terminal \w+ size (\d+),(\d+)", text)
    if not size:
        return []   # not a PNG script (svg of fit: its own check below)
    width = int(size.group(1))
    margins = re.search(r"set multiplot .*?margins ([0-9.]+),([0-9.]+),", text)
    placed = panels(text)
    # the legend entries: the titles of plot commands (not `set title`, not the multiplot's)
    titles = [t.replace("''", "'") for line in text.splitlines() if not line.lstrip().startswith("set ")
              for t in re.findall(r"title '((?:[^']|'')*)'", line)]
    out = []
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("set key") or not POSITION.search(s[len("set key"):]):
            continue   # unset key, or a style line without a position (set key box ... opaque)
        if "outside" in s:
            continue
        m = re.match(r"set key at screen ([0-9.]+), screen ([0-9.]+) top right(.*)$", s)
        if not m:
            out.append("%s: a legend inside a plot area: %s" % (os.path.basename(path), s))
            continue
        y = float(m.group(2))
        beside = [x1 for x0, x1, y0, y1 in placed if y0 <= y <= y1]   # panels at the legend's height
        right = float(margins.group(2)) if margins else (max(beside) if beside else None)
        if right is None:
            out.append("%s: a legend at screen with no panel edge to measure it against: %s"
                       % (os.path.basename(path), s))
            continue
        font = re.search(r"font ',(\d+)'", m.group(3))
        need = key_px(titles, float(font.group(1)) if font else 10.0)
        free = float(m.group(1)) * width - right * width
        if free < need:
            out.append("%s: the legend needs %.0f px, the margin right of the panels has %.0f" %
                       (os.path.basename(path), need, free))
        if "maxrows" not in m.group(3) and margins:
            out.append("%s: a legend at screen without maxrows (gnuplot may wrap it over a panel)" %
                       os.path.basename(path))
    if re.search(r"^set title .*, B\)|^set title sprintf", text, re.M) and "set key outside" in text:
        out.append("%s: a long plot title beside an outside legend (centred on the narrowed plot: cut)" %
                   os.path.basename(path))
    return out


def check_dir(what, d):
    scripts = sorted(glob.glob(os.path.join(d, "**", "*.gp"), recursive=True))
    bad = [p for s in scripts for p in problems(s)]
    check(scripts and not bad, "%s: no legend over data in its %d gnuplot scripts" % (what, len(scripts)), bad)


def screenshot(what, report, out_dir):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        skip("%s: a screenshot of report.html for review" % what, "no chromium on this machine")
        return
    png = os.path.join(out_dir, re.sub(r"[^a-z0-9]+", "_", what.lower()).strip("_") + ".png")
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1400,4000", "--screenshot=" + png, "file://" + report],
                       capture_output=True, text=True, timeout=120)
    check(os.path.isfile(png) and os.path.getsize(png) > 10000,
          "%s: a screenshot of report.html kept in %s for review" % (what, os.path.relpath(png, ROOT)), r.stderr[-500:])


def needle_study(tmp, model, shots):
    hay, prompts, study, res, fid, an, figs = (os.path.join(tmp, n) for n in ("hay.txt", "p.jsonl", "st", "res",
                                                                             "st_fid", "st_an", "st_figs"))
    with open(hay, "w") as f:
        f.write(STORY)
    steps = [("prompts", "needle", "--haystack", hay, "--needle", "The secret code is 4721.", "--question",
              "What is the secret code?", "--answer", "4721", "--depths", "0,1", "--lengths", "150", "--model", model,
              "-o", prompts),
             ("capture", "--prompts", prompts, "--model", model, "--chunk", 32, "--quiet", "-o", study),
             ("sim", study, "--policies", "keydiff,snapkv,tova,streaming,h2o", "--allocators", "uniform,pyramid,adakv",
              "--budgets", "32,64", "--chunks", "16,32", "--quiet", "-o", res),
             ("fidelity", "--prompts", prompts, "--model", model, "--policies", "keydiff,streaming", "--budgets",
              "32", "--chunk", 32, "--quiet", "-o", fid),
             ("analyze", study, "--results", res, "--baseline", "streaming", "--fidelity", fid, "--quiet", "-o", an),
             ("plot", an, "--quiet", "-o", figs)]
    for s in steps:
        r = run(*s)
        if not check(r.returncode == 0, "needle study: %s" % s[0], r.stderr):
            return
    check_dir("a needle study's report (spans x allocators x chunks, paired against a baseline, in-model answers)",
              figs)
    screenshot("needle study report", os.path.join(figs, "report.html"), shots)


def fidelity(tmp, model, shots):
    out = os.path.join(tmp, "fid")
    r = run("fidelity", "--model", model, "--prompt", "Once upon a time", "--generate", 60, "--policies",
            "streaming,keydiff,tova,h2o,snapkv,keydiff:window=0.25", "--allocators", "uniform,adakv",
            "--budgets", "16,32", "--chunk", 8, "--quiet", "-o", out)
    if check(r.returncode == 0, "fidelity", r.stderr):
        check_dir("fidelity's figure", out)
        screenshot("fidelity report", os.path.join(out, "report.html"), shots)


def main():
    shots = os.path.join(ROOT, BUILD, "screenshots")
    os.makedirs(shots, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        an, figs = os.path.join(tmp, "an"), os.path.join(tmp, "figs")
        plot_fixture.make_fixture(an, allocs=("uniform", "pyramid:beta=20:window=32", "adakv:alpha=0.2"))
        r = run("plot", an, "--quiet", "-o", figs)
        if check(r.returncode == 0, "plot of the fixture (three allocators)", r.stderr):
            check_dir("one trace's report", figs)
            screenshot("one trace report", os.path.join(figs, "report.html"), shots)
        model = model_file()
        if model is None:
            skip("a needle study's and fidelity's figures", NO_MODEL)
        else:
            needle_study(tmp, model, shots)
            fidelity(tmp, model, shots)
        # the checker itself: a legend inside, and one too wide for its margin, are found
        bad = os.path.join(tmp, "bad.gp")
        with open(bad, "w") as f:
            f.write("set terminal pngcairo size 1200,500\nset multiplot layout 1,2 margins 0.07,0.9,0.1,0.9\n"
                    "set key bottom right\nset key at screen 0.99, screen 0.9 top right maxrows 3\n"
                    "plot x title 'a rather long legend title of forty characters'\n")
        found = problems(bad)
        check(len(found) == 2 and "inside" in found[0] and "needs" in found[1], "the checker finds a legend inside "
              "a panel and one wider than its margin", found)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
