"""The command line's shared rules (docs/reliability.md, "One grammar for numbers, one reader of budgets, one rule
for repeats"), TAP, on every verb that takes options:
- an option given twice is exit 2, one line naming it, nothing written; the list options --policies, --budgets,
  --chunks, --allocators accumulate as if comma-joined (the results equal those of the joined list; a value in
  two occurrences is refused as a duplicate); --define accumulates;
- one number grammar: hex, '+', inf/nan, and an exponent where an integer is due, refused in options, policy and
  allocator parameters and score expressions alike; 1e-3 and .5 accepted where a real is;
- one budget reader: the same refusals in sim, fidelity, fit and capture, a percentage only in sim.
    /usr/bin/python3 tests/scripts/test_option_rules.py [BUILD]"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True)


def refused(what, code, args, must, out=None):
    r = run(*args)
    ok = r.returncode == code and len(r.stderr.strip().splitlines()) == 1 and must in r.stderr
    ok = ok and (out is None or not os.path.exists(out))
    check(ok, "%s: exit %d, one line naming %r" % (what, code, must), "rc %d: %s" % (r.returncode, r.stderr))


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-opts-")
    trace = os.path.join(tmp, "t.h5")
    r = run("synth", "--like", "stories260k", "--tokens", "96", "-o", trace)
    if not check(r.returncode == 0, "synth writes a trace to replay", r.stderr):
        return finish()
    toks = os.path.join(tmp, "t.json")
    with open(toks, "w") as f:
        f.write("[1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45]")
    out = os.path.join(tmp, "out")
    sim = ["sim", trace, "--budgets", "16", "--chunk", "8", "--quiet", "-o", out]
    cap = ["capture", "--model", "random:stories260k", "--tokens", toks, "--quiet", "-o", out + ".h5"]
    twice = [
        ("sim --chunk twice", sim + ["--policies", "tova", "--chunk", "16"], "--chunk"),
        ("sim -o twice", sim + ["--policies", "tova", "-o", out + "2"], "--output"),
        ("sim --force twice", sim + ["--policies", "tova", "--force", "--force"], "--force"),
        ("capture --generate twice", cap + ["--generate", "2", "--generate", "3"], "--generate"),
        ("capture --prompt twice", ["capture", "--model", "random:stories260k", "--prompt", "a", "--prompt", "b",
                                    "-o", out + ".h5"], "--prompt"),
        ("capture --threads twice", cap + ["--threads", "1", "--threads", "2"], "--threads"),
        ("fidelity --chunk twice", ["fidelity", "--model", "random:stories260k", "--tokens", toks, "--policies",
                                    "tova", "--budgets", "4", "--chunk", "4", "--chunk", "8", "-o", out], "--chunk"),
        ("analyze --threads twice", ["analyze", trace, "--threads", "1", "--threads", "2", "-o", out], "--threads"),
        ("synth --tokens twice", ["synth", "--like", "stories260k", "--tokens", "8", "--tokens", "9", "-o",
                                  out + ".h5"], "--tokens"),
        ("tokenize --text twice", ["tokenize", "--model", "random:stories260k", "--text", "a", "--text", "b"],
         "--text"),
        ("prompts --depths twice", ["prompts", "needle", "--depths", "0", "--depths", "1"], "--depths"),
    ]
    for what, args, must in twice:
        refused(what, 2, args, "%s is given twice" % must, out if "-o" in args else None)

    joined, apart = os.path.join(tmp, "joined"), os.path.join(tmp, "apart")
    a = run("sim", trace, "--policies", "tova,knorm", "--budgets", "16,32", "--chunks", "8,16", "--quiet", "-o", joined)
    b = run("sim", trace, "--policies", "tova", "--policies", "knorm", "--budgets", "16", "--budgets", "32",
            "--chunks", "8", "--chunks", "16", "--quiet", "-o", apart)
    same = a.returncode == 0 and b.returncode == 0 and \
        open(os.path.join(joined, "summary.csv")).read() == open(os.path.join(apart, "summary.csv")).read()
    check(same, "sim: --policies/--budgets/--chunks given twice each = the comma-joined lists (summary.csv identical)",
          a.stderr + b.stderr)
    refused("sim: a policy in two --policies", 2, ["sim", trace, "--policies", "tova", "--policies", "tova", "--budgets",
                                                   "16", "--chunk", "8", "-o", out], "twice", out)
    refused("sim: a budget in two --budgets", 2, ["sim", trace, "--policies", "tova", "--budgets", "16", "--budgets",
                                                  "016", "--chunk", "8", "-o", out], "twice", out)
    d = run("sim", trace, "--define", "a=knorm", "--define", "b=-knorm", "--policies", "a,b", "--budgets", "16",
            "--chunk", "8", "--quiet", "-o", os.path.join(tmp, "defs"))
    check(d.returncode == 0, "sim: --define given twice defines both", d.stderr)

    for what, args, must in (
            ("a hex number option", sim + ["--policies", "tova", "--threads", "0x2"], "integer"),
            ("a '+' number option", sim + ["--policies", "tova", "--threads", "+2"], "integer"),
            ("a hex policy parameter", ["sim", trace, "--policies", "snapkv:window=0x10", "--budgets", "16",
                                        "--chunk", "8", "-o", out], "not a number"),
            ("an inf policy parameter", ["sim", trace, "--policies", "keydiff:window=inf", "--budgets", "16",
                                         "--chunk", "8", "-o", out], "not a number"),
            ("an exponent as an integer parameter", ["sim", trace, "--policies", "snapkv:window=1e1", "--budgets",
                                                     "16", "--chunk", "8", "-o", out], "not an integer"),
            ("a hex allocator parameter", ["sim", trace, "--policies", "tova", "--allocators", "pyramid:beta=0x10",
                                           "--budgets", "16", "--chunk", "8", "-o", out], "not a number"),
            ("a hex number in an expression", ["sim", trace, "--define", "x=knorm + 0x1", "--policies", "x",
                                               "--budgets", "16", "--chunk", "8", "-o", out], "x1"),
            ("nan in an expression", ["sim", trace, "--define", "x=knorm * nan", "--policies", "x", "--budgets", "16",
                                      "--chunk", "8", "-o", out], "nan")):
        refused(what, 2, args, must, out)
    e = run("sim", trace, "--define", "x=knorm * 1e-3 + .5", "--policies", "x,keydiff:window=2.5e-1", "--budgets",
            "16", "--chunk", "8", "--quiet", "-o", os.path.join(tmp, "reals"))
    check(e.returncode == 0, "reals: 1e-3 and .5 in an expression, 2.5e-1 as a real parameter, accepted", e.stderr)

    fid = ["fidelity", "--model", "random:stories260k", "--tokens", toks, "--policies", "tova", "--chunk", "4", "-o",
           out]
    for what, args in (("sim", ["sim", trace, "--policies", "tova", "--chunk", "8", "-o", out, "--budgets"]),
                       ("fidelity", fid + ["--budgets"]),
                       ("capture", cap + ["--evict", "tova", "--chunk", "4", "--budget"])):
        for bad, must in (("0", "out of range"), ("0x10", "integer"), ("16,16", "twice"), ("1073741825", "range")):
            if what == "capture" and "," in bad:
                continue
            refused("%s: budget %s" % (what, bad), 2, args + [bad], must, out if what != "capture" else out + ".h5")
    refused("capture: a percentage budget", 2, cap + ["--evict", "tova", "--budget", "10%"], "for sim", out + ".h5")
    refused("fidelity: a percentage budget", 2, fid + ["--budgets", "10%"], "for sim", out)
    p = run("sim", trace, "--policies", "tova", "--budgets", "25%,16", "--chunk", "8", "--quiet", "-o",
            os.path.join(tmp, "pct"))
    check(p.returncode == 0, "sim: a percentage budget beside a number", p.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
