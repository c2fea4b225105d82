"""ggml's quantised types kvtrace decodes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)
against the gguf package's gguf.quants.dequantize, bit for bit, TAP. Run by tests/run_all.sh with the
test venv's Python (tests/requirements.txt) and BUILD; the decoder is kvtrace's own converter table
(model/formats/ggml_types.c) driven by BUILD/tools/ggml_decode. The float32 outputs are compared as
uint32 bit patterns (the scales are finite, so no NaN; -0 and +0 count as different).

Blocks, per type: 4,096 random ones (random bytes, every F16 scale field, d, m or dmin, replaced by random
finite float16 bits of either sign); for the types gguf can quantise (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) also
1,024 blocks of gguf.quants.quantize on random floats of assorted magnitudes; then the edge cases: every
F16 scale field set to each of zero, negative zero, the subnormals 0x0001, 0x03FF and 0x8001, the largest
finite float16 (0x7BFF, 0xFBFF), 1.0 and the smallest normal (every pair where a block has two such
fields), each combined with extreme codes: each byte region besides the F16 fields (codes, high bits,
packed sub-block scales) all bits 0 or all bits 1 independently, and every region filled with 0x0F, 0xF0,
0x55, 0xAA, 0x80 or 0x7F (-128 and 127 for Q8_0's int8 codes and Q6_K's int8 scales). Last, ggml_decode
must refuse, with exit status 1, types kvtrace does not decode (IQ2_XXS, TQ1_0)."""
import itertools
import os
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

DECODE = os.path.join(os.environ.get("BUILD", "build"), "tools", "ggml_decode")
EDGE_SCALES = [0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x7BFF, 0xFBFF, 0x3C00, 0x0400]  # f16 bit patterns
CODE_FILLS = [0x0F, 0xF0, 0x55, 0xAA, 0x80, 0x7F]  # uniform fills of every non-scale region
N_RANDOM, N_QUANTIZED = 4096, 1024

# ggml's block_* structs: the byte offsets of the F16 scale fields and the other byte regions
# (offset, length) that follow from them, in block order.
LAYOUTS = {
    QT.Q4_0: ([0], [(2, 16)]),                                  # d, qs[16]
    QT.Q4_1: ([0, 2], [(4, 16)]),                               # d, m, qs[16]
    QT.Q5_0: ([0], [(2, 4), (6, 16)]),                          # d, qh[4], qs[16]
    QT.Q5_1: ([0, 2], [(4, 4), (8, 16)]),                       # d, m, qh[4], qs[16]
    QT.Q8_0: ([0], [(2, 32)]),                                  # d, int8 qs[32]
    QT.Q2_K: ([80, 82], [(0, 16), (16, 64)]),                   # scales[16], qs[64], d, dmin
    QT.Q3_K: ([108], [(0, 32), (32, 64), (96, 12)]),            # hmask[32], qs[64], scales[12], d
    QT.Q4_K: ([0, 2], [(4, 12), (16, 128)]),                    # d, dmin, scales[12], qs[128]
    QT.Q5_K: ([0, 2], [(4, 12), (16, 32), (48, 128)]),          # d, dmin, scales[12], qh[32], qs[128]
    QT.Q6_K: ([208], [(0, 128), (128, 64), (192, 16)]),         # ql[128], qh[64], int8 scales[16], d
}
QUANTIZABLE = (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0)


def finite_f16_bits(r, n):
    b = r.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    bad = (b & 0x7C00) == 0x7C00            # inf and NaN: exponent all ones
    b[bad] &= 0xBFFF                        # drop the exponent's top bit: finite
    return b


def check_layout(qtype):
    """The layout table covers each block exactly once, at gguf's block size."""
    f16, regions = LAYOUTS[qtype]
    spans = sorted([(o, 2) for o in f16] + regions)
    size = GGML_QUANT_SIZES[qtype][1]
    pos = 0
    for o, n in spans:
        if o != pos:
            raise AssertionError("%s: layout gap or overlap at byte %d" % (qtype.name, o))
        pos = o + n
    if pos != size:
        raise AssertionError("%s: layout covers %d bytes, gguf says %d" % (qtype.name, pos, size))


def set_f16(blocks, offset, bits):
    blocks[:, offset:offset + 2] = np.asarray(bits, dtype=np.uint16).astype("<u2").view(np.uint8).reshape(-1, 2)


def random_blocks(r, qtype, n):
    f16, _ = LAYOUTS[qtype]
    blocks = r.integers(0, 256, (n, GGML_QUANT_SIZES[qtype][1])).astype(np.uint8)
    for o in f16:
        set_f16(blocks, o, finite_f16_bits(r, n))
    return blocks


def quantized_blocks(r, qtype, n):
    """gguf's own quantisation of random floats: normal values times a per-block magnitude from 2^-30
    to 2^14 (float16 scales from subnormal to large), some blocks offset (for Q4_1, Q5_1's minimum)."""
    bs = GGML_QUANT_SIZES[qtype][0]
    x = r.standard_normal((n, bs)).astype(np.float32)
    x *= np.exp2(r.uniform(-30, 14, (n, 1))).astype(np.float32)
    shift = (r.standard_normal((n, 1)) * (r.random((n, 1)) < 0.3)).astype(np.float32)
    x += shift * np.abs(x).max(axis=1, keepdims=True)
    x[: n // 32] = 0                                          # all-zero blocks: d = 0
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(quantize(x.reshape(-1, bs), qtype), dtype=np.uint8).reshape(n, -1)


def edge_blocks(qtype):
    f16, regions = LAYOUTS[qtype]
    size = GGML_QUANT_SIZES[qtype][1]
    fills = [tuple(f) for f in itertools.product((0x00, 0xFF), repeat=len(regions))]
    fills += [(c,) * len(regions) for c in CODE_FILLS]
    rows = []
    for scales in itertools.product(EDGE_SCALES, repeat=len(f16)):
        for fill in fills:
            b = np.zeros(size, dtype=np.uint8)
            for (o, n), c in zip(regions, fill):
                b[o:o + n] = c
            for o, s in zip(f16, scales):
                b[o], b[o + 1] = s & 0xFF, s >> 8
            rows.append(b)
    return np.array(rows, dtype=np.uint8)


def decode(qtype, blocks, n):
    r = subprocess.run([DECODE, str(int(qtype)), str(n)], input=blocks.tobytes(), capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("ggml_decode %s exited %d: %s" % (qtype.name, r.returncode, r.stderr.decode()))
    return np.frombuffer(r.stdout, dtype=np.float32)


def compare(qtype, blocks, what):
    bs = GGML_QUANT_SIZES[qtype][0]
    n = bs * blocks.shape[0]
    ref = np.asarray(dequantize(blocks.reshape(-1), qtype), dtype=np.float32).reshape(-1)
    got = decode(qtype, blocks, n)
    if got.shape != ref.shape:
        return check(False, "%s: %s" % (qtype.name, what), "%d values decoded, %d expected" % (got.size, ref.size))
    bad = np.flatnonzero(got.view(np.uint32) != ref.view(np.uint32))
    print("# %s: %d blocks, %d values, %d differ in their bits" % (qtype.name, blocks.shape[0], n, bad.size))

    def detail():
        lines = ["%d of %d values differ" % (bad.size, n)]
        for i in bad[:8]:
            lines.append("value %d (block %d, element %d): got %r (0x%08x), gguf %r (0x%08x)" % (
                i, i // bs, i % bs, float(got[i]), int(got.view(np.uint32)[i]),
                float(ref[i]), int(ref.view(np.uint32)[i])))
        return "\n".join(lines)
    return check(bad.size == 0, "%s: %s" % (qtype.name, what), detail)


def main():
    r = np.random.default_rng(33)
    for qtype in LAYOUTS:
        check_layout(qtype)
        blocks = random_blocks(r, qtype, N_RANDOM)
        what = "%d random blocks" % N_RANDOM
        if qtype in QUANTIZABLE:
            blocks = np.concatenate([blocks, quantized_blocks(r, qtype, N_QUANTIZED)])
            what += " and %d of gguf.quants.quantize on random floats" % N_QUANTIZED
        compare(qtype, blocks, "kvtrace's decoding of %s equals gguf.quants.dequantize bit for bit" % what)
        edges = edge_blocks(qtype)
        compare(qtype, edges, "kvtrace's decoding equals gguf.quants.dequantize bit for bit on %d edge blocks "
                "(zero, -0, subnormal and largest scales, all-0 and all-1 codes, each combined)" % edges.shape[0])
    for qtype in (QT.IQ2_XXS, QT.TQ1_0):
        bs, size = GGML_QUANT_SIZES[qtype]
        p = subprocess.run([DECODE, str(int(qtype)), str(bs)], input=bytes(size), capture_output=True)
        check(p.returncode == 1 and not p.stdout,
              "%s (id %d), a type kvtrace does not decode: ggml_decode refuses it, exit 1" % (qtype.name, int(qtype)),
              "exit %d, %d bytes out, stderr %r" % (p.returncode, len(p.stdout), p.stderr))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
