"""kvtrace capture of SmolLM2-135M-Instruct (the Q4_1 GGUF) against llama.cpp on the same GGUF, TAP: llama.cpp
through the npm package node-llama-cpp (pinned, its prebuilt CPU binaries, installed with --ignore-scripts;
float32 KV cache, no flash attention), fed the same token ids (tests/real/llamacpp_logprobs.mjs).

llama.cpp multiplies Q4_1 weights by activations it rounds to 8 bits (Q8_1 blocks), so its logits carry
that rounding where kvtrace (and transformers) multiply the dequantised float32 weights: the two agree to
the precision 8-bit activations allow, not to float32's. Checked on prompts of about 150 and 700 tokens (a
pass key in repeated filler): the next-token log-probability of every prompt token (teacher forced,
llama.cpp's full distribution) within MEAN_TOL nats on average and MAX_TOL at worst, the next-token
argmax the same wherever kvtrace's top-2 gap exceeds GAP nats, and the greedy continuation of 32 tokens
identical (or a first difference where kvtrace's top-2 gap is below GAP). And the tokenizer: llama.cpp's
ids of the tokenizer corpus and digit-heavy strings (test_smollm2_tokenizer.py's) equal kvtrace's. And
`capture --compute int8` (8-bit rows as llama.cpp's, docs/capture.md#compute-int8) within the same tolerances.
Run by tests/run_all.sh with the test venv's Python; KVTRACE, KVTRACE_SMOLLM2, KVTRACE_LLAMACPP set (empty:
KVTRACE_LLAMACPP_WHY says why, and the script fails with that one line)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, finish  # noqa: E402

KVTRACE, GGUF, LLAMACPP = os.environ["KVTRACE"], os.environ["KVTRACE_SMOLLM2"], os.environ.get("KVTRACE_LLAMACPP")
MEAN_TOL, MAX_TOL, GAP = 0.05, 0.5, 0.2
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def prompt_ids(n):
    half = FILLER * (n // 2)
    text = half + "The pass key is 71432. Remember it. 71432 is the pass key. " + half + \
        "What is the pass key? The pass key is"
    r = subprocess.run([KVTRACE, "tokenize", "--model", GGUF, "--no-special", "--text", text], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)


def llamacpp_env(tmp, **kw):
    """The node script beside the installed node_modules (where its bare imports resolve), and its env."""
    script = os.path.join(LLAMACPP, "llamacpp_logprobs.mjs")
    shutil.copyfile(os.path.join(HERE, "llamacpp_logprobs.mjs"), script)
    return script, dict(os.environ, MODEL=GGUF, OUT=os.path.join(tmp, "lc.json"), **kw)


def tokenizer_check(tmp):
    """llama.cpp's ids of the tokenizer corpus and the digit-heavy strings against kvtrace's."""
    sys.path.insert(0, os.path.join(HERE, "..", "tokenizers"))
    import corpus
    from test_smollm2_tokenizer import digit_strings, kvtrace_ids
    texts = [s for s in corpus.strings() if s] + digit_strings()
    f = os.path.join(tmp, "texts.json")
    with open(f, "w") as g:
        json.dump(texts, g)
    script, env = llamacpp_env(tmp, TEXTS=f)
    r = subprocess.run(["node", script], env=env, capture_output=True, text=True, timeout=600)
    if not check(r.returncode == 0, "llama.cpp tokenizes the corpus", r.stderr[-2000:]):
        return
    with open(env["OUT"]) as g:
        want = json.load(g)
    got = kvtrace_ids(texts)
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    print("# tokenizer: %d texts, %d tokens; %d differ from llama.cpp's" % (len(texts), sum(map(len, want)), len(bad)))
    check(len(got) == len(want) and not bad, "kvtrace tokenize == llama.cpp's tokenizer on the same GGUF, id for id",
          "\n".join("%r: %s vs %s" % (texts[i], got[i], want[i]) for i in bad[:5]))


def llamacpp(tmp, ids, gen):
    f_ids = os.path.join(tmp, "ids.json")
    with open(f_ids, "w") as f:
        json.dump(ids, f)
    script, env = llamacpp_env(tmp, IDS=f_ids, GEN=str(gen))
    f_out = env["OUT"]
    r = subprocess.run(["node", script], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    with open(f_out) as f:
        return json.load(f)


def kvtrace(tmp, ids, gen, compute="float"):
    toks, out = os.path.join(tmp, "t.json"), os.path.join(tmp, "kv%d_%d_%s.h5" % (len(ids), gen, compute))
    with open(toks, "w") as f:
        json.dump(ids, f)
    subprocess.run([KVTRACE, "capture", "--model", GGUF, "--tokens", toks, "--generate", str(gen), "--logits",
                    "--attention", "none", "--record", "keys,values", "--threads", "1", "--quiet", "--force",
                    "--compute", compute, "-o", out], check=True, capture_output=True)
    with h5py.File(out, "r") as f:
        logits, tokens = f["logits"][()].astype(np.float64), f["tokens"][()].tolist()
    m = logits.max(1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(1, keepdims=True)), tokens[len(ids):]


def int8_check(tmp, ids, T, ours, theirs, want):
    """capture --compute int8 (docs/capture.md#compute-int8: the rows rounded to 8 bits per block of 32, as
    llama.cpp rounds them) against llama.cpp, within the float path's tolerances; both distances printed
    (tests/real/test_compute_int8.py checks the path itself)."""
    lp8, gen8 = kvtrace(tmp, ids, 32, "int8")
    ours8 = np.array([lp8[i, ids[i + 1]] for i in range(T - 1)])
    d8, d = np.abs(ours8 - theirs), np.abs(ours - theirs)
    moved = np.abs(ours8 - ours)
    first8 = next((i for i, (a, b) in enumerate(zip(gen8, want)) if a != b), None)
    print("# T %d: --compute int8: |log p(next) kvtrace - llama.cpp|: mean %.4f, p99 %.4f, max %.4f nats (float path: "
          "mean %.4f, max %.4f); int8 against float: mean %.4f, max %.4f; greedy 32 tokens: %s" % (
              T, d8.mean(), np.quantile(d8, 0.99), d8.max(), d.mean(), d.max(), moved.mean(), moved.max(),
              "identical" if first8 is None else "first difference at %d" % first8))
    check(d8.mean() <= MEAN_TOL and d8.max() <= MAX_TOL, "T %d: --compute int8: every prompt token's next-token "
          "log-probability as llama.cpp's within %g nats on average, %g at worst" % (T, MEAN_TOL, MAX_TOL),
          "mean %.4f (float path %.4f) max %.4f" % (d8.mean(), d.mean(), d8.max()))


def main():
    if not LLAMACPP:   # run_all could not install node-llama-cpp: one line saying why (tests/lib/real_setup.sh)
        check(False, "llama.cpp (node-llama-cpp) is installed", os.environ.get("KVTRACE_LLAMACPP_WHY", "KVTRACE_LLAMACPP "
                                                                                 "is not set"))
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_check(tmp)
        for n in (4, 28):
            ids = prompt_ids(n)
            lc = llamacpp(tmp, ids, 32)
            lp, gen = kvtrace(tmp, ids, 32)
            T = len(ids)
            ours = np.array([lp[i, ids[i + 1]] for i in range(T - 1)])
            theirs = np.array(lc["logp_next"], dtype=np.float64)
            d = np.abs(ours - theirs)
            top2 = np.sort(lp[:T - 1], axis=1)[:, -2:]
            clear = (top2[:, 1] - top2[:, 0]) > GAP
            argmax_same = np.array(lc["top"]) == lp[:T - 1].argmax(1)
            print("# T %d: |log p(next) kvtrace - llama.cpp|: mean %.4f, p99 %.4f, max %.4f nats; argmax the same at "
                  "%d of %d positions (%d of the %d with a top-2 gap over %g)" % (
                      T, d.mean(), np.quantile(d, 0.99), d.max(), argmax_same.sum(), T - 1, argmax_same[clear].sum(),
                      clear.sum(), GAP))
            check(d.mean() <= MEAN_TOL and d.max() <= MAX_TOL, "T %d: every prompt token's next-token log-probability "
                  "as llama.cpp's within %g nats on average, %g at worst" % (T, MEAN_TOL, MAX_TOL),
                  "mean %.4f max %.4f" % (d.mean(), d.max()))
            check(argmax_same[clear].all(), "T %d: the same next-token argmax wherever the top-2 gap is over %g nats"
                  % (T, GAP))
            want = lc["greedy"]
            first = next((i for i, (a, b) in enumerate(zip(gen, want)) if a != b), None)
            print("# T %d: greedy 32 tokens: %s" % (T, "identical" if first is None else "first difference at %d"
                                                  % first))
            check(len(gen) == 32 and first is None, "T %d: greedy continuation of 32 tokens identical to llama.cpp's"
                  % T, "%s vs %s" % (gen, want))
            int8_check(tmp, ids, T, ours, theirs, want)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
