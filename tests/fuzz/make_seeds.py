#!/usr/bin/env python3
"""Writes a small seed corpus for fuzz_trace_validate into DIR (default build-fuzz/corpus).

Each seed is a header (10 bytes: L, K, H/K, D, T, V, flags, optional-dataset mask,
2 seed bytes; 0 = default) and then mutations, one op byte each followed by its
arguments, in the encoding of fuzz_input.c (see fz_mutate()). The harness
reaches all of this from an empty input too; the seeds just get there in seconds.
If the encoding changes, old seeds stay harmless: any bytes are a valid input.
"""
import os
import sys

# header flags (byte 6) and optional-dataset toggles (byte 7)
F16, EVICT, REOPEN, CONTIG = 1, 2, 4, 8
FILTERS = 0x70
OPT_FULL = 16

# datasets, attributes and ops as numbered in the harness
TOKENS, KEYS, VALUES, QUERIES, COLSUM, FULL, LOGITS, LOGPROBS, RETAINED, STEP_END = range(10)
N_ATTR = 20
A_DELETE, A_INT, A_RETYPE, A_BYTES, A_WORD, A_SHAPE = range(6)
D_OBJ, D_DIMS, D_RANK, D_TYPE, D_VALUE, D_LAYOUT = range(6, 12)
CONTAINERS, EXTRA = 12, 13


def header(flags=0, opt=0):
    return bytes([0, 0, 0, 0, 0, 0, flags, opt, 0, 0])


def seeds():
    yield "valid", b""
    for name, flags in [("f16", F16), ("evict", EVICT), ("f16-evict-reopen", F16 | EVICT | REOPEN),
                        ("contiguous", CONTIG), ("filters", FILTERS), ("reopen", REOPEN)]:
        yield "valid-" + name, header(flags)
    yield "valid-full-attention", header(0, OPT_FULL)
    yield "valid-extra", header() + bytes([EXTRA])
    for a in range(N_ATTR):
        yield f"attr{a}-delete", header() + bytes([A_DELETE, a])
        yield f"attr{a}-int", header() + bytes([A_INT, a, 4 * 3 + 1])
        yield f"attr{a}-float", header() + bytes([A_RETYPE, a, 9])
        yield f"attr{a}-uint8-be", header() + bytes([A_RETYPE, a, 0x81])
        yield f"attr{a}-bytes", header() + bytes([A_BYTES, a, 5, 0]) + b"ab\ncd"
        yield f"attr{a}-null", header() + bytes([A_SHAPE, a, 0])
        yield f"attr{a}-pair", header() + bytes([A_SHAPE, a, 2])
    for d in range(10):
        base = header(EVICT if d >= RETAINED else 0, OPT_FULL if d == FULL else 0)
        yield f"dset{d}-group", base + bytes([D_OBJ, d, 1])
        yield f"dset{d}-named-type", base + bytes([D_OBJ, d, 2])
        yield f"dset{d}-dangling", base + bytes([D_OBJ, d, 3])
        yield f"dset{d}-plus-one", base + bytes([D_DIMS, d, 0])
        yield f"dset{d}-zero", base + bytes([D_DIMS, d, 2 << 3])
        yield f"dset{d}-rank-up", base + bytes([D_RANK, d, 0])
        for t in (2, 8, 10, 14, 15):  # int16, f16, f64, compound, string
            yield f"dset{d}-type{t}", base + bytes([D_TYPE, d, t])
        yield f"dset{d}-edge", base + bytes([D_VALUE, d, 0, 0, 5])        # token V / -2^-1 / ...
        yield f"dset{d}-nan", base + bytes([D_VALUE, d, 3, 0, 9])         # NaN
        yield f"dset{d}-negative", base + bytes([D_VALUE, d, 1, 0, 1 | 4 | 0x40])
        yield f"dset{d}-fill-nan", base + bytes([D_LAYOUT, d, 0x11, 1])
        yield f"dset{d}-fill-never", base + bytes([D_LAYOUT, d, 0x31, 0])
        yield f"dset{d}-compact", base + bytes([D_LAYOUT, d, 0x02])
    # combinations the fuzzer needs several steps for
    A_HEADS, A_VOCAB, A_THETA, A_PROMPT, A_CHUNK = 8, 13, 14, 12, 15
    no_q_colsum = header(0, 1 | 2)
    yield "heads-not-multiple", no_q_colsum + bytes([A_INT, A_HEADS, 4 * 3])      # H = 5, K = 2
    yield "heads-below-kv", no_q_colsum + bytes([A_INT, A_HEADS, 4 * 2 + 1])     # H = 1 < K
    no_logits = header(0, 4)
    yield "vocab-max", no_logits + bytes([A_INT, A_VOCAB, 4 * 7 + 1])            # 2^24
    yield "vocab-over", no_logits + bytes([A_INT, A_VOCAB, 4 * 8 + 1])           # 2^24 + 1
    yield "prompt-zero", header() + bytes([A_INT, A_PROMPT, 4 * 0 + 1])
    yield "chunk-negative", header() + bytes([A_INT, A_CHUNK, 4 * 1 + 1])
    for i in range(10):  # rope_theta as a float32 special: NaN, inf, -inf, 0, -0, -1, ...
        yield f"theta-special{i}", header() + bytes([A_RETYPE, A_THETA, 0x40 | 9, i])
    yield "full-with-evict-dsets", header() + bytes([D_OBJ, RETAINED, 4, D_OBJ, STEP_END, 4])
    yield "evict-with-colsum", header(EVICT) + bytes([D_OBJ, COLSUM, 4])
    yield "f16-keys-bits", header(F16) + bytes([D_VALUE, KEYS, 2, 0, 0, 0x01, 0x7C])
    yield "attention-dataset", header(0, OPT_FULL) + bytes([CONTAINERS, 1])
    yield "evict-dataset", header(EVICT) + bytes([CONTAINERS, 2])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "build-fuzz/corpus"
    os.makedirs(out, exist_ok=True)
    n = 0
    for name, data in seeds():
        with open(os.path.join(out, "seed-" + name), "wb") as f:
            f.write(data)
        n += 1
    print(f"{n} seeds in {out}")


if __name__ == "__main__":
    main()
