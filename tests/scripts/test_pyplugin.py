"""Python policies, --plugin FILE.py (docs/python-policies.md), TAP: (1) knorm, tova and h2o restated in Python
(tests/plugins/knorm_plugin.py, tova_plugin.py, h2o_plugin.py: per-stream state from create, observe at every
chunk) keep exactly the built-ins' sets, tova at both scopes, h2o with and without its recent window, on the
demo trace (stories260K captured as `kvtrace demo` does) and on a synthetic trace with D = 40 (the 16-lane
sums and their tail); (2) a probe policy checks its view against the trace read with h5py: keys, values,
positions equal, read-only, not copied, the scalars, attention rows summing to 1; (3) --threads 1 and 4 give
byte-identical results for a stateful policy (keydiff_variant:anchor=ema); with allocators (adakv) and an
--alias of a Python policy, pyknorm's rows equal knorm's; (4) bad files (a syntax error, no
KVTRACE_POLICIES, no score, a built-in's name, a failing import; a wrong length, a wrong dtype, a list, a NaN,
an exception in score or create, a write into the read-only view) are refused with one line naming the file,
exit 2 at load and at a step exit 1, a failed hook of a plug-in (with the policy, the hook, layer, kv head, step
and the exception's last line), or exit 3 for a NaN score (the host's check of the scores), no output; (5) docs/python-policies.md's first command with analyze and plot: the report shows keydiff_variant and keydiff;
the learned-weights example runs; (6) capture --evict pytova runs the model as --evict tova does and fidelity
gives pytova tova's row. Under ASan, tests/asan/python.supp suppresses the interpreter's own allocations."""
import csv
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402
import policy_trace as pt  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, BUILD, "kvtrace")
ENV = dict(os.environ)
if "asan" in BUILD:
    ENV["LSAN_OPTIONS"] = "print_suppressions=0:suppressions=" + os.path.join(ROOT, "tests", "asan", "python.supp")
PLUG = os.path.join(ROOT, "tests", "plugins")
EX = os.path.join(ROOT, "examples", "python")


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True, env=ENV)


def sim(trace, out, *args, budgets="32,64", chunk="32", threads="2"):
    return run("sim", trace, "--budgets", budgets, "--chunk", chunk, "--quiet", "--threads", threads, "-o", out, *args)


def same_sets(trace, tmp, tag, budgets, chunk):
    out = os.path.join(tmp, "eq_" + tag)
    plugins = [x for f in ("knorm", "tova", "h2o") for x in ("--plugin", os.path.join(PLUG, f + "_plugin.py"))]
    r = sim(trace, out, *plugins, "--policies", "pyknorm,knorm,pytova,tova,pytova:scope=group,tova:scope=group,"
            "pyh2o,h2o,pyh2o:recent=0,h2o:recent=0", budgets=budgets, chunk=chunk)
    check(r.returncode == 0, "%s: sim --plugin knorm_plugin.py --plugin tova_plugin.py --plugin h2o_plugin.py" % tag,
          r.stderr)
    if r.returncode:
        return
    for a, b in ((("pyknorm", ""), ("knorm", "")), (("pytova", "scope=layer"), ("tova", "scope=layer")),
                 (("pytova", "scope=group"), ("tova", "scope=group")),
                 (("pyh2o", "recent=0.5"), ("h2o", "normalize=none:recent=0.5")),
                 (("pyh2o", "recent=0"), ("h2o", "normalize=none:recent=0"))):
        Ns = [int(x) for x in budgets.split(",")]
        same = all(pt.kept(out, *a, N) == pt.kept(out, *b, N) for N in Ns)
        check(same, "%s: %s keeps exactly %s's sets (budgets %s)" % (tag, ":".join(filter(None, a)), ":".join(filter(None, b)), budgets))


PROBE = '''
import os
import h5py
import numpy as np
TRACE = os.environ["KVTRACE_PROBE_TRACE"]
with h5py.File(TRACE, "r") as f:
    K, V = f["keys"][:], f["values"][:]
def score(view, params, state):
    k, v, p = view.keys, view.values, view.pos
    assert k.dtype == np.float32 and k.shape == (view.n, view.D) and v.shape == k.shape, "shape"
    assert p.dtype == np.int64 and p.shape == (view.n,) and np.all(np.diff(p) > 0), "positions"
    assert not k.flags.writeable and not v.flags.writeable and not p.flags.writeable, "read-only"
    b = k
    while isinstance(b, np.ndarray) and not b.flags.owndata:
        b = b.base
    assert isinstance(b, memoryview) and b.readonly, "not copied"
    assert np.array_equal(k, K[view.layer, view.kv_head, p]) and np.array_equal(v, V[view.layer, view.kv_head, p]), "values"
    assert view.budget == params["n"] or view.budget > 0, "budget"
    assert view.now == p[-1] and view.step >= 0, "now"
    a = view.attn
    assert a.shape == (view.n_queries, view.n) and a.dtype == np.float32, "attn shape"
    assert np.allclose(a.sum(axis=1), 1, atol=1e-4), "attn rows"
    assert view.queries is not None and view.queries.shape[2] == view.D, "queries"
    state["calls"] += 1
    return -p.astype(np.float64)
KVTRACE_POLICIES = [dict(name="probe", params=[dict(key="n", default=0, integer=True)], needs_attention=True,
                         create=lambda params: {"calls": 0}, score=score)]
'''

BAD_LOAD = {
    "a syntax error": ("def score(view params, state):\n    pass\n", "SyntaxError"),
    "no KVTRACE_POLICIES": ("import numpy\n", "declares no policies"),
    "no score": ("KVTRACE_POLICIES = [dict(name='noscore')]\n", "has no score function"),
    "a built-in's name": ("KVTRACE_POLICIES = [dict(name='knorm', score=lambda v, p, s: None)]\n", "clashes with the built-in"),
    "a failing import": ("import no_such_module_kvtrace\n", "ModuleNotFoundError"),
    "a bad parameter": ("KVTRACE_POLICIES = [dict(name='b', params=[dict(key='x')], score=lambda v, p, s: None)]\n",
                        "needs a number default"),
}

STEP = "import numpy as np\nKVTRACE_POLICIES = [dict(name='bad', score=lambda v, p, s: %s%s)]\n"
BAD_STEP = {
    "a wrong length": ("np.zeros(v.n + 1)", "", "returned a float64 array of shape"),
    "a wrong dtype": ("np.zeros(v.n, dtype=np.int64)", "", "int64 array"),
    "a list": ("[0.0] * v.n", "", "returned a list"),
    "a NaN": ("np.full(v.n, np.nan)", "", "gave a NaN score"),
    "an exception in score": ("1 / 0", "", "ZeroDivisionError: division by zero"),
    "an exception in create": ("np.zeros(v.n)", ", create=lambda p: {}[1]", "create: KeyError: 1"),
    "a write into the view": ("v.keys.__setitem__((0, 0), 1.0)", "", "read-only"),
}


def refusals(trace, tmp):
    for what, (src, want) in BAD_LOAD.items():
        f = os.path.join(tmp, "bad_load.py")
        open(f, "w").write(src)
        out = os.path.join(tmp, "bad_out")
        r = sim(trace, out, "--plugin", f, "--policies", "knorm")
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvtrace: error: " + f + ":") and want in lines[0]
              and not os.path.exists(out), "a file with %s is refused: one line naming it and saying %r, exit 2, no output"
              % (what, want), "rc %d: %s" % (r.returncode, r.stderr))
    for what, (expr, extra, want) in BAD_STEP.items():
        f = os.path.join(tmp, "bad_step.py")
        open(f, "w").write(STEP % (expr, extra))
        out = os.path.join(tmp, "bad_out")
        r = sim(trace, out, "--plugin", f, "--policies", "knorm,bad")
        lines = r.stderr.strip().splitlines()
        named = lines and lines[0].startswith("kvtrace: error: ") and (f + ": policy bad") in lines[0] and want in lines[0]
        where = lines and ("layer" in lines[0] and "kv head" in lines[0] and "step" in lines[0])
        code = 3 if "NaN" in want else 1   # the host's check of the scores; else the plug-in's hook failed
        check(r.returncode == code and len(lines) == 1 and named and where and not os.path.exists(out),
              "%s stops sim: one line with the file, policy, layer, kv head, step and %r, exit %d, no output" %
              (what, want, code), "rc %d: %s" % (r.returncode, r.stderr))


def probe(trace, tmp):
    f = os.path.join(tmp, "probe.py")
    open(f, "w").write(PROBE)
    ENV["KVTRACE_PROBE_TRACE"] = trace
    r = sim(trace, os.path.join(tmp, "probe_out"), "--plugin", f, "--policies", "probe,probe:n=3")
    check(r.returncode == 0, "the view: keys, values, positions as in the trace, read-only numpy views without a copy, "
          "the scalars, the attention rows", r.stderr)


def threads(trace, tmp):
    outs = []
    for t in ("1", "4"):
        out = os.path.join(tmp, "thr" + t)
        r = sim(trace, out, "--plugin", os.path.join(EX, "keydiff_variant.py"), "--policies",
                "keydiff_variant:anchor=ema:decay=0.5,keydiff_variant", threads=t)
        outs.append(out if r.returncode == 0 else None)
    ok = all(outs) and filecmp.cmp(os.path.join(outs[0], "results.csv"), os.path.join(outs[1], "results.csv"), shallow=False)
    ok = ok and all(pt.kept(outs[0], "keydiff_variant", "anchor=ema:decay=0.5:sinks=4", N) ==
                    pt.kept(outs[1], "keydiff_variant", "anchor=ema:decay=0.5:sinks=4", N) for N in (32, 64))
    check(ok, "--threads 1 and 4: the same results.csv and kept sets for a stateful Python policy")


def allocators_alias(trace, tmp):
    out = os.path.join(tmp, "alloc")
    r = sim(trace, out, "--plugin", os.path.join(PLUG, "knorm_plugin.py"), "--plugin", os.path.join(EX, "keydiff_variant.py"),
            "--alias", "kv0=keydiff_variant:sinks=0", "--policies", "pyknorm,knorm,kv0", "--allocators", "uniform,adakv")
    rows = {}
    if r.returncode == 0:
        with open(os.path.join(out, "summary.csv")) as f:
            for row in csv.DictReader(f):
                key = (row["policy"], row["allocator"], row["budget"], row["phase"])
                rows[key] = [v for k, v in row.items() if k not in ("config", "policy", "params", "run", "same_as")]
    same = rows and all(rows[("pyknorm",) + k[1:]] == v for k, v in rows.items() if k[0] == "knorm")
    check(r.returncode == 0 and same and any(k[0] == "keydiff_variant" for k in rows),
          "--allocators uniform,adakv and --alias kv0=keydiff_variant:sinks=0: pyknorm's summary rows equal knorm's",
          r.stderr)


def done_when(trace, tmp):
    res = os.path.join(tmp, "res")
    r = run("sim", trace, "--plugin", os.path.join(EX, "keydiff_variant.py"), "--policies", "keydiff_variant,keydiff",
            "--budgets", "32,64", "--chunk", "32", "--quiet", "-o", res)
    ok = r.returncode == 0
    if ok:
        r = run("analyze", trace, "--results", res, "-o", os.path.join(tmp, "ana"), "--quiet")
        ok = r.returncode == 0
    if ok:
        r = run("plot", os.path.join(tmp, "ana"), "-o", os.path.join(tmp, "fig"), "--quiet")
        ok = r.returncode == 0
    html = open(os.path.join(tmp, "fig", "report.html")).read() if ok else ""
    check(ok and "keydiff_variant" in html and "keydiff" in html.replace("keydiff_variant", ""),
          "the documented command: sim --plugin examples/python/keydiff_variant.py --policies keydiff_variant,keydiff, "
          "then analyze and plot: the report shows both", r.stderr)
    r = sim(trace, os.path.join(tmp, "learned"), "--plugin", os.path.join(EX, "learned_weights.py"), "--policies",
            "learned,learned:scale=0")
    check(r.returncode == 0, "examples/python/learned_weights.py (weights from learned_weights.npy beside it) runs",
          r.stderr)


def capture_case(tmp, model):
    got = {}
    tova = os.path.join(PLUG, "tova_plugin.py")
    for p in ("pytova", "tova"):
        out = os.path.join(tmp, "c_%s.h5" % p)
        r = run("capture", "--quiet", "--model", model, "--plugin", tova, "--evict", p, "--budget", "12", "--prompt",
                "Once upon a time", "--generate", "20", "--chunk", "8", "-o", out)
        if r.returncode:
            check(False, "capture --plugin tova_plugin.py --evict %s" % p, r.stderr)
            return
        with h5py.File(out, "r") as f:
            got[p] = (f.attrs["evict_policy"], f["tokens"][:], f["keys"][:])
    same = np.array_equal(got["pytova"][1], got["tova"][1]) and np.array_equal(got["pytova"][2], got["tova"][2])
    check(got["pytova"][0] == "pytova" and same,
          "capture --plugin --evict pytova: labelled pytova, the same tokens and keys as --evict tova")
    out = os.path.join(tmp, "fid")
    r = run("fidelity", "--quiet", "--model", model, "--plugin", tova, "--policies", "pytova,tova", "--budgets", "12",
            "--prompt", "Once upon a time", "--generate", "20", "-o", out)
    rows = {}
    if r.returncode == 0:
        with open(os.path.join(out, "fidelity.csv")) as f:
            rows = {row["policy"]: [v for k, v in row.items() if k not in ("config", "policy")] for row in csv.DictReader(f)}
    check(r.returncode == 0 and set(rows) == {"pytova", "tova"} and rows["pytova"] == rows["tova"],
          "fidelity --plugin tova_plugin.py: pytova's row equals tova's", r.stderr + str(rows))


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace_pyplugin_")
    try:
        rng = np.random.default_rng(20)
        L, H, K, T, D, P = 2, 4, 2, 61, 40, 40
        syn = os.path.join(tmp, "syn.h5")
        pt.write_trace(syn, rng.standard_normal((L, K, T, D)), rng.standard_normal((L, K, T, D)),
                       rng.standard_normal((L, H, T, D)), P)
        same_sets(syn, tmp, "synthetic D=40", "9,20", "7")
        probe(syn, tmp)
        refusals(syn, tmp)
        model = model_file()
        if not model:
            for what in ("the demo trace: Python knorm and tova keep the built-ins' sets", "threads", "done-when",
                         "capture --evict and fidelity with a Python policy"):
                skip(what, NO_MODEL)
            return
        demo = os.path.join(tmp, "demo.h5")
        r = run("capture", "--quiet", "--model", model, "--prompt", "Once upon a time", "--generate", "495", "--chunk",
                "32", "--record", "keys,values,queries,wo", "--kvzip", "-o", demo)
        check(r.returncode == 0, "the demo trace (capture as kvtrace demo does)", r.stderr)
        if r.returncode:
            return
        same_sets(demo, tmp, "demo trace", "32,64,128", "32")
        threads(demo, tmp)
        allocators_alias(demo, tmp)
        done_when(demo, tmp)
        capture_case(tmp, model)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
    sys.exit(finish())
