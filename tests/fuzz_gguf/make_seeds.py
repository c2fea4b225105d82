#!/usr/bin/env python3
"""Seed corpus for fuzz_gguf: a few small valid GGUF files.

    python3 tests/fuzz_gguf/make_seeds.py DIR

tiny_f32.gguf   a llama (dim 8, 2 layers, 2 heads, 1 kv head, ffn 12, vocab 16) with an
                SentencePiece vocabulary: loads as a model
tiny_f16.gguf   the same in GGUF v2, F16 matrices, alignment 64, tied output, gpt2 vocabulary
kv_types.gguf   no tensors; one key of every value type and an array of every element type
q4k.gguf        one Q4_K tensor (parses, is not converted)
"""
import math
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
       BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, dims, ggml_type, data bytes)]."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack("<I", t) + value(t, v)
    off, blobs = 0, []
    for name, dims, gt, data in tensors:
        head += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", gt, off)
        pad = data + b"\0" * (-len(data) % align)
        blobs.append(pad)
        off += len(pad)
    head += b"\0" * (-len(head) % align)
    return head + b"".join(blobs)


def tiny(f16=False, version=3, align=32, tied=False, vocab="llama"):
    dim, ffn, L, H, K, V = 8, 12, 2, 2, 1, 16
    D = dim // H
    kvs = [("general.architecture", STR, "llama"), ("general.name", STR, "tiny"),
           ("llama.embedding_length", U32, dim), ("llama.feed_forward_length", U32, ffn),
           ("llama.block_count", U32, L), ("llama.attention.head_count", U32, H),
           ("llama.attention.head_count_kv", U32, K), ("llama.rope.dimension_count", U32, D),
           ("llama.context_length", U32, 64), ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
           ("llama.rope.freq_base", F32, 10000.0)]
    if align != 32:
        kvs.append(("general.alignment", U32, align))
    pieces = ["<unk>", "<s>", "</s>"] + ["\u2581" + chr(ord("a") + i) for i in range(3, V)]
    kvs += [("tokenizer.ggml.model", STR, vocab), ("tokenizer.ggml.tokens", ARR, (STR, pieces)),
            ("tokenizer.ggml.scores", ARR, (F32, [-float(i) for i in range(V)])),
            ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3] + [1] * (V - 3))),
            ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
            ("tokenizer.ggml.add_bos_token", BOOL, 1)]

    def t(name, dims, norm=False):
        n = math.prod(dims)
        vals = [(1.0 if norm else 0.0) + 0.5 * math.sin(0.7 * j) for j in range(n)]
        if f16 and len(dims) == 2:
            return (name, dims, 1, struct.pack("<%de" % n, *vals))
        return (name, dims, 0, struct.pack("<%df" % n, *vals))

    ts = [t("token_embd.weight", [dim, V]), t("output_norm.weight", [dim], True)]
    if not tied:
        ts.append(t("output.weight", [dim, V]))
    for l in range(L):
        p = "blk.%d." % l
        ts += [t(p + "attn_norm.weight", [dim], True), t(p + "attn_q.weight", [dim, H * D]),
               t(p + "attn_k.weight", [dim, K * D]), t(p + "attn_v.weight", [dim, K * D]),
               t(p + "attn_output.weight", [H * D, dim]), t(p + "ffn_norm.weight", [dim], True),
               t(p + "ffn_gate.weight", [dim, ffn]), t(p + "ffn_up.weight", [dim, ffn]),
               t(p + "ffn_down.weight", [ffn, dim])]
    return gguf(kvs, ts, version, align)


def kv_types():
    scalars = {U8: 200, I8: -5, U16: 60000, I16: -300, U32: 4000000000, I32: -7, F32: 1.5,
               BOOL: 1, STR: "text", U64: 2 ** 63, I64: -2 ** 40, F64: 2.5}
    kvs = [("s.%d" % t, t, v) for t, v in scalars.items()]
    kvs += [("a.%d" % t, ARR, (t, [v, v])) for t, v in scalars.items()]
    return gguf(kvs, [])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    seeds = {"tiny_f32.gguf": tiny(),
             "tiny_f16.gguf": tiny(f16=True, version=2, align=64, tied=True, vocab="gpt2"),
             "kv_types.gguf": kv_types(),
             "q4k.gguf": gguf([("general.architecture", STR, "llama")],
                              [("blk.0.attn_q.weight", [256], 12, bytes(range(144)))])}
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
