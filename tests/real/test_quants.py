"""ggml's quantised types kvtrace decodes (Q8_0, Q4_1: the types of SmolLM2-135M-Instruct's GGUF besides
F32) against the gguf package's gguf.quants.dequantize, bit for bit, TAP. Run by tests/run_all.sh with the
test venv's Python (tests/requirements.txt) and BUILD; the decoder is kvtrace's own converter table
(model/formats/ggml_types.c) driven by BUILD/tools/ggml_decode.

Blocks: 4,096 random ones per type (random float16 scale bits, finite, of either sign, and random codes),
then the edge cases: zero scales, subnormal scales (the smallest and the largest float16 subnormal),
the largest finite float16, negative zero, and the extreme codes (0 and 15 for Q4_1; -128 and 127 for
Q8_0), each combined with every other."""
import os
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

DECODE = os.path.join(os.environ.get("BUILD", "build"), "tools", "ggml_decode")
EDGE_SCALES = [0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x7BFF, 0xFBFF, 0x3C00, 0x0400]  # f16 bit patterns


def finite_f16_bits(r, n):
    b = r.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    bad = (b & 0x7C00) == 0x7C00            # inf and NaN: exponent all ones
    b[bad] &= 0xBFFF                        # drop the exponent's top bit: finite
    return b


def q8_0_blocks(r, n):
    d = finite_f16_bits(r, n)
    q = r.integers(-128, 128, (n, 32)).astype(np.int8)
    edge_d = np.repeat(np.array(EDGE_SCALES, dtype=np.uint16), 2)
    edge_q = np.array([[-128] * 16 + [127] * 16, [127, -128] * 16] * len(EDGE_SCALES), dtype=np.int8)
    d, q = np.concatenate([d, edge_d]), np.concatenate([q, edge_q])
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1)


def q4_1_blocks(r, n):
    d, m = finite_f16_bits(r, n), finite_f16_bits(r, n)
    qs = r.integers(0, 256, (n, 16)).astype(np.uint8)
    e = np.array(EDGE_SCALES, dtype=np.uint16)
    ed, em = np.repeat(e, len(e)), np.tile(e, len(e))          # every pair of edge scales
    codes = np.array([[0x00] * 16, [0xFF] * 16, [0x0F] * 16, [0xF0] * 16], dtype=np.uint8)
    eq = codes[np.arange(len(ed)) % len(codes)]
    d, m, qs = np.concatenate([d, ed]), np.concatenate([m, em]), np.concatenate([qs, eq])
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), m.view(np.uint8).reshape(-1, 2), qs], axis=1)


def decode(qtype, blocks, n):
    r = subprocess.run([DECODE, str(int(qtype)), str(n)], input=blocks.tobytes(), capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode())
    return np.frombuffer(r.stdout, dtype=np.float32)


def main():
    r = np.random.default_rng(33)
    for qtype, make in ((QT.Q8_0, q8_0_blocks), (QT.Q4_1, q4_1_blocks)):
        blocks = make(r, 4096)
        n = 32 * blocks.shape[0]
        ref = dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(-1)
        got = decode(qtype, blocks, n)
        same = got.shape == ref.shape and np.array_equal(got.view(np.uint32), ref.view(np.uint32))
        diff = int((got.view(np.uint32) != ref.view(np.uint32)).sum()) if got.shape == ref.shape else -1
        print("# %s: %d blocks, %d values, %d differ in their bits" % (qtype.name, blocks.shape[0], n, diff))
        check(same, "%s: kvtrace's decoding equals gguf.quants.dequantize bit for bit (random blocks, zero, "
              "subnormal and extreme scales, extreme codes)" % qtype.name, "%d of %d differ" % (diff, n))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
