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
bytelevel_full.json  every byte a token, merges in both spellings, the Llama 3 split regex, a BOS
                template: any text encodes; bytelevel_qwen.json adds NFC, a Removed String Split and a
                normalized added token, bytelevel_strip.json ignore_merges and lstrip/rstrip
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


LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_char(b):
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    return chr(b) if b in keep else chr(256 + [x for x in range(256) if x not in keep].index(b))


def bytelevel_full(variant):
    """All 256 byte tokens (so any text encodes), merges, the Llama 3 regex, a BOS template; variants:
    'qwen' (NFC, a Removed Split, a non-special added token), 'strip' (lstrip/rstrip, ignore_merges)."""
    vocab = {byte_char(b): b for b in range(256)}
    for i, p in enumerate(["he", "ll", "hell", "\u0120w", "hello", "<|bos|>", "\u0120t", "\u0120th", "<x>"]):
        vocab[p] = 256 + i
    split = {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False}
    tok = {"version": "1.0", "added_tokens": [{"id": 261, "content": "<|bos|>", "special": True}],
           "normalizer": None,
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               split, {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [261]}}},
           "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "byte_fallback": False, "vocab": vocab,
                     "merges": ["h e", "l l", "he ll", "\u0120 w", "hell o", ["\u0120", "t"], ["\u0120t", "h"]]}}
    if variant == "qwen":
        tok["normalizer"] = {"type": "NFC"}
        tok["added_tokens"].append({"id": 264, "content": "<x>", "special": False, "normalized": True})
        tok["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Split", "pattern": {"String": "|"},
                                                         "behavior": "Removed", "invert": False})
    if variant == "strip":
        tok["model"]["ignore_merges"] = True
        tok["added_tokens"].append({"id": 264, "content": "<x>", "special": True, "lstrip": True, "rstrip": True})
    return tok


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    seeds = {"spm.json": (320, spm()), "spm_arrays.json": (300, spm(True)),
             "bytelevel.json": (110, bytelevel()),
             "bytelevel_full.json": (265, bytelevel_full("")), "bytelevel_qwen.json": (265, bytelevel_full("qwen")),
             "bytelevel_strip.json": (265, bytelevel_full("strip")),
             "wordpiece.json": (8, {"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1}}})}
    for name, (V, tok) in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(struct.pack("<H", V - 1) + json.dumps(tok, ensure_ascii=False).encode())
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
