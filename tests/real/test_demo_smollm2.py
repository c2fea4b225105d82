"""make demo's pipeline on SmolLM2-135M-Instruct (`kvtrace demo --model smollm2-135m --short`: capture, sim,
analyze and plot of the one trace; the demo's other steps, the same code on any model, run in full on
stories260K in test_demo.py), once, in the normal leg, TAP: every step runs (its time printed: where the
demo's time goes), the report is written, and the needle study's task for this model, RULER's pass key
in repeated filler (the prompts the demo's needle study makes: `prompts needle`, lengths 128 and 256,
depths 0, 0.5, 1), is one the full-cache model solves: each of its six prompts, without its answer,
greedily continued for 8 tokens; the continuation, leading white space stripped, starts with the pass
key (how often is printed, and must be most of the time).
Run by tests/run_all.sh with the test venv's Python; KVTRACE and KVTRACE_SMOLLM2 set."""
import json
import os
import subprocess
import sys
import tempfile
import time

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

KVTRACE, GGUF = os.environ["KVTRACE"], os.environ["KVTRACE_SMOLLM2"]


# the demo's needle task for any model but stories260K (cli/verb_demo.c, PASSKEY_TASK), as RULER writes it
HAYSTACK = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
NEEDLE, QUESTION, ANSWER = ("The pass key is 71432. Remember it. 71432 is the pass key.",
                            "What is the pass key? The pass key is", "71432")


def needle_prompts(tmp):
    """The needle prompts as the demo's step 8 makes them (prompts needle)."""
    hay, out = os.path.join(tmp, "haystack.txt"), os.path.join(tmp, "prompts.jsonl")
    with open(hay, "w") as f:
        f.write(HAYSTACK)
    subprocess.run([KVTRACE, "prompts", "needle", "--haystack", hay, "--needle", NEEDLE, "--question", QUESTION,
                    "--answer", ANSWER, "--depths", "0,0.5,1", "--lengths", "128,256", "--model", GGUF, "-o", out],
                   check=True, capture_output=True, text=True)
    return out


def passkey_success(tmp):
    """The full-cache model on each needle prompt, its answer removed: (successes, prompts, continuations)."""
    prompts, answers = os.path.join(tmp, "ask.jsonl"), []
    with open(needle_prompts(tmp)) as f, open(prompts, "w") as g:
        for line in f:
            p = json.loads(line)
            a = p["answer"]["text"] if isinstance(p.get("answer"), dict) else p["answer"]
            text = p["text"]
            cut = text.rstrip()
            if not cut.endswith(a):
                raise RuntimeError("prompt %s does not end with its answer %r" % (p["id"], a))
            g.write(json.dumps({"id": p["id"], "text": cut[:-len(a)].rstrip(), "generate": 8}) + "\n")
            answers.append((p["id"], a))
    out = os.path.join(tmp, "ask")
    r = subprocess.run([KVTRACE, "capture", "--prompts", prompts, "--model", GGUF, "--quiet", "--record",
                        "keys,values", "--attention", "none", "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    ok, said = 0, []
    for pid, a in answers:
        with h5py.File(os.path.join(out, pid + ".h5"), "r") as f:
            toks = f["tokens"][()].tolist()
        gen = toks[-8:]
        d = subprocess.run([KVTRACE, "tokenize", "--model", GGUF, "--decode", "--text", json.dumps(gen)],
                           capture_output=True, text=True, check=True).stdout
        text = d.strip("\n").lstrip()
        ok += text.startswith(a)
        said.append("%s: %r" % (pid, text))
    return ok, len(answers), said


def main():
    with tempfile.TemporaryDirectory() as tmp:
        demo = os.path.join(tmp, "demo")
        t0 = time.time()
        r = subprocess.run([KVTRACE, "demo", "--model", GGUF, "--short", "--quiet", "-o", demo], capture_output=True,
                           text=True)
        took = time.time() - t0
        for line in r.stdout.splitlines():
            print("# " + line)
        print("# the SmolLM2 demo took %.0f s" % took)
        if not check(r.returncode == 0, "kvtrace demo --model smollm2-135m --short runs every step", r.stderr[-2000:]):
            return finish()
        check(all(os.path.exists(os.path.join(demo, p)) for p in ("figures/report.html", "results/summary.csv",
                                                                  "analysis/spearman.csv")),
              "the report, sim's summary and analyze's Spearman table are written")
        ok, n, said = passkey_success(tmp)
        print("# pass key, full cache, greedy: %d of %d prompts answered (%s)" % (ok, n, "; ".join(said)))
        check(ok * 2 > n, "the needle study's task is one the full-cache model solves (%d of %d prompts)" % (ok, n),
              "; ".join(said))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
