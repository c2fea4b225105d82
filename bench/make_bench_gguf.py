#!/usr/bin/env python3
"""GGUF files for the llama.cpp peer benchmark (bench/peer_llamacpp.mjs vs kvtrace capture).

  make_bench_gguf.py random-llama [--layers N] [--type f32|f16|q8_0|q4_0|q4_k] [--seed S] -o OUT.gguf
      a random model of Llama-3.2-1B's shape (dim 2048, 32 heads, 8 kv heads, head dim 64,
      FFN 8192, vocab 128256, tied embeddings, rope theta 500000, rms eps 1e-5): matrices
      uniform on [-a, a], a = sqrt(3 / fan_in), stored in TYPE (the token embedding too);
      norms ones, F32. Tokenizer: SentencePiece ("llama") vocabulary of 128256 tokens
      (<unk> <s> </s>, the 256 byte tokens, then "<unusedN>").
  make_bench_gguf.py convert --type f32|f16|q8_0|q4_0|q4_k IN.gguf -o OUT.gguf
      IN.gguf rewritten with every quantised (and 16-bit, for f32) matrix dequantised and
      stored as TYPE (a quantised TYPE: quantised again from those values); 1-D tensors as F32;
      all metadata copied (general.file_type updated).

Runs with the gguf package from PyPI (GGUFWriter, gguf.quants); gguf.quants has no Q4_K
quantizer, so one is here (quantize_q4_k, ggml's block layout), checked against
gguf.quants.dequantize by `make_bench_gguf.py selftest`.
"""
import argparse
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import quants

QK_K = 256

TYPES = {"f32": QT.F32, "f16": QT.F16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0, "q4_k": QT.Q4_K}
FILE_TYPES = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
              "q4_k": gguf.LlamaFileType.MOSTLY_Q4_K_M}


# ---------------------------------------------------------------- Q4_K quantizer
def quantize_q4_k(x):
    """Q4_K blocks of x (rows of a multiple of 256 floats) as uint8 [rows, cols/256*144].

    ggml's block_q4_K: f16 d, f16 dmin, 12 bytes of 6-bit sub-block scales and mins, 128
    bytes of 4-bit quants; element = d*sc[j]*q - dmin*m[j] for sub-block j (32 elements).
    Sub-block scale/min from its range (min clamped to <= 0), quantized against the block's
    largest ones with 6 bits, then each q rounded against the final (f16, 6-bit) scales.
    """
    x = np.asarray(x, dtype=np.float32)
    shape = x.shape
    if shape[-1] % QK_K:
        raise ValueError(f"Q4_K needs rows of a multiple of {QK_K}, got {shape[-1]}")
    nb = x.size // QK_K
    xb = x.reshape(nb, 8, 32)
    mn = np.minimum(xb.min(axis=-1), 0.0)                 # [nb, 8]
    mx = xb.max(axis=-1)
    scale = (mx - mn) / 15.0                              # sub-block step
    minv = -mn                                            # >= 0
    d = (scale.max(axis=-1) / 63.0).astype(np.float16)    # [nb]
    dmin = (minv.max(axis=-1) / 63.0).astype(np.float16)
    df = d.astype(np.float32)[:, None]
    dminf = dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(scale / df), 0)
        m = np.where(dminf > 0, np.rint(minv / dminf), 0)
    sc = np.clip(sc, 0, 63).astype(np.uint8)
    m = np.clip(m, 0, 63).astype(np.uint8)
    step = (df * sc.astype(np.float32))[:, :, None]       # [nb, 8, 1]
    off = (dminf * m.astype(np.float32))[:, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step > 0, np.rint((xb + off) / step), 0)
    q = np.clip(q, 0, 15).astype(np.uint8)                # [nb, 8, 32]
    # scales: bytes 0-3 sc[0..3] | (sc[4..7]>>4)<<6, 4-7 m[0..3] | (m[4..7]>>4)<<6,
    # 8-11 (sc[4..7]&15) | (m[4..7]&15)<<4
    s = np.empty((nb, 12), dtype=np.uint8)
    s[:, 0:4] = (sc[:, 0:4] & 0x3F) | ((sc[:, 4:8] >> 4) << 6)
    s[:, 4:8] = (m[:, 0:4] & 0x3F) | ((m[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    # quants: 4 groups of 32 bytes; low nibble sub-block 2g, high nibble sub-block 2g+1
    qq = q.reshape(nb, 4, 2, 32)
    qs = (qq[:, :, 0, :] | (qq[:, :, 1, :] << 4)).reshape(nb, 128)
    out = np.concatenate([d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8), s, qs], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 144)


def quantize(x, qtype):
    if qtype == QT.Q4_K:
        return quantize_q4_k(x)
    return quants.quantize(x, qtype)


def selftest():
    rng = np.random.default_rng(0)
    ok = True
    for name, x in [("uniform", rng.uniform(-1, 1, (64, 512))), ("positive", rng.uniform(0.5, 2, (8, 256))),
                    ("normal", rng.standard_normal((32, 1024)) * 0.02), ("zeros", np.zeros((2, 256)))]:
        x = x.astype(np.float32)
        b = quantize_q4_k(x)
        y = quants.dequantize(b, QT.Q4_K)
        assert y.shape == x.shape, (y.shape, x.shape)
        xb = x.reshape(-1, 32)
        rng_sub = (xb.max(1) - np.minimum(xb.min(1), 0)).reshape(-1, 1)
        err = np.abs(y - x).reshape(-1, 32)
        # per element: half a step of 4 bits plus the 6-bit scale/min rounding
        rel = float((err / np.maximum(rng_sub, 1e-30)).max())
        rms = float(np.sqrt(np.mean((y - x) ** 2)) / max(float(np.sqrt(np.mean(x ** 2))), 1e-30))
        good = rel < 0.12 and (name == "zeros" or rms < 0.1)
        ok &= good
        print(f"q4_k {name}: max err / sub-block range {rel:.4f}, rms rel err {rms:.4f} {'ok' if good else 'BAD'}")
    for t in ("q8_0", "q4_0"):
        x = rng.uniform(-1, 1, (4, 512)).astype(np.float32)
        y = quants.dequantize(quantize(x, TYPES[t]), TYPES[t])
        print(f"{t}: max abs err {float(np.abs(y - x).max()):.4f}")
    return 0 if ok else 1


# ---------------------------------------------------------------- random llama
def random_matrix(rng, rows, cols, qtype, chunk_rows=4096):
    """uniform [-a, a], a = sqrt(3/cols) (cols = fan_in), quantized in row chunks."""
    a = np.float32(np.sqrt(3.0 / cols))
    parts = []
    for r0 in range(0, rows, chunk_rows):
        r = min(chunk_rows, rows - r0)
        w = rng.random((r, cols), dtype=np.float32)
        w *= 2 * a
        w -= a
        parts.append(quantize(w, qtype) if qtype not in (QT.F32,) else w)
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def random_llama(args):
    dim, n_head, n_kv, hd, ffn, vocab = 2048, 32, 8, 64, 8192, 128256
    qtype = TYPES[args.type]
    rng = np.random.default_rng(args.seed)
    w = gguf.GGUFWriter(args.output, "llama")
    w.add_name(f"random-llama-3.2-1b-shape-{args.layers}l-{args.type}")
    w.add_context_length(131072)
    w.add_embedding_length(dim)
    w.add_block_count(args.layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(FILE_TYPES[args.type])
    # SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, <unusedN> fill
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    ttypes = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    n_fill = vocab - len(toks)
    toks += [f"<unused{i}>" for i in range(n_fill)]
    ttypes += [gguf.TokenType.NORMAL] * n_fill
    scores = [0.0] * len(toks)
    for i in range(len(toks)):
        if ttypes[i] == gguf.TokenType.NORMAL:
            scores[i] = -float(i)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types([int(t) for t in ttypes])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def mat(name, rows, cols):
        arr = random_matrix(rng, rows, cols, qtype)
        if qtype in (QT.F32, QT.F16):
            arr = arr.astype(np.float32 if qtype == QT.F32 else np.float16, copy=False)
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)

    ones = np.ones(dim, dtype=np.float32)
    mat("token_embd.weight", vocab, dim)           # tied: no output.weight
    w.add_tensor("output_norm.weight", ones)
    for i in range(args.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        mat(f"blk.{i}.attn_q.weight", n_head * hd, dim)
        mat(f"blk.{i}.attn_k.weight", n_kv * hd, dim)
        mat(f"blk.{i}.attn_v.weight", n_kv * hd, dim)
        mat(f"blk.{i}.attn_output.weight", dim, n_head * hd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        mat(f"blk.{i}.ffn_gate.weight", ffn, dim)
        mat(f"blk.{i}.ffn_up.weight", ffn, dim)
        mat(f"blk.{i}.ffn_down.weight", dim, ffn)
    write(w)
    return 0


def write(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------- convert
def convert(args):
    qtype = TYPES[args.type]
    r = gguf.GGUFReader(args.input)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(args.output, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.alignment":
            w.data_alignment = int(f.contents())
        if name == "general.file_type":
            w.add_file_type(FILE_TYPES[args.type])
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY and len(f.types) > 1 else None
        if vtype == gguf.GGUFValueType.ARRAY and sub is None:      # empty array
            sub = gguf.GGUFValueType.INT32
        w.add_key_value(name, f.contents(), vtype, sub_type=sub)
    if "general.file_type" not in r.fields:
        w.add_file_type(FILE_TYPES[args.type])
    n_conv = 0
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))   # numpy order
        if t.tensor_type in (QT.F32,) or (t.tensor_type == QT.F16 and (qtype == QT.F16 or len(shape) == 1)):
            arr = np.asarray(t.data).reshape(shape)
            if t.tensor_type == QT.F16 and len(shape) == 1:
                arr = arr.astype(np.float32)
        else:
            arr = quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape)
            arr = arr.astype(np.float16 if (qtype == QT.F16 and len(shape) > 1) else np.float32)
            n_conv += 1
        if len(shape) > 1 and qtype not in (QT.F32, QT.F16):  # requantised from the float values
            w.add_tensor(t.name, quantize(arr.astype(np.float32), qtype), raw_dtype=qtype)
            continue
        w.add_tensor(t.name, np.ascontiguousarray(arr))
    write(w)
    print(f"make_bench_gguf.py: {args.output}: {len(r.tensors)} tensors, {n_conv} dequantised to "
          f"{args.type}", file=sys.stderr)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = p.add_subparsers(dest="cmd", required=True)
    a = sp.add_parser("random-llama")
    a.add_argument("--layers", type=int, default=4)
    a.add_argument("--type", choices=sorted(TYPES), default="f32")
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("-o", "--output", required=True)
    c = sp.add_parser("convert")
    c.add_argument("--type", choices=sorted(TYPES), required=True)
    c.add_argument("input")
    c.add_argument("-o", "--output", required=True)
    sp.add_parser("selftest")
    args = p.parse_args()
    if args.cmd == "random-llama":
        if args.layers < 1:
            sys.exit("make_bench_gguf.py: --layers wants >= 1")
        return random_llama(args)
    if args.cmd == "convert":
        return convert(args)
    return selftest()


if __name__ == "__main__":
    sys.exit(main())
