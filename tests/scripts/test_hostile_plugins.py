"""A C plug-in's hooks failing, or its tables malformed (docs/plugins.md, docs/reliability.md), TAP: every verb that
runs a plug-in's policy (sim, capture --evict, fidelity) answers a failed hook with one line naming the plug-in's
file, the policy and the hook, exit 1, and no output: whatever the hook returned (42, -1, 139) and whatever it left
in the error record (a code of 0, a two-line message, a message without its terminating byte). A query window of
INT64_MAX runs (an in-model run keeps at most T queries); a negative one is refused (exit 2). A parameter table
without a default or choices, with a key the parser cannot read, twice the same key, or a NaN range is refused at
load with one line (exit 2). One path rule for --plugin FILE (C and Python): a bare file name is the file in the
working directory; a path over 255 bytes loads that file, not one at its first 255 bytes; a path over 1,023
bytes is refused (exit 2); a truncated shared object is refused (exit 2, one line) instead of killing kvtrace in
dlopen. tests/plugins/hook_plugin.c builds each case.
    /usr/bin/python3 tests/scripts/test_hostile_plugins.py [BUILD]"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish, sanitized  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
SAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"] if sanitized(KV) else []


def build(tmp, macro):
    out = os.path.join(tmp, macro.lower() + ".so")
    r = subprocess.run(["cc", "-std=c11", "-I" + os.path.join(ROOT, "include"), "-O1", "-g", "-Wall", "-Wextra",
                        "-fPIC", "-shared", *SAN, "-D" + macro, os.path.join(ROOT, "tests", "plugins", "hook_plugin.c"),
                        "-o", out, "-lm"], capture_output=True, text=True)
    return out if check(r.returncode == 0, "tests/plugins/hook_plugin.c -D%s builds" % macro, r.stderr) else None


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True)


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-hooks-")
    trace = os.path.join(tmp, "t.h5")
    r = run("synth", "--like", "stories260k", "--tokens", "64", "-o", trace)
    if not check(r.returncode == 0, "synth writes a trace", r.stderr):
        return finish()
    toks = os.path.join(tmp, "t.json")
    with open(toks, "w") as f:
        f.write("[1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53]")
    model = ["--model", "random:stories260k", "--tokens", toks]

    def verbs(so, out):
        return [("sim", ["sim", trace, "--plugin", so, "--policies", "hookpol", "--budgets", "8", "--chunk", "4",
                         "--quiet", "-o", out + "_sim"]),
                ("capture --evict", ["capture", *model, "--plugin", so, "--evict", "hookpol", "--budget", "4",
                                     "--chunk", "4", "--quiet", "-o", out + "_capture.h5"]),
                ("fidelity", ["fidelity", *model, "--plugin", so, "--policies", "hookpol", "--budgets", "4",
                              "--chunk", "4", "--quiet", "-o", out + "_fidelity"])]

    for macro, hook in (("FAIL_CREATE", "create"), ("FAIL_OBSERVE", "observe"), ("FAIL_SCORE", "score")):
        so = build(tmp, macro)
        for what, args in (verbs(so, os.path.join(tmp, macro)) if so else []):
            r = run(*args)
            lines = r.stderr.strip().splitlines()
            ok = r.returncode == 1 and len(lines) == 1 and ("%s: policy hookpol: %s failed" % (so, hook)) in lines[0]
            ok = ok and not os.path.exists(args[-1]) and len(lines[0]) < 1200
            check(ok, "%s: %s's failed %s is exit 1, one line naming the plug-in and the hook, no output" %
                  (what, macro, hook), "rc %d: %s" % (r.returncode, r.stderr[:400]))
    so = build(tmp, "HUGE_QWIN")
    for what, args in (verbs(so, os.path.join(tmp, "huge"))[1:] if so else []):
        r = run(*args)
        check(r.returncode == 0, "%s: a query window of INT64_MAX runs (at most T queries kept)" % what, r.stderr)
    so = build(tmp, "NEG_QWIN")
    for what, args in (verbs(so, os.path.join(tmp, "neg"))[1:] if so else []):
        r = run(*args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and "query window is -5" in lines[0] and
              not os.path.exists(args[-1]), "%s: a negative query window is refused, one line, exit 2" % what,
              "rc %d: %s" % (r.returncode, r.stderr))
    for macro in ("NULL_DEF", "NULL_CHOICES", "EMPTY_CHOICES", "BAD_KEY", "DUP_KEYS", "NAN_RANGE", "UNSORTED",
                  "BAD_PRESET", "NULL_PRESET", "DUP_PRESET"):
        so = build(tmp, macro)
        if not so:
            continue
        out = os.path.join(tmp, macro + "_out")
        r = run("sim", trace, "--plugin", so, "--policies", "hookpol", "--budgets", "8", "--chunk", "4", "-o", out)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvtrace: error: " + so + ": policy hookpol")
              and not os.path.exists(out), "a parameter table with %s is refused at load: one line, exit 2" % macro,
              "rc %d: %s" % (r.returncode, r.stderr))
    paths(tmp, trace)
    return finish()


def paths(tmp, trace):
    good, bad = build(tmp, "GOOD"), build(tmp, "FAIL_SCORE")
    if not (good and bad):
        return
    sim = ["--policies", "hookpol", "--budgets", "8", "--chunk", "4", "--quiet"]
    r = subprocess.run([KV, "sim", trace, "--plugin", os.path.basename(good), *sim, "-o", "bare"], cwd=tmp,
                       capture_output=True, text=True)
    check(r.returncode == 0, "--plugin NAME.so, a bare file name: the file in the working directory", r.stderr)
    deep = os.path.join(tmp, "d" * 200, "e" * 60)
    os.makedirs(deep)
    long_path = os.path.join(deep, "hook_good.so")
    shutil.copy(good, long_path)
    cut = long_path[:255]   # what a 256-byte buffer kept
    os.makedirs(os.path.dirname(cut), exist_ok=True)
    if not os.path.exists(cut):
        shutil.copy(bad, cut)
    r = run("sim", trace, "--plugin", long_path, *sim, "-o", os.path.join(tmp, "long"))
    check(len(long_path) > 255 and r.returncode == 0, "--plugin with a %d-byte path loads that file, not the one at "
          "its first 255 bytes" % len(long_path), r.stderr[:300])
    huge = os.path.join(tmp, "x" * 1100 + ".so")
    r = run("sim", trace, "--plugin", huge, *sim, "-o", os.path.join(tmp, "huge"))
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "at most 1023" in r.stderr,
          "--plugin with a path over 1,023 bytes: refused, one line, exit 2", r.stderr[:300])
    short = os.path.join(tmp, "truncated.so")
    with open(good, "rb") as f, open(short, "wb") as g:
        g.write(f.read()[:os.path.getsize(good) // 2])
    r = run("sim", trace, "--plugin", short, *sim, "-o", os.path.join(tmp, "short"))
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "truncated" in lines[0] and not os.path.exists(os.path.join(tmp, "short")),
          "a truncated shared object: refused before dlopen, one line, exit 2", "rc %d: %s" % (r.returncode, r.stderr))


if __name__ == "__main__":
    sys.exit(main())
