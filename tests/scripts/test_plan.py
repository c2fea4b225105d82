"""The run plan (docs/sim.md#the-run-plan), TAP:
- no engine or verb names a policy or an allocator, and none reads their declarations itself
  (scripts/plan_counts.py: both counts 0; the places listed when not);
- each refusal the plan makes reads the same in every verb that makes it (the text after the
  verb's prefix): a policy that reads the future inside a model (capture --evict, fidelity), an
  allocator that ranks across heads with a policy whose scores do not compare (sim, capture), an
  allocator that needs --head-scores (sim, capture, fidelity), --head-scores that no allocator
  reads (sim, capture, fidelity); and the refusals name the registry's head-score readers;
- the named sets (`kvtrace policies --sets`) are what the verbs use: each set's list runs in sim,
  and the demo's and fit's help show theirs;
- a trace without /wo relabels a configuration that reads W_o as its policy declares
  (criticalkv wo=absent), and the same configuration with W_o keeps wo=model.
    /usr/bin/python3 tests/scripts/test_plan.py [BUILD]"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True)


def body(stderr):
    """A refusal's text without the verb's prefix and help pointer."""
    line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    line = re.sub(r"^kvtrace: error: ", "", line)
    line = re.sub(r"^(sim|capture|fidelity|in-model eviction): ", "", line)
    line = re.sub(r"^--[a-z-]+ ", "", line)   # the verb's option naming the policy or the allocator
    return re.sub(r" \(see 'kvtrace [a-z]+ --help'\)$", "", line)


def same_refusal(what, runs, must):
    rs = [run(*a) for a in runs]
    bodies = [body(r.stderr) for r in rs]
    ok = all(r.returncode == 2 for r in rs) and len(set(bodies)) == 1 and must in bodies[0]
    check(ok, "%s: the same refusal in %d verbs, naming %r" % (what, len(runs), must),
          "\n".join("rc %d: %s" % (r.returncode, r.stderr.strip()) for r in rs))


def counts():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plan_counts.py"), "--json", ROOT],
                       capture_output=True, text=True)
    if not check(r.returncode == 0, "scripts/plan_counts.py runs", r.stderr):
        return
    c = json.loads(r.stdout)
    check(c["capability_checks"] == 0, "no engine or verb reads a policy's or allocator's declarations itself",
          "\n".join(c["capability_places"]))
    check(c["names"] == 0, "no engine or verb names a policy or an allocator", "\n".join(c["name_places"]))


def main():
    counts()
    tmp = tempfile.mkdtemp(prefix="kvtrace-plan-")
    trace = os.path.join(tmp, "t.h5")
    r = run("synth", "--like", "stories260k", "--tokens", "96", "-o", trace)
    if not check(r.returncode == 0, "synth writes a trace to replay", r.stderr):
        return finish()
    toks = os.path.join(tmp, "t.json")
    with open(toks, "w") as f:
        f.write("[1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45]")
    model = ["--model", "random:stories260k", "--tokens", toks]
    out = os.path.join(tmp, "out")
    sim = ["sim", trace, "--budgets", "16", "--chunk", "8", "--quiet", "-o", out]
    cap = ["capture", *model, "--budget", "4", "--chunk", "4", "--quiet", "-o", out + ".h5"]
    fid = ["fidelity", *model, "--budgets", "4", "--chunk", "4", "--quiet", "-o", out]

    same_refusal("offline policy inside a model", [cap + ["--evict", "oracle"], fid + ["--policies", "oracle"]],
                 "oracle is offline only")
    same_refusal("global with keydiff", [sim + ["--policies", "keydiff", "--allocators", "global"],
                                         cap + ["--evict", "keydiff", "--allocator", "global"]],
                 "keydiff's scores do not compare")
    same_refusal("headkv without --head-scores", [sim + ["--policies", "tova", "--allocators", "headkv"],
                                                  cap + ["--evict", "tova", "--allocator", "headkv"],
                                                  fid + ["--policies", "tova", "--allocators", "headkv"]],
                 "headkv needs --head-scores FILE")
    heads = os.path.join(tmp, "heads.csv")
    with open(heads, "w") as f:
        f.write("layer,kv_head,score\n" + "".join("%d,%d,1\n" % (l, g) for l in range(5) for g in range(4)))
    rs = [run(*a) for a in (sim + ["--policies", "tova", "--head-scores", heads],
                            cap + ["--evict", "tova", "--head-scores", heads],
                            fid + ["--policies", "tova", "--head-scores", heads])]
    bodies = {body(r.stderr) for r in rs}
    check(all(r.returncode == 2 for r in rs) and len(bodies) == 1 and "read only by the headkv and duo allocators"
          in bodies.pop(), "--head-scores without a reader: the same refusal in sim, capture and fidelity, naming "
          "the registry's readers", "\n".join(r.stderr for r in rs))
    r = run(*cap + ["--evict", "tova", "--allocator", "duo"])
    check(r.returncode == 2 and "duo ranks heads by full-cache attention, which capture does not have" in r.stderr,
          "capture --allocator duo without --head-scores: refused (no full-cache ranking before the run)", r.stderr)

    wo = os.path.join(tmp, "wo.h5")   # every input a policy of the sets may read (W_o, the KVzip pass)
    gguf = os.path.join(os.environ.get("KVTRACE_MODEL_DIR", ""), "stories260K.gguf")
    r = run("capture", "--model", gguf, "--prompt", "Once upon a time", "--generate", "40", "--record",
            "keys,values,queries,wo", "--kvzip", "--quiet", "-o", wo)
    check(r.returncode == 0, "capture records W_o and the KVzip pass", r.stderr)
    r = run("policies", "--sets")
    sets = re.findall(r"^  ([a-z_]+) +.*\n +([^ \n]+)$", r.stdout, re.M)
    check(r.returncode == 0 and {"demo", "demo_needle", "fit_baselines", "future"} <= {s for s, _ in sets},
          "policies --sets lists the named sets", r.stdout + r.stderr)
    for name, lst in sets:
        s = run("sim", wo, "--policies", lst, "--budgets", "4", "--chunk", "4", "--quiet", "-o",
                os.path.join(tmp, "set_" + name))
        check(s.returncode == 0, "the set %s runs in sim (%s)" % (name, lst), s.stderr)
    listed = dict(sets)
    demo_help, fit_help = run("demo", "--help").stdout, run("fit", "--help").stdout
    check(listed.get("demo", "?") in demo_help.replace("\n", ""), "demo --help shows the demo set", demo_help)
    check("default " + listed.get("fit_baselines", "?") in fit_help, "fit --help shows its baselines set", fit_help)

    # W_o as declared: relabelled without /wo, kept with it
    nowo = os.path.join(tmp, "nowo.h5")
    r2 = run("capture", *model, "--record", "keys,values,queries", "--quiet", "-o", nowo)
    labels = []
    for t in (wo, nowo):
        o = t + ".out"
        s = run("sim", t, "--policies", "criticalkv", "--budgets", "4", "--chunk", "4", "--quiet", "-o", o)
        if s.returncode != 0:
            labels.append(s.stderr)
            continue
        with open(os.path.join(o, "summary.csv")) as f:
            labels.append(next(csv.DictReader(f))["params"])
    check(r2.returncode == 0 and "wo=model" in labels[0] and "wo=absent" in labels[1],
          "criticalkv: wo=model on a trace with /wo, relabelled wo=absent without it", repr(labels))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
