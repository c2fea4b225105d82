#!/usr/bin/env python3
"""Seed corpus for fuzz_gguf: a few small valid GGUF files.

    python3 tests/fuzz_gguf/make_seeds.py DIR

tiny_f32.gguf   a llama (dim 8, 2 layers, 2 heads, 1 kv head, ffn 12, vocab 16) with an
                SentencePiece vocabulary: loads as a model
tiny_f16.gguf   the same in GGUF v2, F16 matrices, alignment 64, tied output, gpt2 vocabulary
qwen2_bf16.gguf a qwen2 (QKV biases) with BF16 matrices; qwen3.gguf a qwen3 (q/k norms)
llama_q8_0_rope_freqs.gguf  a dim-32 llama with Q8_0 matrices and rope_freqs.weight
kv_types.gguf   no tensors; one key of every value type and an array of every element type
q4k.gguf        one Q4_K tensor (parses; decoded)
"""
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from ggufio import ARR, BOOL, F32, F64, I8, I16, I32, I64, STR, U8, U16, U32, U64, gguf  # noqa: E402


def tiny(f16=False, version=3, align=32, tied=False, vocab="llama", arch="llama", mat=None, dim=8):
    """mat: the ggml type of the matrices (default F16 when f16, else F32); Q8_0
    quantises (dim must be a multiple of 32). qwen2 adds biases, qwen3 q/k norms;
    a llama with dim 32 carries rope_freqs.weight."""
    ffn, L, H, K, V = 12 if dim == 8 else 64, 2, 2, 1, 16
    D = dim // H
    a = arch + "."
    kvs = [("general.architecture", STR, arch), ("general.name", STR, "tiny"),
           (a + "embedding_length", U32, dim), (a + "feed_forward_length", U32, ffn),
           (a + "block_count", U32, L), (a + "attention.head_count", U32, H),
           (a + "attention.head_count_kv", U32, K), (a + "rope.dimension_count", U32, D),
           (a + "context_length", U32, 64), (a + "attention.layer_norm_rms_epsilon", F32, 1e-5),
           (a + "rope.freq_base", F32, 10000.0)]
    if align != 32:
        kvs.append(("general.alignment", U32, align))
    pieces = ["<unk>", "<s>", "</s>"] + ["\u2581" + chr(ord("a") + i) for i in range(3, V)]
    kvs += [("tokenizer.ggml.model", STR, vocab), ("tokenizer.ggml.tokens", ARR, (STR, pieces)),
            ("tokenizer.ggml.scores", ARR, (F32, [-float(i) for i in range(V)])),
            ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3] + [1] * (V - 3))),
            ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
            ("tokenizer.ggml.add_bos_token", BOOL, 1)]

    mt = mat if mat is not None else (1 if f16 else 0)

    def t(name, dims, norm=False):
        n = math.prod(dims)
        vals = [(1.0 if norm else 0.0) + 0.5 * math.sin(0.7 * j) for j in range(n)]
        if len(dims) == 2 and mt == 1:
            return (name, dims, 1, struct.pack("<%de" % n, *vals))
        if len(dims) == 2 and mt == 30:
            return (name, dims, 30, b"".join(struct.pack("<f", v)[2:] for v in vals))
        if len(dims) == 2 and mt == 8 and dims[0] % 32 == 0:
            out = b""
            for b in range(n // 32):
                blk = vals[32 * b: 32 * b + 32]
                d = max(abs(v) for v in blk) / 127 or 1.0
                out += struct.pack("<e", d) + bytes((round(v / d) & 0xFF) for v in blk)
            return (name, dims, 8, out)
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
        if arch == "qwen2":
            ts += [t(p + "attn_q.bias", [H * D]), t(p + "attn_k.bias", [K * D]), t(p + "attn_v.bias", [K * D])]
        if arch == "qwen3":
            ts += [t(p + "attn_q_norm.weight", [D], True), t(p + "attn_k_norm.weight", [D], True)]
    if arch == "llama" and dim == 32:
        ts.append(t("rope_freqs.weight", [D // 2], True))
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
             "qwen2_bf16.gguf": tiny(arch="qwen2", mat=30, vocab="gpt2"),
             "qwen3.gguf": tiny(arch="qwen3"),
             "llama_q8_0_rope_freqs.gguf": tiny(mat=8, dim=32),
             "q4k.gguf": gguf([("general.architecture", STR, "llama")],
                              [("blk.0.attn_q.weight", [256], 12, bytes(range(144)))])}
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
