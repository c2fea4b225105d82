#!/usr/bin/env python3
"""Seed corpus for fuzz_hf_tokenizer: small tokenizer.json files shaped like
real checkpoints'. Each seed starts with two bytes, the model's vocab_size - 1
(little-endian), then the file (tests/fuzz_hf_tokenizer/fuzz_hf_tokenizer.c).

    python3 tests/fuzz_hf_tokenizer/make_seeds.py DIR

spm.json        Llama 2 / Mistral style: Metaspace, byte fallback <0x00>..<0xFF>,
                merges as "a b" strings, <unk> <s> </s>, vocab padded past the file
spm_arrays.json the same with merges as [a, b] pairs and prepend_scheme "never"
bytelevel.json  Llama 3 / Qwen style: ByteLevel inside a Sequence pre-tokenizer,
                special added tokens <|begin_of_text|> <|end_of_text|>
wordpiece.json  a WordPiece model: not read (no vocabulary, no error)
"""
import json
import os
import struct
import sys

SP = "\u2581"


def spm(arrays=False):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    pieces = [SP, "t", "h", "e", "a", "o", "n", "c", "f", "é", "th", "he", SP + "t", SP + "th",
              "the", SP + "the", "on", SP + "on", "ce", SP + "a"]
    for p in pieces:
        vocab.setdefault(p, len(vocab))
    merges = [("t", "h"), ("h", "e"), (SP, "t"), (SP + "t", "h"), ("th", "e"), (SP + "th", "e"),
              ("o", "n"), (SP, "on"), ("c", "e"), (SP, "a")]
    pre = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "never" if arrays else "first"}
    return {"version": "1.0", "added_tokens": [
        {"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True},
        {"id": 2, "content": "</s>", "special": True}],
        "normalizer": None, "pre_tokenizer": pre,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "byte_fallback": True,
                  "fuse_unk": True, "vocab": vocab,
                  "merges": [list(m) for m in merges] if arrays else ["%s %s" % m for m in merges]}}


def bytelevel():
    chars = [chr(c) for c in range(33, 127)] + ["Ġ", "Ċ", "Ġt", "Ġth", "Ġthe", "he", "in"]
    vocab = {c: i for i, c in enumerate(chars)}
    n = len(vocab)
    return {"version": "1.0", "added_tokens": [
        {"id": n, "content": "<|begin_of_text|>", "special": True},
        {"id": n + 1, "content": "<|end_of_text|>", "special": True},
        {"id": n + 2, "content": "<|user|>", "special": False}],
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated"},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}]},
        "model": {"type": "BPE", "vocab": vocab, "merges": ["Ġ t", "Ġt h", "Ġth e", "h e", "i n"]}}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    seeds = {"spm.json": (320, spm()), "spm_arrays.json": (300, spm(True)),
             "bytelevel.json": (110, bytelevel()),
             "wordpiece.json": (8, {"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1}}})}
    for name, (V, tok) in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(struct.pack("<H", V - 1) + json.dumps(tok, ensure_ascii=False).encode())
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
