"""C plug-ins (docs/plugins.md), TAP: (1) `make install PREFIX=tmp` installs kvtrace, kvtrace/*.h and kvtrace.pc;
(2) examples/plugin/, copied out of the tree, builds against the installed header through pkg-config
(for an ASan build of kvtrace, with the same sanitizer flags); (3) the installed kvtrace's sim, given the example
(mypolicy, TOVA restated) and tests/plugins/knorm_plugin.c (plugknorm, knorm restated), keeps exactly the
built-ins' sets at both TOVA scopes on a synthetic trace with D = 40 (the 16-lane sums and their tail);
(4) bad plug-ins (another ABI, a larger struct, a missing symbol, a built-in's name, share_create without
share_destroy, a file that is not there, one loaded twice) are refused with one line naming the file, exit 2, no output; a NaN score stops the run
with one line naming the plug-in, exit 3, no output; (5) capture --evict mypolicy runs the model as --evict tova
does (same tokens and recorded keys), and fidelity gives mypolicy tova's row; --alias NAME=mypolicy:scope=group
works after --plugin; (6) plug-in allocators: the example's myalloc (pyramid restated) gives exactly pyramid's
results rows in sim (and in capture --evict / fidelity), tests/plugins/alloc_plugin.c's plugeven (dynamic, a
layer) and plugevenm (dynamic, the model) keep uniform's sets; a clash, a larger struct, a missing shares are
refused at load (exit 2), capacities or shares that break the host's checks stop sim, capture and fidelity (one
line naming the plug-in, exit 3, nothing written); `kvtrace policies --plugin` lists the plug-ins' policies and
allocators; (7) a plug-in policy with a share (tests/plugins/share_plugin.c) gets one share for its budgets
of a stream, in lock step, and none for one budget alone."""
import csv
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
ASAN = "asan" in BUILD
SAN_FLAGS = "-fsanitize=address,undefined -fno-sanitize-recover=all" if ASAN else ""
BAD = ["BAD_ABI", "BAD_SIZE", "NO_TABLES", "CLASH", "HALF_SHARE"]


def install(prefix):
    args = ["make", "-s", "--no-print-directory", "install", "PREFIX=" + prefix, "BUILD=" + BUILD] + (["SAN=1"] if ASAN else [])
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    want = ["bin/kvtrace", "include/kvtrace/policy.h", "include/kvtrace/error.h", "include/kvtrace/rope.h",
            "lib/pkgconfig/kvtrace.pc"]
    missing = [w for w in want if not os.path.exists(os.path.join(prefix, w))]
    check(r.returncode == 0 and not missing, "make install PREFIX=tmp: kvtrace, the headers, kvtrace.pc",
          r.stderr + " missing: %s" % missing)
    return r.returncode == 0 and not missing


def build_example(tmp, prefix):
    src = os.path.join(tmp, "example")
    shutil.copytree(os.path.join(ROOT, "examples", "plugin"), src, ignore=shutil.ignore_patterns("build"))
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    r = subprocess.run(["make", "-s", "EXTRA_CFLAGS=" + SAN_FLAGS], cwd=src, env=env, capture_output=True, text=True)
    so = os.path.join(src, "build", "mypolicy.so")
    ok = r.returncode == 0 and os.path.exists(so) and os.path.exists(os.path.join(src, "build", "myalloc.so")) \
        and not r.stderr.strip()
    check(ok, "examples/plugin builds out of tree against the installed header (pkg-config --cflags kvtrace)",
          r.stdout + r.stderr)
    return so if ok else None


def cc(tmp, prefix, src, name, *defs):
    out = os.path.join(tmp, name + ".so")
    r = subprocess.run(["cc", "-std=c11", "-I" + os.path.join(prefix, "include"), "-O1", "-g", "-Wall", "-Wextra",
                        "-Werror", "-fPIC", "-shared", *SAN_FLAGS.split(), *["-D" + d for d in defs],
                        os.path.join(ROOT, "tests", "plugins", src), "-o", out, "-lm"], capture_output=True, text=True)
    if r.returncode:
        check(False, "tests/plugins/%s %s builds" % (src, " ".join(defs)), r.stderr)
        return None
    return out


def sim(kv, trace, out, *args):
    return subprocess.run([kv, "sim", trace, "--budgets", "9,20", "--chunk", "7", "--decode-chunk", "3", "--quiet",
                           "--threads", "2", "-o", out, *args], capture_output=True, text=True)


def equivalence(kv, tmp, trace, mine, knorm):
    out = os.path.join(tmp, "eq")
    r = sim(kv, trace, out, "--plugin", mine, "--plugin", knorm, "--alias", "mg=mypolicy:scope=group", "--policies",
            "mypolicy,tova,mg,tova:scope=group,plugknorm,knorm")
    check(r.returncode == 0, "sim --plugin (two plug-ins, an alias of a plug-in's policy)", r.stderr)
    if r.returncode:
        return
    pairs = [(("mypolicy", "scope=layer"), ("tova", "scope=layer")), (("mypolicy", "scope=group"), ("tova", "scope=group")),
             (("plugknorm", ""), ("knorm", ""))]
    for a, b in pairs:
        same = all(pt.kept(out, *a, N) == pt.kept(out, *b, N) for N in (9, 20))
        check(same, "%s keeps exactly %s's sets (budgets 9, 20)" % (":".join(filter(None, a)), ":".join(filter(None, b))))


def refusals(kv, tmp, prefix, trace, mine):
    for m in BAD:
        so = cc(tmp, prefix, "bad_plugin.c", m.lower(), m)
        out = os.path.join(tmp, "bad_" + m)
        r = sim(kv, trace, out, "--plugin", so or "missing", "--policies", "knorm") if so else None
        if r is None:
            continue
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvtrace: error: " + so + ":")
              and not os.path.exists(out), "a plug-in with %s is refused: one line naming it, exit 2, no output" % m,
              "rc %d: %s" % (r.returncode, r.stderr))
    for what, args in (("a file that is not there", ["--plugin", os.path.join(tmp, "nothing.so")]),
                       ("one file twice (its names clash)", ["--plugin", mine, "--plugin", mine])):
        out = os.path.join(tmp, "bad_x")
        r = sim(kv, trace, out, *args, "--policies", "knorm")
        check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and not os.path.exists(out),
              "--plugin %s: one line, exit 2, no output" % what, r.stderr)
    so = cc(tmp, prefix, "bad_plugin.c", "nan", "NAN_SCORE")
    if so:
        out = os.path.join(tmp, "nan")
        r = sim(kv, trace, out, "--plugin", so, "--policies", "knorm,badpol")
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 3 and len(lines) == 1 and (so + ": policy badpol gave a NaN score") in lines[0]
              and not os.path.exists(out), "a NaN score stops sim: one line naming the plug-in, exit 3, no output",
              "rc %d: %s" % (r.returncode, r.stderr))


def share_case(kv, tmp, prefix, trace):
    """A plug-in policy with a share (tests/plugins/share_plugin.c): its budgets of a stream run in lock
    step with one share, and each budget's results are its results alone (it keeps the newest, as
    streaming:sinks=0 does)."""
    so = cc(tmp, prefix, "share_plugin.c", "shareprobe")
    if not so:
        return
    env = dict(os.environ, SHAREPROBE_REQUIRE="1")
    out = os.path.join(tmp, "share")
    r = subprocess.run([kv, "sim", trace, "--budgets", "9,20", "--chunk", "7", "--decode-chunk", "3", "--quiet",
                        "--threads", "2", "-o", out, "--plugin", so, "--policies", "shareprobe,streaming:sinks=0"],
                       capture_output=True, text=True, env=env)
    check(r.returncode == 0, "a plug-in's share: two budgets, every step with the share and in lock step", r.stderr)
    if r.returncode == 0:
        same = all(pt.kept(out, "shareprobe", "", N) == pt.kept(out, "streaming", "sinks=0", N) for N in (9, 20))
        check(same, "shareprobe keeps streaming:sinks=0's sets (budgets 9, 20)")
    alone = os.path.join(tmp, "share1")
    r = subprocess.run([kv, "sim", trace, "--budgets", "9", "--chunk", "7", "--quiet", "-o", alone, "--plugin", so,
                        "--policies", "shareprobe"], capture_output=True, text=True, env=env)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and "policy shareprobe: score failed: no share at step" in lines[0]
          and not os.path.exists(alone), "one budget alone gets no share (the probe's refusal: one line, exit 1)",
          "rc %d: %s" % (r.returncode, r.stderr))


def capture_case(kv, tmp, mine):
    model = model_file()
    if not model:
        skip("capture --evict a plug-in's policy", NO_MODEL)
        return
    got = {}
    for p in ("mypolicy", "tova"):
        out = os.path.join(tmp, "c_%s.h5" % p)
        r = subprocess.run([kv, "capture", "--quiet", "--model", model, "--plugin", mine, "--evict", p, "--budget",
                            "12", "--prompt", "Once upon a time", "--generate", "20", "--chunk", "8", "-o", out],
                           capture_output=True, text=True)
        if r.returncode:
            check(False, "capture --plugin --evict %s" % p, r.stderr)
            return
        with h5py.File(out, "r") as f:
            got[p] = (f.attrs["evict_policy"], f["tokens"][:], f["keys"][:])
    same = np.array_equal(got["mypolicy"][1], got["tova"][1]) and np.array_equal(got["mypolicy"][2], got["tova"][2])
    check(got["mypolicy"][0] == "mypolicy" and same,
          "capture --plugin --evict mypolicy: labelled mypolicy, the same tokens and keys as --evict tova")
    out = os.path.join(tmp, "fid")
    r = subprocess.run([kv, "fidelity", "--quiet", "--model", model, "--plugin", mine, "--policies", "mypolicy,tova",
                        "--budgets", "12", "--prompt", "Once upon a time", "--generate", "20", "-o", out],
                       capture_output=True, text=True)
    rows = {}
    if r.returncode == 0:
        with open(os.path.join(out, "fidelity.csv")) as f:
            rows = {row["policy"]: [v for k, v in row.items() if k not in ("config", "policy")] for row in csv.DictReader(f)}
    check(r.returncode == 0 and set(rows) == {"mypolicy", "tova"} and rows["mypolicy"] == rows["tova"],
          "fidelity --plugin: mypolicy's row equals tova's (KL, perplexity, offline error)", r.stderr + str(rows))


def rows_without(path, drop):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {r["allocator"].split(":")[0]: [{k: v for k, v in row.items() if k not in drop} for row in rows
                                            if row["allocator"] == r["allocator"]] for r in rows}


def allocator_cases(kv, tmp, prefix, trace, mine, myalloc):
    even = cc(tmp, prefix, "alloc_plugin.c", "plugeven")
    evenm = cc(tmp, prefix, "alloc_plugin.c", "plugevenm", "ALLOC_MODEL")
    out = os.path.join(tmp, "alloc_eq")
    r = sim(kv, trace, out, "--allocators", "myalloc:window=4,pyramid:window=4,plugeven,plugevenm,uniform", "--plugin",
            myalloc, "--plugin", even or "missing", "--plugin", evenm or "missing", "--policies",
            "knorm,tova,tova:scope=group")
    check(r.returncode == 0, "sim --plugin: plug-in allocators in --allocators (given before --plugin)", r.stderr)
    if r.returncode == 0:
        got = rows_without(os.path.join(out, "results.csv"), ("allocator", "run", "same_as"))
        check(got["myalloc"] == got["pyramid"] and len(got["pyramid"]) > 0,
              "myalloc (pyramid restated) gives exactly pyramid's results.csv rows (%d)" % len(got["pyramid"]))
        runs = {}
        with h5py.File(os.path.join(out, "results.h5"), "r") as f:
            for g in f["runs"].values():
                key = (g.attrs["policy"], g.attrs["params"], int(g.attrs["budget"]))
                runs.setdefault(g.attrs["allocator"].split(":")[0], {})[key] = g["retained"][:].tolist()
        check(runs["plugeven"] == runs["uniform"] and len(runs["uniform"]) == 6,
              "plugeven (dynamic, a layer's heads) keeps uniform's sets")
        check(runs["plugevenm"] == runs["uniform"], "plugevenm (dynamic, the model's heads, lock step) keeps uniform's sets")
    for m, rc, what in (("ALLOC_CLASH", 2, "a built-in allocator's name"), ("ALLOC_BAD_SIZE", 2, "a larger alloc_scope"),
                        ("ALLOC_NO_SHARES", 2, "a dynamic allocator without shares"),
                        ("ALLOC_BAD_CAPS", 3, "capacities not summing to L*K*N"),
                        ("ALLOC_ZERO_CAP", 3, "a capacity of 0"), ("ALLOC_BAD_SHARES", 3, "shares short of the total"),
                        ("ALLOC_HUGE_CAPS", 3, "capacities of 2^62 whose int64 sum wraps to L*K*N")):
        so = cc(tmp, prefix, "alloc_plugin.c", m.lower(), m)
        if not so:
            continue
        out = os.path.join(tmp, "bad_" + m)
        name = "plugeven" if m == "ALLOC_BAD_SHARES" else "plugodd"
        r = sim(kv, trace, out, "--plugin", so, "--policies", "knorm", "--allocators", name)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == rc and len(lines) == 1 and (so + ":") in lines[0] and not os.path.exists(out),
              "a plug-in allocator with %s: one line naming it, exit %d, no output" % (what, rc),
              "rc %d: %s" % (r.returncode, r.stderr))
    r = subprocess.run([kv, "policies", "--plugin", mine, "--plugin", myalloc], capture_output=True, text=True)
    lines = r.stdout.splitlines()
    starts = {x.split(" ")[0] for x in lines}
    mark = "    from the plug-in %s" % myalloc
    check(r.returncode == 0 and {"mypolicy", "myalloc", "knorm", "pyramid"} <= starts and mark in lines
          and any(x.strip().startswith("window ") for x in lines)
          and lines.index(mark) > [i for i, x in enumerate(lines) if x.startswith("Allocators")][0],
          "kvtrace policies --plugin: the plug-ins' policies and allocators (with parameters) beside the built-ins",
          r.stdout + r.stderr)
    r = subprocess.run([kv, "policies", "--plugin", myalloc, "myalloc"], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.count("\n\n") == 1 and "\nmyalloc " in r.stdout
          and not any(x.startswith(("pyramid ", "knorm ")) for x in r.stdout.splitlines()),
          "kvtrace policies --plugin FILE myalloc: that allocator alone", r.stdout + r.stderr)


def alloc_capture_case(kv, tmp, myalloc):
    model = model_file()
    if not model:
        skip("capture --evict --allocator a plug-in's allocator", NO_MODEL)
        return
    got = {}
    for a in ("myalloc:window=4", "pyramid:window=4"):
        out = os.path.join(tmp, "ca_%s.h5" % a.split(":")[0])
        r = subprocess.run([kv, "capture", "--quiet", "--model", model, "--allocator", a, "--plugin", myalloc, "--evict",
                            "knorm", "--budget", "12", "--prompt", "Once upon a time", "--generate", "20", "--chunk", "8",
                            "-o", out], capture_output=True, text=True)
        if r.returncode:
            check(False, "capture --plugin --evict knorm --allocator %s" % a, r.stderr)
            return
        with h5py.File(out, "r") as f:
            got[a] = (f["tokens"][:], f["keys"][:])
    a, b = got.values()
    check(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]),
          "capture --plugin --allocator myalloc: the same tokens and keys as --allocator pyramid")
    bad = os.path.join(tmp, "alloc_bad_shares.so")   # built by allocator_cases
    for verb, args in (("capture", ["--evict", "knorm", "--allocator", "plugeven", "--budget", "12", "--chunk", "8"]),
                       ("fidelity", ["--policies", "knorm", "--allocators", "plugeven", "--budgets", "12"])):
        if not os.path.exists(bad):
            break
        out = os.path.join(tmp, "bad_%s_out" % verb)
        r = subprocess.run([kv, verb, "--quiet", "--model", model, "--plugin", bad, *args, "--prompt", "Once upon a time",
                            "--generate", "20", "-o", out], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 3 and len(lines) == 1 and (bad + ": allocator plugeven's shares") in lines[0]
              and not os.path.exists(out), "%s: a plug-in's shares short of the total stop the run (exit 3, no output)"
              % verb, "rc %d: %s" % (r.returncode, r.stderr))
    out = os.path.join(tmp, "fid_alloc")
    r = subprocess.run([kv, "fidelity", "--quiet", "--model", model, "--plugin", myalloc, "--policies", "knorm",
                        "--allocators", "myalloc:window=4,pyramid:window=4", "--budgets", "12", "--prompt",
                        "Once upon a time", "--generate", "20", "-o", out], capture_output=True, text=True)
    got = rows_without(os.path.join(out, "fidelity.csv"), ("allocator", "config")) if r.returncode == 0 else {}
    check(r.returncode == 0 and set(got) == {"myalloc", "pyramid"} and got["myalloc"] == got["pyramid"],
          "fidelity --plugin --allocators myalloc,pyramid: equal rows", r.stderr + str(got))


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace_plugin_")
    try:
        prefix = os.path.join(tmp, "prefix")
        if not install(prefix):
            return
        kv = os.path.join(prefix, "bin", "kvtrace")
        mine = build_example(tmp, prefix)
        knorm = cc(tmp, prefix, "knorm_plugin.c", "plugknorm")
        rng = np.random.default_rng(19)
        L, H, K, T, D, P = 2, 4, 2, 61, 40, 40
        trace = os.path.join(tmp, "t.h5")
        pt.write_trace(trace, rng.standard_normal((L, K, T, D)), rng.standard_normal((L, K, T, D)),
                       rng.standard_normal((L, H, T, D)), P)
        if mine and knorm:
            equivalence(kv, tmp, trace, mine, knorm)
            refusals(kv, tmp, prefix, trace, mine)
            share_case(kv, tmp, prefix, trace)
            capture_case(kv, tmp, mine)
        myalloc = mine and os.path.join(os.path.dirname(mine), "myalloc.so")
        if myalloc:
            allocator_cases(kv, tmp, prefix, trace, mine, myalloc)
            alloc_capture_case(kv, tmp, myalloc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
    finish()
