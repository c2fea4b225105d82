"""capture end to end on stories260K: the golden reference values, tokenization,
greedy continuation, chunk-size invariance, llama2.c == GGUF, full attention,
log-probabilities, f16 storage, and bad inputs. TAP output.

Reference: $KVTRACE_MODEL_DIR/stories260K.golden.json, which tests/run_all.sh
makes with tests/lib/testmodels.py (an independent float64 forward pass and
SentencePiece encoder in numpy), as it makes derived/stories260K.bin and
tok512.bin. Tolerance |got - ref| <= abs + rel * |ref|.
Run by tests/run_all.sh with KVTRACE (the binary) and KVTRACE_MODEL_DIR set."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, close, finish, skip  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
MODELS = os.environ.get("KVTRACE_MODEL_DIR", "")
GGUF = os.path.join(MODELS, "stories260K.gguf")
BIN = os.path.join(MODELS, "derived", "stories260K.bin")
TOK = os.path.join(MODELS, "derived", "tok512.bin")
GOLDEN = os.path.join(MODELS, "stories260K.golden.json")


def run(*args):
    return subprocess.run([KVTRACE, *args], capture_output=True, text=True)


def capture(out, *args):
    r = run("capture", "--quiet", "-o", out, *args)
    if r.returncode != 0:
        raise RuntimeError("capture %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr.strip()))
    return h5py.File(out, "r")


def main():
    if not MODELS:
        skip("capture on stories260K against the golden values", NO_MODEL)
        return finish()
    gold = json.load(open(GOLDEN))
    tmp = tempfile.mkdtemp(prefix="kvtrace-capture-")
    try:
        golden_forward(tmp, gold)
        tokenization_and_greedy(tmp, gold)
        chunk_invariance(tmp)
        llama2c_equals_gguf(tmp)
        attention_and_logprobs(tmp)
        bad_inputs(tmp)
    finally:
        shutil.rmtree(tmp)
    return finish()


def golden_forward(tmp, gold):
    fwd = gold["forward"]
    toks = os.path.join(tmp, "fwd.tokens")
    with open(toks, "w") as f:
        f.write(json.dumps(fwd["tokens"]))
    for chunk in ("3", "8"):
        with capture(os.path.join(tmp, "fwd%s.h5" % chunk), "--model", GGUF, "--tokens", toks, "--logits",
                     "--chunk", chunk) as t:
            ref = lambda k: np.array(fwd[k]["data"]).reshape(fwd[k]["shape"])
            check(list(t["tokens"][:]) == fwd["tokens"], "golden tokens recorded (chunk %s)" % chunk)
            close("logits vs golden (chunk %s)" % chunk, t["logits"][:], ref("logits"), 1e-4, 1e-4)
            close("keys vs golden (chunk %s)" % chunk, t["keys"][:], ref("keys"), 1e-4, 1e-4)
            close("queries vs golden (chunk %s)" % chunk, t["queries"][:], ref("queries"), 1e-4, 1e-4)
            close("values vs golden (chunk %s)" % chunk, t["values"][:], ref("values"), 1e-4, 1e-4)
            close("colsum vs golden (chunk %s)" % chunk, t["attention/colsum"][:], ref("attention_colsum"), 1e-5, 1e-4)


def tokenization_and_greedy(tmp, gold):
    tk = gold["tokenize"]
    with capture(os.path.join(tmp, "tok.h5"), "--model", GGUF, "--prompt", tk["text"]) as t:
        got = list(t["tokens"][:])
        check(got == tk["tokens_with_bos"], "GGUF tokenizer: --prompt encodes like the reference",
              "got %s\nref %s" % (got, tk["tokens_with_bos"]))
        check(t.attrs["prompt_len"] == len(tk["tokens_with_bos"]), "prompt_len = prompt tokens")
    g = gold["greedy_from_bos"]
    r = run("capture", "--quiet", "--print", "--model", GGUF, "--generate", str(g["n_new"]), "--chunk", "7",
            "-o", os.path.join(tmp, "greedy.h5"))
    check(r.returncode == 0, "greedy capture from BOS runs", r.stderr)
    with h5py.File(os.path.join(tmp, "greedy.h5"), "r") as t:
        got = list(t["tokens"][:])
        check(got == g["tokens"], "greedy continuation from BOS: %d tokens, token for token" % g["n_new"],
              "got %s\nref %s" % (got, g["tokens"]))
        check(t.attrs["prompt_len"] == 1 and t.attrs["n_tokens"] == 61, "BOS prompt + 60 generated")
    check(g["text"].strip() in r.stdout.strip() or r.stdout.strip().startswith(g["text"].strip()[:40]),
          "--print decodes the continuation", "stdout %r\nref %r" % (r.stdout[:120], g["text"][:120]))


PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
          "One day, she saw a big, red ball. She wanted to play with it, but it was too high. "
          "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do.")


def chunk_invariance(tmp):
    traces = {}
    for b in ("1", "3", "32", "4096"):  # 4096: the whole prompt in one chunk (B = T)
        traces[b] = capture(os.path.join(tmp, "chunk%s.h5" % b), "--model", GGUF, "--prompt", PROMPT,
                            "--generate", "12", "--chunk", b, "--logits")
    T = traces["4096"].attrs["n_tokens"]
    check(all(t.attrs["n_tokens"] == T for t in traces.values()) and traces["4096"].attrs["prompt_len"] > 64,
          "same T for B = 1, 3, 32, T (T = %d, prompt %d)" % (T, traces["4096"].attrs["prompt_len"]))
    ref = traces["4096"]
    for b in ("1", "3", "32"):
        t = traces[b]
        check(list(t["tokens"][:]) == list(ref["tokens"][:]), "B=%s: same tokens (prompt and generated)" % b)
        for k in ("keys", "values", "queries", "attention/colsum", "logits"):
            close("B=%s vs B=T: %s" % (b, k), t[k][:], ref[k][:], 1e-4, 1e-4)
    for t in traces.values():
        t.close()


def llama2c_equals_gguf(tmp):
    a = capture(os.path.join(tmp, "g.h5"), "--model", GGUF, "--prompt", PROMPT, "--generate", "5", "--chunk", "16")
    b = capture(os.path.join(tmp, "b.h5"), "--model", BIN, "--tokenizer", TOK, "--prompt", PROMPT,
                "--generate", "5", "--chunk", "16")
    check(list(a["tokens"][:]) == list(b["tokens"][:]), "llama2.c checkpoint + tokenizer: same tokens as GGUF")
    for k in ("keys", "values", "queries", "attention/colsum"):
        close("llama2.c vs GGUF: %s" % k, b[k][:], a[k][:], 1e-6, 1e-6)
    a.close()
    b.close()


def attention_and_logprobs(tmp):
    t = capture(os.path.join(tmp, "full.h5"), "--model", GGUF, "--prompt", PROMPT, "--generate", "8",
                "--chunk", "5", "--attention", "full", "--logits")
    full = t["attention/full"][:]
    T = full.shape[-1]
    check(np.allclose(full.sum(-1), 1.0, atol=1e-5), "full attention rows sum to 1")
    check(np.all(full[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0), "zero above the diagonal")
    close("colsum = column sums of full attention", t["attention/colsum"][:], full.sum(-2), 1e-5, 1e-5)
    logits = t["logits"][:].astype(np.float64)
    toks = t["tokens"][:]
    lse = logits.max(1) + np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1))
    ref = logits[np.arange(T - 1), toks[1:]] - lse[:-1]
    lp = t["logprobs"][:]
    close("logprobs = log softmax(logits)[next token]", lp[:-1], ref, 1e-4, 1e-5)
    check(np.isnan(lp[-1]), "last logprob is NaN")
    t.close()
    h = capture(os.path.join(tmp, "f16.h5"), "--model", GGUF, "--prompt", PROMPT, "--dtype", "f16")
    f = capture(os.path.join(tmp, "f32.h5"), "--model", GGUF, "--prompt", PROMPT)
    check(h["keys"].dtype == np.float16, "--dtype f16 stores float16 keys")
    close("f16 keys within half precision", h["keys"][:].astype(np.float64), f["keys"][:], 1e-4, 1e-3)
    h.close()
    f.close()
    r = run("capture", "--model", GGUF, "--prompt", PROMPT, "--attention", "full", "--max-attention-gib", "0.0000001",
            "-o", os.path.join(tmp, "big.h5"))
    check(r.returncode == 2 and "max-attention-gib" in r.stderr and not os.path.exists(os.path.join(tmp, "big.h5")),
          "--attention full above the limit is refused", r.stderr)


def bad_inputs(tmp):
    good = open(GGUF, "rb").read()
    cases = {
        "empty GGUF": b"",
        "truncated GGUF": good[: len(good) // 2],
        "truncated GGUF header": good[:100],
        "wrong magic": b"GGUX" + good[4:],
    }
    for name, data in cases.items():
        path = os.path.join(tmp, "bad.gguf")
        with open(path, "wb") as f:
            f.write(data)
        out = os.path.join(tmp, "bad.h5")
        r = run("capture", "--model", path, "--prompt", "hi", "-o", out)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 3 and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
              and not os.path.exists(out) and not [x for x in os.listdir(tmp) if ".tmp." in x],
              "%s: exit 3, one line, no trace left" % name, "rc %d: %s" % (r.returncode, r.stderr))
    toks = os.path.join(tmp, "oov.tokens")
    with open(toks, "w") as f:
        f.write("1 403 600 12")
    out = os.path.join(tmp, "oov.h5")
    r = run("capture", "--model", GGUF, "--tokens", toks, "-o", out)
    check(r.returncode == 3 and "600" in r.stderr and not os.path.exists(out),
          "token id out of range: exit 3 naming it, no trace", r.stderr)
    r = run("capture", "--model", "random:stories260k:1", "--prompt", "hi", "-o", out)
    check(r.returncode == 2 and "--tokens" in r.stderr and not os.path.exists(out),
          "random model with --prompt: usage error pointing at --tokens", r.stderr)
    r = run("capture", "--model", GGUF, "--tokens", toks, "--prompt", "x", "-o", out)
    check(r.returncode == 2, "two prompt sources: usage error", r.stderr)


if __name__ == "__main__":
    sys.exit(main())
