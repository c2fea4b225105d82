"""Hostile inputs of classes 5 and 6 (docs/reliability.md#the-failure-classes; tests/lib/hostile.py):

  strict-lists   list options (--policies, --budgets, --record, --detail,
                 --pca-policies) refused up front, the same way in every verb:
                 loose spellings (empty items, signs, spaces, hex, exponents,
                 empty parameters) and duplicates after canonicalisation, exit 2
                 with one line naming both spellings, before any input is read
                 (the input given is a file that does not exist: a usage error
                 must come first) and before any work;
  derived-files  readers of our own outputs: every CSV of a real analysis
                 directory cut at random places (plot: exit 3, no figure
                 directory), garbage and out-of-range rows, extreme finite
                 values, and results directories whose summary.csv/timing.csv
                 or results.h5 (h5py-edited) are wrong (analyze: exit 3, no
                 output directory).

Prints one `# hostile ...` line per class at the end. TAP."""
import os
import random
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402
import hostile  # noqa: E402

KVTRACE = os.environ.get("KVTRACE") or os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
hostile.KVTRACE = KVTRACE
N_CUTS = int(os.environ.get("HOSTILE_CUTS", "240"))


def run(*args):
    return subprocess.run([KVTRACE] + [str(a) for a in args], capture_output=True, text=True)


# ---- class 5: strict lists, refused up front ---------------------------------------------------------------

LOOSE_BUDGETS = ["16,,32", ",16", "16,", "+16", " 16", "16 ", "0x10", "1e3", "16,16", "16,016", "", ",", "1.5",
                 "-16", "0", "16;32"]
LOOSE_POLICIES = [",keydiff", "keydiff,", "keydiff,,tova", "keydiff:", "keydiff::window=0", "keydiff:window=",
                  "keydiff:=0", " keydiff", "keydiff,keydiff", "keydiff,keydiff:window=0",
                  "keydiff:window=0,keydiff:window=0.0", "keydiff:window=0.2:metric=cos,keydiff:metric=cos:window=.2",
                  "", ",", "tova,TOVA"]
LOOSE_RECORD = ["keys,,values", ",keys,values", "keys,values,", "keys,values,keys", "keys, values", "", "keys;values"]
LOOSE_DETAIL = ["0,", ",0", "+0,0", " 0,0", "0,0,0", "0x0,0", "0,1e0", ""]
LOOSE_PCA = [",tova", "tova,", "tova,,keydiff", "tova,tova", ""]


def strict_lists(tmp):
    h = hostile.Tally("strict-lists")
    missing = os.path.join(tmp, "no_such_trace.h5")   # a usage error must be found before the input is
    out = os.path.join(tmp, "out5")
    sim_ok = ["--policies", "tova", "--budgets", "16", "--chunk", "8"]
    for b in LOOSE_BUDGETS:
        h.attempt("sim --budgets %r" % b, ["sim", missing, "--policies", "tova", "--budgets", b, "--chunk", "8",
                                            "-o", out], codes=(2,), outputs=[out])
        h.attempt("fidelity --budgets %r" % b, ["fidelity", "--model", missing, "--budgets", b, "-o", out],
                  codes=(2,), outputs=[out])
    for p in LOOSE_POLICIES:
        h.attempt("sim --policies %r" % p, ["sim", missing, "--policies", p, "--budgets", "16", "--chunk", "8",
                                             "-o", out], codes=(2,), outputs=[out])
        h.attempt("fidelity --policies %r" % p, ["fidelity", "--model", missing, "--policies", p, "-o", out],
                  codes=(2,), outputs=[out])
    for rec in LOOSE_RECORD:
        h.attempt("capture --record %r" % rec, ["capture", "--model", missing, "--record", rec, "-o",
                                                 os.path.join(tmp, "c.h5")], codes=(2,),
                  outputs=[os.path.join(tmp, "c.h5")])
    for det in LOOSE_DETAIL:
        h.attempt("analyze --detail %r" % det, ["analyze", missing, "--detail", det, "-o", out], codes=(2,),
                  outputs=[out])
    for pca in LOOSE_PCA:
        h.attempt("plot --pca-policies %r" % pca, ["plot", os.path.join(tmp, "no_such_dir"), "--pca-policies", pca,
                                                    "-o", out], codes=(2,), outputs=[out])
    for opt, val in (("--chunk", "+8"), ("--chunk", " 8"), ("--chunk", "0x8"), ("--threads", "+1"),
                     ("--decode-chunk", "1e0"), ("--eval-stride", "08 ")):
        args = ["sim", missing] + sim_ok + [opt, val, "-o", out]
        h.attempt("sim %s %r" % (opt, val), args, codes=(2,), outputs=[out])
    # both spellings named; the canonical configuration said
    r = h.attempt("sim names both spellings", ["sim", missing, "--policies", "keydiff,keydiff:window=0",
                                               "--budgets", "16", "--chunk", "8", "-o", out], codes=(2,),
                  outputs=[out], must_say="'keydiff:window=0'")
    check("'keydiff'" in r.stderr, "the duplicate's message names the first spelling too", r.stderr)
    h.attempt("sim --budgets 16,016 names both", ["sim", missing, "--policies", "tova", "--budgets", "16,016",
                                                  "--chunk", "8", "-o", out], codes=(2,), outputs=[out],
              must_say="'016'")
    return h


def refused_before_work(h, tmp, trace):
    """With a real trace, a duplicate is refused before anything is computed or written."""
    out = os.path.join(tmp, "out5b")
    h.attempt("sim duplicate policies on a real trace", ["sim", trace, "--policies", "keydiff,keydiff:window=0",
                                                         "--budgets", "16", "--chunk", "8", "-o", out],
              codes=(2,), outputs=[out])
    h.attempt("sim duplicate budgets on a real trace", ["sim", trace, "--policies", "tova", "--budgets", "16,16",
                                                        "--chunk", "8", "-o", out], codes=(2,), outputs=[out])


# ---- class 6: derived files --------------------------------------------------------------------------------

def make_dirs(tmp):
    trace = os.path.join(tmp, "t.h5")
    res = os.path.join(tmp, "res")
    an = os.path.join(tmp, "an")
    for args in (["synth", "--layers", 2, "--heads", 4, "--kv-heads", 2, "--head-dim", 16, "--tokens", 96, "--seed",
                  3, "--quiet", "-o", trace],
                 ["sim", trace, "--policies", "full,streaming,tova,keydiff", "--budgets", "16,32", "--chunk", 8,
                  "--quiet", "-o", res],
                 ["analyze", trace, "--results", res, "--quiet", "-o", an]):
        r = run(*args)
        if r.returncode != 0:
            raise RuntimeError("%s failed: %s" % (args[0], r.stderr))
    return trace, res, an


def copy_with(src, dst, name, text):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    with open(os.path.join(dst, name), "w") as f:
        f.write(text)


def plot_refuses(h, what, d, must_say=None):
    fig = os.path.join(d, "figures")
    h.attempt(what, ["plot", d, "--quiet"], codes=(3,), outputs=[fig], must_say=must_say)


def truncations(h, tmp, an):
    rng = random.Random(15)
    csvs = sorted(f for f in os.listdir(an) if f.endswith(".csv"))
    d = os.path.join(tmp, "cut")
    for i in range(N_CUTS):
        name = csvs[i % len(csvs)]
        text = open(os.path.join(an, name)).read()
        cut = rng.randrange(1, len(text))   # never the whole file
        copy_with(an, d, name, text[:cut])
        plot_refuses(h, "plot of %s cut at byte %d of %d" % (name, cut, len(text)), d)


def garbage(h, tmp, an):
    d = os.path.join(tmp, "bad")
    def edit(name, fn, what, must_say=None):
        lines = open(os.path.join(an, name)).read().splitlines()
        copy_with(an, d, name, "\n".join(fn(lines)) + "\n")
        plot_refuses(h, "plot: %s %s" % (name, what), d, must_say)

    def set_col(col, val, row=1):
        def fn(lines):
            hdr = lines[0].split(",")
            cells = lines[row].split(",")
            cells[hdr.index(col)] = val
            lines[row] = ",".join(cells)
            return lines
        return fn

    edit("summary.csv", lambda ls: ls[:1] + ["garbage"] * 3, "garbage rows")
    edit("summary.csv", lambda ls: ls[:-1], "a whole row missing")
    edit("timing.csv", lambda ls: ls[:-1], "a whole row missing")
    edit("spearman.csv", lambda ls: ls[:-1], "a whole row missing")
    edit("pca_var.csv", lambda ls: ls[:-1], "a whole row missing")
    edit("logdet.csv", lambda ls: ls[:-1], "a whole row missing")
    edit("results.csv", lambda ls: ls[:-1], "a whole row missing")
    edit("summary.csv", set_col("attn_recall_mean", "1.5"), "recall 1.5")
    edit("summary.csv", set_col("attn_recall_min", "-0.1"), "recall -0.1")
    edit("summary.csv", set_col("out_rel_err_p95", "-1"), "negative error")
    edit("summary.csv", set_col("out_rel_err_mean", "1e308"), "error 1e308")
    edit("summary.csv", set_col("out_rel_err_mean", "4.9e-324"), "error subnormal")
    edit("summary.csv", set_col("final_logdet_mean", "-1e308"), "logdet -1e308")
    edit("summary.csv", set_col("n_queries", "-3"), "negative n_queries")
    edit("results.csv", set_col("attn_recall_mean", "2"), "recall 2")
    edit("results.csv", set_col("q_head", "99"), "q_head out of range")
    edit("results.csv", set_col("out_rel_err_p95", "-0.5"), "negative error")
    edit("timing.csv", set_col("score_ns_per_candidate", "1e308"), "1e308 ns")
    edit("timing.csv", set_col("calls", "-1"), "negative calls")
    edit("logdet.csv", set_col("logdet", "1e308"), "logdet 1e308")
    edit("spearman.csv", set_col("rho_pairwise", "1.5"), "rho 1.5")
    edit("pca.csv", set_col("pc1", "1e308"), "pc1 1e308")
    edit("pca.csv", set_col("pc2", "-1e308"), "pc2 -1e308")
    edit("pca_var.csv", set_col("var_total", "1e308"), "variance 1e308")
    edit("detail.csv", set_col("cos", "2"), "cos 2")
    edit("pca_kept.csv", set_col("position", "96"), "position T")
    edit("meta.csv", lambda ls: [l for l in ls if not l.startswith("T,")], "no T")
    edit("meta.csv", lambda ls: [("T,95" if l.startswith("T,") else l) for l in ls], "T one short of the data")


def bad_results(h, tmp, trace, res):
    def analyze(what, d, must_say=None):
        out = os.path.join(tmp, "an_bad%d" % h.counts["attempts"])   # fresh: an earlier acceptance must not mask this one
        h.attempt("analyze: %s" % what, ["analyze", trace, "--results", d, "--quiet", "-o", out], codes=(3,),
                  outputs=[out], must_say=must_say)

    d = os.path.join(tmp, "res_bad")

    def csv_edit(name, fn, what):
        lines = open(os.path.join(res, name)).read().splitlines()
        copy_with(res, d, name, "\n".join(fn(lines)) + "\n")
        analyze(what, d)

    csv_edit("summary.csv", lambda ls: ls[:1] + ["garbage"], "summary.csv garbage")
    csv_edit("summary.csv", lambda ls: ["nonsense,header"] + ls[1:], "summary.csv header")
    csv_edit("summary.csv", lambda ls: ls[:-1], "summary.csv one row short")
    csv_edit("timing.csv", lambda ls: ls[:-1], "timing.csv one row short")
    csv_edit("timing.csv", lambda ls: ls[:1] + [l.replace(",", ";") for l in ls[1:]], "timing.csv wrong separator")
    text = open(os.path.join(res, "summary.csv")).read()
    copy_with(res, d, "summary.csv", text[:len(text) // 2])
    analyze("summary.csv cut in the middle", d)
    text = open(os.path.join(res, "timing.csv")).read()
    copy_with(res, d, "timing.csv", text[:-1])
    analyze("timing.csv without its final newline", d)
    text = open(os.path.join(res, "results.csv")).read()
    copy_with(res, d, "results.csv", text[:len(text) * 2 // 3])
    analyze("results.csv cut in the middle", d)

    def h5_edit(what, fn):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(res, d)
        with h5py.File(os.path.join(d, "results.h5"), "r+") as f:
            fn(f, f["runs"][sorted(f["runs"].keys())[-1]])
        analyze(what, d)

    def set_attr(name, v):
        return lambda f, g: g.attrs.__setitem__(name, v)

    def replace(name, fnv):
        def fn(f, g):
            a = g[name][()]
            del g[name]
            g[name] = fnv(a)
        return fn

    h5_edit("results.h5 budget -16", set_attr("budget", np.int64(-16)))
    h5_edit("results.h5 budget 0", set_attr("budget", np.int64(0)))
    h5_edit("results.h5 retained wider than its budget", replace(
        "retained", lambda a: np.concatenate([a, a[..., :4]], axis=-1)))
    h5_edit("results.h5 retained out of [0,T)", replace("retained", lambda a: np.where(a == a.max(), 96, a)))
    h5_edit("results.h5 retained negative (not padding)", replace("retained", lambda a: np.where(a == a.max(), -5, a)))
    h5_edit("results.h5 retained not sorted", replace("retained", lambda a: a[..., ::-1].copy()))
    h5_edit("results.h5 retained repeated", replace("retained", lambda a: np.where(a == a.max(), a.min(), a)))
    h5_edit("results.h5 logdet wrong shape", replace("final_logdet", lambda a: a[:1]))
    h5_edit("results.h5 logdet +1e308", replace("final_logdet", lambda a: np.full_like(a, 1e308)))
    h5_edit("results.h5 logdet NaN", replace("final_logdet", lambda a: np.full_like(a, np.nan)))
    h5_edit("results.h5 cache larger than its budget", set_attr("budget", np.int64(8)))

    def repeat_run(f, g):
        names = sorted(f["runs"].keys())
        f.copy(f["runs"][names[0]], f["runs"], name="run9999")
    h5_edit("results.h5 a run twice", repeat_run)


def edit_first_row(an, d, name, col, val):
    """d: a copy of an with column col of name's first row set to val; False when the file has no rows."""
    lines = open(os.path.join(an, name)).read().splitlines()
    if len(lines) < 2:
        return False
    hdr = lines[0].split(",")
    cells = lines[1].split(",")
    cells[hdr.index(col)] = val
    lines[1] = ",".join(cells)
    copy_with(an, d, name, "\n".join(lines) + "\n")
    return True


def extreme_clamped(tmp, an):
    """Finite but extreme numbers that ranges allow must not make gnuplot fail: refused (exit 3) or drawn
    (exit 0) with a note; never exit 1."""
    d = os.path.join(tmp, "ext")
    cases = [("logdet.csv", "logdet", "-1e308"), ("logdet.csv", "logdet", "1e-310"),
             ("summary.csv", "out_rel_err_mean", "1e-310"), ("timing.csv", "score_ns_per_candidate", "1e-310"),
             ("pca.csv", "pc1", "1e-310"), ("summary.csv", "final_logdet_mean", "1e300")]
    for name, col, val in cases:
        edit_first_row(an, d, name, col, val)
        r = run("plot", d, "--quiet")
        figs = os.path.exists(os.path.join(d, "figures"))
        ok = (r.returncode == 3 and not figs and len(r.stderr.strip().splitlines()) == 1) or r.returncode == 0
        check(ok, "plot: %s %s = %s is refused (3) or drawn (0)" % (name, col, val),
              "exit %d: %s" % (r.returncode, r.stderr))
    # fractions are true values however small (attention that underflows outside a head's window): drawn
    for name, col, val in [("head_importance.csv", "score", "1e-150"), ("detail.csv", "attn", "1e-300"),
                           ("summary.csv", "attn_recall_mean", "1e-200")]:
        if not edit_first_row(an, d, name, col, val):
            check(False, "plot: %s has rows to edit" % name)
            continue
        r = run("plot", d, "--quiet")
        check(r.returncode == 0, "plot: %s %s = %s (a tiny fraction) is drawn, not refused" % (name, col, val),
              "exit %d: %s" % (r.returncode, r.stderr))


def main():
    tmp = tempfile.mkdtemp(prefix="kvt_hostile6_")
    try:
        h5 = strict_lists(tmp)
        trace, res, an = make_dirs(tmp)
        refused_before_work(h5, tmp, trace)
        h = hostile.Tally("derived-files")
        truncations(h, tmp, an)
        garbage(h, tmp, an)
        bad_results(h, tmp, trace, res)
        extreme_clamped(tmp, an)
        r = run("plot", an, "--quiet")
        check(r.returncode == 0, "the untouched analysis directory still plots", r.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    hostile.report()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
