"""Prompts as text in capture and fidelity for every tokenizer, and the trace's /prompt_text
(docs/tokenize.md#in-capture-and-fidelity).

- Qwen3- and Llama3-shaped Hugging Face directories (tiny random weights, the real vocabulary
  sizes 151936 and 128256, the real tokenizer.json fetched by tests/lib/fetch_tokenizers.sh:
  the run fails with its line when they cannot be had): `capture --prompt` and `--prompt-file`
  on strings of the tokenizer corpus give /tokens equal to the reference fixture ids
  (tests/tokenizers/fixtures/, made by @lenml/tokenizers, not by kvtrace; Llama 3's BOS
  template included), /prompt_text equal to the text byte for byte, prompt_len right;
  `fidelity --prompt` records the same in its full.h5.
- A tiny hand-made byte-level tokenizer.json (no download: runs on a fresh clone offline), ids
  worked out by hand: the same checks, --generate (prompt_text is the prompt only), --tokens and
  BOS alone (no /prompt_text), sim and analyze on such a trace, info showing it.
- Refusals, one line, nothing left behind: a --prompt-file that is not UTF-8 (exit 3, naming the
  offset), one holding a NUL byte (exit 3); the reader refuses a /prompt_text that is not UTF-8
  or not a string (exit 3), and accepts one an h5py script wrote.
    /usr/bin/python3 tests/scripts/test_prompt_text.py [BUILD]"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import hfmodel  # noqa: E402
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
FIXTURES = os.path.join(ROOT, "tests", "tokenizers", "fixtures")


def run(*args):
    r = subprocess.run([KV, *args], capture_output=True)
    r.stdout, r.stderr = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    return r


def load(name):
    with gzip.open(os.path.join(FIXTURES, name + ".json.gz"), "rt", encoding="utf-8") as f:
        return json.load(f)


def one_line(r):
    return len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("kvtrace: error: ")


def leftovers(d):
    return [n for n in os.listdir(d) if ".tmp." in n]


def tiny_cfg(arch, vocab, **kw):
    cfg = {"model_type": arch, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": vocab, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": True}
    cfg.update(kw)
    return cfg


def model_dir(d, cfg, tokenizer_json, **feats):
    hfmodel.write_hf_dir(d, cfg, hfmodel.random_weights(cfg, 16, **feats))
    if isinstance(tokenizer_json, str):
        shutil.copy(tokenizer_json, os.path.join(d, "tokenizer.json"))
    else:
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tokenizer_json, f)
    return d


def trace_holds(what, path, text, ids, generated=0):
    """/tokens[:prompt_len] = ids, /prompt_text = text (bytes), T = prompt + generated."""
    if not os.path.exists(path):
        check(False, what, "no trace at %s" % path)
        return
    with h5py.File(path, "r") as f:
        P, T = int(f.attrs["prompt_len"]), int(f.attrs["n_tokens"])
        got = [int(x) for x in f["tokens"][:P]]
        pt = f["prompt_text"][()] if "prompt_text" in f else None
        desc = f["prompt_text"].attrs.get("description", "") if pt is not None else ""
        shape = f["prompt_text"].shape if pt is not None else None
    want = text.encode("utf-8") if isinstance(text, str) else text
    check(got == ids and P == len(ids) and T == P + generated and pt == want and shape == () and desc,
          what, "prompt_len %d T %d\n got %s\nwant %s\ntext %r\nwant %r" % (P, T, got[:40], ids[:40], pt, want))


def pick(strings, fx, cond, n):
    """The first n corpus strings (with the fixture's ids) meeting cond, and short enough."""
    out = []
    for i, s in enumerate(strings):
        if "\0" not in s and s and not s.startswith("-") and cond(s) and len(fx["ids"][i]) <= 120:
            out.append((s, fx["ids"][i]))
        if len(out) == n:
            break
    return out


def fetch(ids):
    r = subprocess.run([os.path.join(ROOT, "tests", "lib", "fetch_tokenizers.sh"), *ids], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return {ln.split(" ", 1)[0]: os.path.join(ln.split(" ", 1)[1], "tokenizer.json") for ln in r.stdout.splitlines()}, None


def real(tmp, strings):
    """Qwen3- and Llama3-shaped directories with the real tokenizers against the fixtures."""
    paths, err = fetch(["qwen3", "llama3_1"])
    if not check(paths is not None, "the qwen3 and llama3_1 tokenizer.json files can be had", err):
        return
    shapes = [("qwen3", tiny_cfg("qwen3", 151936, head_dim=16), dict(qk_norm=True)),
              ("llama3_1", tiny_cfg("llama", 128256), {})]
    for tid, cfg, feats in shapes:
        fx = load(tid)
        d = model_dir(os.path.join(tmp, tid), cfg, paths[tid], **feats)
        cases = (pick(strings, fx, lambda s: s.isascii() and " " in s, 1) +
                 pick(strings, fx, lambda s: any(0x4E00 <= ord(c) <= 0x9FFF for c in s), 1) +
                 pick(strings, fx, lambda s: any(ord(c) > 0x1F000 for c in s), 1))
        for k, (text, ids) in enumerate(cases):
            out = os.path.join(tmp, "%s-%d.h5" % (tid, k))
            r = run("capture", "--quiet", "--model", d, "--prompt", text, "-o", out)
            check(r.returncode == 0, "%s: capture --prompt %r runs" % (tid, text[:30]), r.stderr)
            trace_holds("%s: --prompt %r: /tokens = the reference ids, /prompt_text = the text" % (tid, text[:30]),
                        out, text, ids)
        text, ids = pick(strings, fx, lambda s: "\n" in s, 1)[0]
        pf = os.path.join(tmp, tid + ".txt")
        with open(pf, "wb") as f:
            f.write(text.encode("utf-8"))
        out = os.path.join(tmp, tid + "-file.h5")
        r = run("capture", "--quiet", "--model", d, "--prompt-file", pf, "--generate", "2", "-o", out)
        check(r.returncode == 0, "%s: capture --prompt-file runs" % tid, r.stderr)
        trace_holds("%s: --prompt-file (newlines): the reference ids, the file's bytes, 2 generated" % tid,
                    out, text, ids, 2)
        if tid == "llama3_1":
            with h5py.File(out, "r") as f:
                check(int(f["tokens"][0]) == 128000, "llama3_1: the BOS template: /tokens starts with 128000")
        else:
            fdir = os.path.join(tmp, "fid")
            r = run("fidelity", "--quiet", "--model", d, "--prompt", cases[1][0], "--generate", "3",
                    "--policies", "h2o", "--budgets", "4", "-o", fdir)
            check(r.returncode == 0, "qwen3: fidelity --prompt runs", r.stderr)
            trace_holds("qwen3: fidelity's full.h5: the reference ids and /prompt_text", os.path.join(fdir, "full.h5"),
                        cases[1][0], cases[1][1], 3)


def byte_char(b):
    """GPT-2's printable character for byte b, computed independently."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    return chr(b) if b in keep else chr(256 + [x for x in range(256) if x not in keep].index(b))


def handmade():
    """Bytes are ids 0-255 (GPT-2's byte map), merges h e, l l, he ll, Ġ w, hell o; <|bos|> 261 by template."""
    vocab = {byte_char(b): b for b in range(256)}
    for i, piece in enumerate(["he", "ll", "hell", "\u0120w", "hello", "<|bos|>"]):
        vocab[piece] = 256 + i
    return {"model": {"type": "BPE", "byte_fallback": False, "vocab": vocab,
                      "merges": ["h e", "l l", "he ll", "\u0120 w", "hell o"]},
            "added_tokens": [{"id": 261, "content": "<|bos|>", "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}],
                               "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [261]}}},
            "decoder": {"type": "ByteLevel"}}


def offline(tmp):
    d = model_dir(os.path.join(tmp, "tiny"), tiny_cfg("llama", 262), handmade())
    # "hello world": hello (260), then " world" = Ġw (259) o r l d; BOS 261 first
    ids = [261, 260, 259, 111, 114, 108, 100]
    out = os.path.join(tmp, "tiny.h5")
    r = run("capture", "--quiet", "--model", d, "--prompt", "hello world", "-o", out)
    check(r.returncode == 0, "hand-made byte-level tokenizer.json: capture --prompt runs", r.stderr)
    trace_holds("hand-made: /tokens = the ids worked out by hand, /prompt_text = the text", out, "hello world", ids)
    # "é" is bytes C3 A9: two byte tokens (195, 169); a trailing newline stays in the text
    text = "hello \u00e9\n"
    pf = os.path.join(tmp, "tiny.txt")
    with open(pf, "wb") as f:
        f.write(text.encode("utf-8"))
    out = os.path.join(tmp, "tiny-file.h5")
    r = run("capture", "--quiet", "--model", d, "--prompt-file", pf, "--generate", "4", "-o", out)
    check(r.returncode == 0, "hand-made: capture --prompt-file --generate 4 runs", r.stderr)
    trace_holds("hand-made: --prompt-file: ids by hand, the file's bytes (the newline too), 4 generated",
                out, text, [261, 260, 32, 195, 169, 10], 4)
    r = run("info", out)
    check(r.returncode == 0 and 'prompt text   9 bytes: "hello \u00e9\\n"' in r.stdout, "info shows the prompt text",
          r.stdout + r.stderr)
    sim, ana = os.path.join(tmp, "sim"), os.path.join(tmp, "ana")
    r = run("sim", "--quiet", out, "--policies", "h2o", "--budgets", "4", "--chunk", "4", "-o", sim)
    check(r.returncode == 0, "sim reads a trace with /prompt_text", r.stderr)
    r = run("analyze", "--quiet", out, "-o", ana)
    check(r.returncode == 0, "analyze reads a trace with /prompt_text", r.stderr)
    toks = os.path.join(tmp, "ids.txt")
    with open(toks, "w") as f:
        f.write("261 260 259")
    for what, args in (("--tokens", ["--tokens", toks]), ("BOS alone", [])):
        out = os.path.join(tmp, "noprompt.h5")
        r = run("capture", "--quiet", "--force", "--model", d, *args, "-o", out)
        with h5py.File(out, "r") as f:
            check(r.returncode == 0 and "prompt_text" not in f, "%s: no /prompt_text" % what, r.stderr)
    return d


def refusals(tmp, d):
    for what, data, needle in (("not UTF-8", b"hello \xff world", "byte offset 6 (byte 0xFF)"),
                               ("a truncated sequence", b"ok \xe4\xbd", "byte offset 3 (byte 0xE4)"),
                               ("a NUL byte", b"hel\x00lo", "NUL byte at byte offset 3")):
        od = tempfile.mkdtemp(dir=tmp)
        pf = os.path.join(od, "p.txt")
        with open(pf, "wb") as f:
            f.write(data)
        r = run("capture", "--quiet", "--model", d, "--prompt-file", pf, "-o", os.path.join(od, "t.h5"))
        check(r.returncode == 3 and pf in r.stderr and needle in r.stderr and one_line(r) and
              sorted(os.listdir(od)) == ["p.txt"], "a --prompt-file with %s: exit 3, one line, no trace" % what,
              "rc %d %s %s" % (r.returncode, r.stderr, os.listdir(od)))
    r = run("capture", "--quiet", "--model", d, "--prompt", "a\xffb".encode("latin-1").decode("utf-8", "surrogateescape"),
            "-o", os.path.join(tmp, "arg.h5"))
    check(r.returncode == 2 and "--prompt: the prompt is not valid UTF-8 at byte offset 1" in r.stderr and one_line(r)
          and not os.path.exists(os.path.join(tmp, "arg.h5")), "--prompt that is not UTF-8: exit 2, one line", r.stderr)
    src = os.path.join(tmp, "tiny.h5")
    for what, write, needle in (
            ("not UTF-8", lambda f: f.create_dataset("prompt_text", data=b"ab\xffc", dtype=h5py.string_dtype("ascii")),
             "/prompt_text is not valid UTF-8 at byte offset 2 (byte 0xFF)"),
            ("not a string", lambda f: f.create_dataset("prompt_text", data=np.arange(3)),
             "/prompt_text must be one (scalar) string"),
            ("two strings", lambda f: f.create_dataset("prompt_text", data=["a", "b"], dtype=h5py.string_dtype()),
             "/prompt_text must be one (scalar) string")):
        p = os.path.join(tmp, "bad.h5")
        shutil.copy(src, p)
        with h5py.File(p, "a") as f:
            del f["prompt_text"]
            write(f)
        r = run("info", p)
        check(r.returncode == 3 and needle in r.stderr and one_line(r), "the reader refuses a /prompt_text %s" % what,
              r.stderr)
    p = os.path.join(tmp, "h5py.h5")
    shutil.copy(src, p)
    with h5py.File(p, "a") as f:
        del f["prompt_text"]
        f["prompt_text"] = "written by h5py: \u4f60\u597d"
    r = run("info", p)
    check(r.returncode == 0 and "written by h5py: \u4f60\u597d" in r.stdout, "an h5py-written /prompt_text is read",
          r.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-prompt-text-")
    try:
        d = offline(tmp)
        refusals(tmp, d)
        real(tmp, load("corpus")["strings"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
