"""`kvtrace tokenize --tokenizer FILE.gguf` for byte-level (gpt2) GGUF tokenizers
(docs/tokenize.md#gguf-files-tokenizerggmlmodel--gpt2): a GGUF
written here (tests/lib/ggufio.py) with the tokens, token types and merges of a real
tokenizer.json (Llama 3.1: tokenizer.ggml.pre llama-bpe, add_bos_token; Qwen 3: qwen2, no BOS)
must give the reference fixture ids (tests/tokenizers/fixtures/) on the whole corpus, with
and without special tokens; an unknown tokenizer.ggml.pre is refused by name (exit 3)."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ggufio as G  # noqa: E402
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "tokenizers", "fixtures")
KVTRACE = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
CASES = {"llama3_1": ("llama-bpe", True), "qwen3": ("qwen2", False)}


def load(name):
    with gzip.open(os.path.join(FIXTURES, name + ".json.gz"), "rt", encoding="utf-8") as f:
        return json.load(f)


def gguf_of(tj, pre, add_bos, path):
    """The tokenizer.json's vocabulary as GGUF tokenizer.ggml.* metadata (as llama.cpp's converter)."""
    vocab = dict(tj["model"]["vocab"])
    types = {}
    for a in tj["added_tokens"]:
        vocab[a["content"]] = a["id"]
        types[a["id"]] = 3 if a["special"] else 4  # CONTROL / USER_DEFINED
    n = max(vocab.values()) + 1
    tokens = ["[PAD%d]" % i for i in range(n)]
    for piece, i in vocab.items():
        tokens[i] = piece
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    bos = next((a["id"] for a in tj["added_tokens"] if a["content"] in ("<|begin_of_text|>", "<|endoftext|>")))
    kvs = [("general.architecture", G.STR, "llama"),
           ("tokenizer.ggml.model", G.STR, "gpt2"),
           ("tokenizer.ggml.pre", G.STR, pre),
           ("tokenizer.ggml.tokens", G.ARR, (G.STR, tokens)),
           ("tokenizer.ggml.token_type", G.ARR, (G.I32, [types.get(i, 1) for i in range(n)])),
           ("tokenizer.ggml.merges", G.ARR, (G.STR, merges)),
           ("tokenizer.ggml.bos_token_id", G.U32, bos),
           ("tokenizer.ggml.add_bos_token", G.BOOL, add_bos)]
    with open(path, "wb") as f:
        f.write(G.gguf(kvs, []))


def batch(tok, strings, flags):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8") as f:
        f.write("".join(json.dumps(s) + "\n" for s in strings))
        f.flush()
        r = subprocess.run([KVTRACE, "tokenize", "--tokenizer", tok, "--batch", "--file", f.name, *flags],
                           capture_output=True, text=True)
    if r.returncode:
        return None, "exit %d: %s" % (r.returncode, r.stderr.strip())
    return [json.loads(x) for x in r.stdout.split("\n")[:len(strings)]], ""


def main():
    r = subprocess.run([os.path.join(ROOT, "tests", "lib", "fetch_tokenizers.sh"), *CASES],
                       capture_output=True, text=True)
    if not check(r.returncode == 0, "the reference tokenizer.json files can be had", r.stderr.strip()):
        return finish()
    paths = {ln.split(" ", 1)[0]: os.path.join(ln.split(" ", 1)[1], "tokenizer.json") for ln in r.stdout.splitlines()}
    strings = load("corpus")["strings"]
    with tempfile.TemporaryDirectory() as d:
        for tid, (pre, add_bos) in CASES.items():
            with open(paths[tid], encoding="utf-8") as f:
                tj = json.load(f)
            fx, g = load(tid), os.path.join(d, tid + ".gguf")
            gguf_of(tj, pre, add_bos, g)
            for flags, key in (([], "ids"), (["--no-special"], "ids_nospecial")):
                got, err = batch(g, strings, flags)
                bad = [i for i in range(len(strings)) if got is None or got[i] != fx[key][i]]
                print("# %s GGUF (pre %s) %s: %d/%d match" % (tid, pre, key, len(strings) - len(bad), len(strings)))
                check(not bad, "%s GGUF (tokenizer.ggml.pre %s) %s = the reference on %d strings"
                      % (tid, pre, key, len(strings)),
                      err or "first mismatch: %r" % (strings[bad[0]],) if bad else "")
            if tid == "qwen3":
                gguf_of(tj, "no-such-pretok", False, g)
                r = subprocess.run([KVTRACE, "tokenize", "--tokenizer", g, "--text", "hi"],
                                   capture_output=True, text=True)
                check(r.returncode == 3 and "'no-such-pretok'" in r.stderr and not r.stdout
                      and len(r.stderr.strip().splitlines()) == 1,
                      "an unknown tokenizer.ggml.pre is refused by name, exit 3",
                      "exit %d: %s" % (r.returncode, r.stderr.strip()))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
