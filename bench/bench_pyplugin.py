"""make bench (Python policies, docs/python-policies.md): what a policy written in Python costs against the same policy in C,
in the same `kvtrace sim` run (these machines are shared, so compare the rows of one run). A synthetic
llama-3.2-1b trace (T = 1024, all 16 layers, D = 64), N = 128, B = 64, one thread. From timing.csv: each
configuration's scoring ns per candidate and, times its candidates over its calls, per call; the overhead is
the Python policy's figure minus the C one's. Pairs: knorm and tova restated (tests/plugins/), the keydiff
variant at sinks=0 against keydiff (examples/python/), and an empty Python policy (`np.zeros(view.n)`: the
fixed cost of a call, the view and the scores' check) against the C `streaming` (a policy that does almost
nothing). Best of 3 runs. Prints `bench-pyplugin: skipped: REASON` and exits 0 when this kvtrace was built
without Python. `/usr/bin/python3 bench/bench_pyplugin.py [BUILD_DIR]` alone."""
import csv
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, BUILD, "kvtrace")
PLUGINS = [os.path.join(ROOT, "tests", "plugins", "knorm_plugin.py"), os.path.join(ROOT, "tests", "plugins", "tova_plugin.py"),
           os.path.join(ROOT, "examples", "python", "keydiff_variant.py")]
EMPTY = "import numpy as np\nKVTRACE_POLICIES = [dict(name='pyempty', score=lambda view, params, state: np.zeros(view.n))]\n"
# (what, Python configuration, C configuration), canonical as timing.csv's config column
PAIRS = [("knorm", "pyknorm", "knorm"),
         ("tova", "pytova:scope=group", "tova:scope=group"),
         ("keydiff", "keydiff_variant:anchor=mean:decay=0.9:sinks=0", "keydiff:anchor=norm:metric=cos:window=0"),
         ("empty call", "pyempty", "streaming:sinks=4")]
T, BUDGET, CHUNK, RUNS = 1024, 128, 64, 3


def timings(trace, out, plugins):
    pols = ",".join(p for _, a, b in PAIRS for p in (b, a))
    r = subprocess.run([KV, "sim", trace, *[x for p in plugins for x in ("--plugin", p)], "--policies", pols,
                        "--budgets", str(BUDGET), "--chunk", str(CHUNK), "--threads", "1", "--quiet", "--force", "-o", out],
                       capture_output=True, text=True)
    if r.returncode:
        return r.stderr.strip()
    with open(os.path.join(out, "timing.csv")) as f:
        return {r["config"]: (float(r["score_ns_per_candidate"]), int(r["candidates"]) / max(int(r["calls"]), 1))
                for r in csv.DictReader(f)}


def main():
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-py-") as tmp:
        empty = os.path.join(tmp, "empty.py")
        open(empty, "w").write(EMPTY)
        trace = os.path.join(tmp, "t.h5")
        subprocess.run([KV, "synth", "--like", "llama-3.2-1b", "--tokens", str(T), "--quiet", "-o", trace],
                       check=True, capture_output=True)
        best = {}
        for _ in range(RUNS):
            got = timings(trace, os.path.join(tmp, "res"), PLUGINS + [empty])
            if isinstance(got, str):
                if "without Python" in got:
                    print("bench-pyplugin: skipped: " + got)
                    return 0
                print("bench-pyplugin: sim failed: " + got)
                return 1
            for k, (ns, per_call) in got.items():
                best[k] = (min(best.get(k, (ns,))[0], ns), per_call)
    print("Python policies: llama-3.2-1b T=%d (all 16 layers, D=64), N=%d, B=%d, 1 thread; scoring, best of %d"
          % (T, BUDGET, CHUNK, RUNS))
    print("  %-11s %10s %10s %7s %11s %11s %12s" % ("policy", "C ns/cand", "py ns/cand", "ratio", "C us/call",
                                                   "py us/call", "overhead/call"))
    for what, py, c in PAIRS:
        (cn, cpc), (pn, ppc) = best[c], best[py]
        print("  %-11s %10.2f %10.2f %6.1fx %11.2f %11.2f %10.2f us" % (what, cn, pn, pn / cn if cn > 0 else float("inf"),
                                                                   cn * cpc / 1e3, pn * ppc / 1e3, (pn * ppc - cn * cpc) / 1e3))
    print("  (%.0f candidates per call on average)" % best[PAIRS[0][2]][1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
