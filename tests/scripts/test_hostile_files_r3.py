"""Files given to options, tried as a hostile user would (docs/reliability.md#errors-opening-an-input-are-reported-as-what-they-are),
TAP: `--defines FILE` reads whole lines whatever their length (a comment of 4,200 bytes defines nothing: its tail
was once read as a line of its own), names the file when it is a directory (exit 2), is missing (exit 1), never
ends (/dev/zero: refused as larger than 1 MiB, exit 3) or holds a NUL byte (exit 3); `--head-scores FILE` that is
missing is exit 1 ("cannot open"), as for every input the operating system refuses. `prompts needle` with a
--needle, --question or --answer that is not UTF-8 is exit 2 naming the option and the byte offset, a haystack
file that is not is exit 3 naming the file (it once said "out of memory"). A random model takes `--tokenizer
FILE` (a llama2.c tokenizer of its V tokens), as the README says: a text prompt is encoded and recorded; a
tokenizer of another size is exit 3 naming it. A study index that lists one trace file under two ids is exit 3
naming both lines (it counted one prompt twice); `features` refuses traces of two models or shapes as sim does
(exit 3; --mixed-models allows them). capture's up-front size of the trace (printed with --stats) is
within 2x of the file written, whatever it records (it said 0.07 GiB for a 161.7 MiB file). Each refusal one
line, no output.
    /usr/bin/python3 tests/scripts/test_hostile_files_r3.py [BUILD]"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True, timeout=60)


def refused(what, r, code, must, out):
    lines = r.stderr.strip().splitlines()
    check(r.returncode == code and len(lines) == 1 and must in lines[0] and not os.path.exists(out),
          "%s: exit %d, one line naming %r, no output" % (what, code, must), "rc %d: %s" % (r.returncode, r.stderr))


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-files3-")
    trace = os.path.join(tmp, "t.h5")
    r = run("synth", "--like", "stories260k", "--tokens", "48", "-o", trace)
    if not check(r.returncode == 0, "synth writes a trace", r.stderr):
        return finish()
    out = os.path.join(tmp, "out")   # no refused run may write it
    sim = ["sim", trace, "--budgets", "8", "--chunk", "4", "--quiet", "-o", out]
    ok_run = ["sim", trace, "--budgets", "8", "--chunk", "4", "--quiet", "-o"]

    long_comment = os.path.join(tmp, "long.defines")
    with open(long_comment, "w") as f:
        f.write("a = knorm\n# " + "x" * 4200 + " b = -knorm\n")
    r = run(*ok_run, os.path.join(tmp, "a"), "--defines", long_comment, "--policies", "a")
    check(r.returncode == 0, "--defines: a file with a 4,200-byte comment line reads (a defined)", r.stderr)
    r = run(*sim, "--defines", long_comment, "--policies", "b")
    refused("--defines: the tail of a long comment defines nothing", r, 2, "'b'", out)
    long_def = os.path.join(tmp, "longdef.defines")
    with open(long_def, "w") as f:
        f.write("c = knorm" + " + 0 * knorm" * 400 + "\n")
    r = run(*ok_run, os.path.join(tmp, "c"), "--defines", long_def, "--policies", "c")
    check(r.returncode == 0 or (r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and long_def in r.stderr),
          "--defines: a 4,800-byte definition is read whole (defined, or refused naming the file and line)", r.stderr)
    refused("--defines DIR", run(*sim, "--defines", tmp, "--policies", "knorm"), 2, tmp + ": is a directory", out)
    missing = os.path.join(tmp, "nothing.defines")
    refused("--defines MISSING", run(*sim, "--defines", missing, "--policies", "knorm"), 1, missing + ": cannot open", out)
    refused("--defines /dev/zero", run(*sim, "--defines", "/dev/zero", "--policies", "knorm"), 3,
            "/dev/zero: larger than", out)
    nul = os.path.join(tmp, "nul.defines")
    with open(nul, "wb") as f:
        f.write(b"a = knorm\x00\n")
    refused("--defines with a NUL byte", run(*sim, "--defines", nul, "--policies", "knorm"), 3, "NUL", out)
    miss = os.path.join(tmp, "nothing.csv")
    refused("--head-scores MISSING", run(*sim, "--policies", "knorm", "--allocators", "headkv", "--head-scores", miss),
            1, miss + ": cannot open", out)
    hay = os.path.join(tmp, "hay.txt")
    with open(hay, "w") as f:
        f.write("The grass is green. The sky is blue.\n")
    needle = ["prompts", "needle", "--haystack", hay, "--needle", "The code is 7.", "--question", "What is the code?",
              "--answer", "7", "--lengths", "32", "--depths", "0", "--model", "random:stories260k", "-o", out + ".jsonl"]
    for opt in ("--needle", "--question", "--answer"):
        args = list(needle)
        args[args.index(opt) + 1] = "bad \udcff text"   # the byte 0xFF, passed through as is
        r = subprocess.run([KV, *args], capture_output=True, timeout=60,
                           env=dict(os.environ, PYTHONIOENCODING="utf-8"))
        err = r.stderr.decode("utf-8", "replace").strip().splitlines()
        check(r.returncode == 2 and len(err) == 1 and opt + " is not valid UTF-8 at byte offset 4" in err[0]
              and not os.path.exists(out + ".jsonl"), "prompts needle %s with a byte 0xFF: exit 2, one line" % opt,
              "rc %d: %s" % (r.returncode, err))
    bad_hay = os.path.join(tmp, "badhay.txt")
    with open(bad_hay, "wb") as f:
        f.write(b"The grass is \xff green.\n")
    args = list(needle)
    args[args.index("--haystack") + 1] = bad_hay
    refused("prompts needle with a haystack that is not UTF-8", run(*args), 3, bad_hay + ": the haystack is not valid "
            "UTF-8 at byte offset 13", out + ".jsonl")
    tok = os.path.join(os.environ.get("KVTRACE_MODEL_DIR", ""), "derived", "tok512.bin")
    rt = os.path.join(tmp, "random_text.h5")
    r = run("capture", "--model", "random:stories260k", "--tokenizer", tok, "--prompt", "Once upon a time",
            "--generate", "4", "--quiet", "-o", rt)
    info = run("info", rt).stdout if r.returncode == 0 else ""
    check(r.returncode == 0 and 'prompt text   16 bytes: "Once upon a time"' in info,
          "capture --model random:stories260k --tokenizer tok512.bin --prompt TEXT: encoded and recorded", r.stderr)
    cut = os.path.join(tmp, "tok_cut.bin")
    if os.path.exists(tok):
        with open(tok, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[:3000])
    refused("a random model with a tokenizer cut short", run("capture", "--model", "random:stories260k", "--tokenizer",
            cut, "--prompt", "Once", "--quiet", "-o", out + ".h5"), 3, cut + ":", out + ".h5")
    import re
    gguf = os.path.join(os.environ.get("KVTRACE_MODEL_DIR", ""), "stories260K.gguf")
    for extra in ([], ["--dtype", "f16"], ["--record", "keys,values", "--attention", "none"], ["--logits"],
                  ["--attention", "full"]):
        t = os.path.join(tmp, "est.h5")
        r = run("capture", "--model", gguf, "--prompt", "Once upon a time", "--generate", "300", "--stats", "--quiet",
                "--force", "-o", t, *extra)
        m = re.search(r"trace ~([0-9.e+]+) MiB", r.stderr)
        size = os.path.getsize(t) / 2**20 if r.returncode == 0 else 0
        ok = r.returncode == 0 and m and 0.5 <= float(m.group(1)) / size <= 2
        check(ok, "capture %s: the up-front trace size %s MiB is within 2x of the file's %.3g MiB" %
              (" ".join(extra) or "(defaults)", m.group(1) if m else "?", size), r.stderr[-300:])
    other = os.path.join(tmp, "other.h5")
    r = run("synth", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--tokens", "48",
            "-o", other)
    feats = ["features", trace, other, "--budget", "8", "--chunk", "4", "--quiet"]
    refused("features over traces of two models", run(*feats, "-o", out + ".f.h5"), 3, "a trace of model", out + ".f.h5")
    r = run(*feats, "--mixed-models", "-o", os.path.join(tmp, "mixed.h5"))
    check(r.returncode == 0, "features --mixed-models: the two models' traces in one file", r.stderr)
    import hashlib
    import json
    study = os.path.join(tmp, "study")
    os.makedirs(study)
    os.link(trace, os.path.join(study, "a.h5"))
    sha = hashlib.sha256(open(trace, "rb").read()).hexdigest()
    with open(os.path.join(study, "index.jsonl"), "w") as f:
        for pid in ("p1", "p2"):
            f.write(json.dumps({"id": pid, "file": "a.h5", "tokens": 48, "sha256": sha}) + "\n")
    study2 = os.path.join(tmp, "study2")
    os.makedirs(study2)
    os.link(trace, os.path.join(study2, "a.h5"))
    def index(tokens):
        with open(os.path.join(study2, "index.jsonl"), "w") as f:
            for pid, name in (("p1", "a.h5"), ("p2", "b.h5")):
                f.write(json.dumps({"id": pid, "file": name, "tokens": tokens, "sha256": sha}) + "\n")
    shutil.copy(trace, os.path.join(study2, "b.h5"))
    index(48)
    res2 = os.path.join(tmp, "res2")
    r = run("sim", study2, "--policies", "knorm", "--budgets", "8", "--chunk", "4", "--quiet", "-o", res2)
    check(r.returncode == 0, "sim of a two-trace study", r.stderr)
    index(47)
    refused("sim of a study whose index says another T", run("sim", study2, "--policies", "knorm", "--budgets", "8",
            "--chunk", "4", "--quiet", "-o", out), 3, "the index says tokens = 47", out)
    refused("analyze of a study whose index says another T", run("analyze", study2, "--results", res2, "--quiet",
            "-o", out), 3, "the index says tokens = 47", out)
    refused("a study index with one trace under two ids", run("sim", study, "--policies", "knorm", "--budgets", "8",
            "--chunk", "4", "--quiet", "-o", out), 3, "is the file of line 1 too", out)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
