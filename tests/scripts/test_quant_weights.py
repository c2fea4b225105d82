"""Quantised GGUF matrices kept in memory (docs/capture.md, "weights in 16 bits or quantised"), TAP.

A llama GGUF (width 256, FFN 512: whole K-quant blocks) is written with every matrix in one ggml type, for each
type kvtrace decodes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: random codes, finite float16
scales), and once as a Q4_K_M-like mix (Q4_K attention and gate/up, Q6_K down projection and output, Q8_0
embedding, F16 W_o). capture without --weights keeps the blocks and decodes them a tile at a time inside the
products; with --weights f32 it widens them on load. The products see the same float32 values in the same
blocked sums, so the two traces must be identical bit for bit (the decoders themselves are checked against the
gguf package in tests/real/test_quants.py). Also: the kept model's peak memory is below the widened one's; a
type kvtrace does not decode and a NaN scale are refused in one line naming the tensor (exit 3, nothing
written); random:NAME:TYPE generates blocks directly (deterministic, refused for a shape whose rows are not
whole blocks, or an unknown TYPE).
    /usr/bin/python3 tests/scripts/test_quant_weights.py [BUILD]"""
# tags: blas
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ggufio as G  # noqa: E402
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")

# ggml id: (name, values per block, bytes per block, byte offsets of the float16 scale fields, typical |code x scale|)
TYPES = {2: ("Q4_0", 32, 18, [0], 8), 3: ("Q4_1", 32, 20, [0, 2], 8), 6: ("Q5_0", 32, 22, [0], 16),
         7: ("Q5_1", 32, 24, [0, 2], 16), 8: ("Q8_0", 32, 34, [0], 127), 10: ("Q2_K", 256, 84, [80, 82], 20),
         11: ("Q3_K", 256, 110, [108], 64), 12: ("Q4_K", 256, 144, [0, 2], 300), 13: ("Q5_K", 256, 176, [0, 2], 600),
         14: ("Q6_K", 256, 210, [208], 1000)}
DIM, FFN, L, H, K, V = 256, 512, 2, 4, 2, 64


def blocks(rng, gt, n, fan_in):
    """n values of type gt: random bytes, each float16 scale set near sqrt(3 / fan_in) / typical code."""
    name, blck, size, scales, typical = TYPES[gt]
    b = rng.integers(0, 256, (n // blck, size), dtype=np.uint8)
    amp = np.sqrt(3.0 / fan_in) / typical
    for at in scales:
        d = (amp * rng.uniform(0.5, 1.5, n // blck)).astype("<f2")
        b[:, at:at + 2] = d.view(np.uint8).reshape(-1, 2)
    return b.tobytes()


def matrix(rng, name, rows, cols, gt):
    """A GGUF tensor entry of [rows][cols] in type gt (0 F32, 1 F16, else blocks)."""
    if gt in (0, 1):
        a = rng.uniform(-1, 1, (rows, cols)) * np.sqrt(3.0 / cols)
        return (name, [cols, rows], gt, G.tensor_bytes(a, gt)[0])
    return (name, [cols, rows], gt, blocks(rng, gt, rows * cols, cols))


def write_model(path, types, seed=3, patch=None, vocab=V):
    """types: {"attn", "ffn_down", "output", "embd", "wo"}: ggml ids. patch(name, data) may alter a tensor."""
    rng = np.random.default_rng(seed)
    meta = {"general.architecture": "llama", "general.name": "quant-test", "llama.embedding_length": DIM,
            "llama.feed_forward_length": FFN, "llama.block_count": L, "llama.attention.head_count": H,
            "llama.attention.head_count_kv": K, "llama.attention.layer_norm_rms_epsilon": 1e-5,
            "llama.rope.freq_base": 10000.0, "llama.context_length": 256}
    kvs = [(k, G.STR if isinstance(v, str) else G.F32 if isinstance(v, float) else G.U32, v) for k, v in meta.items()]
    ones = np.ones(DIM, np.float32).tobytes()
    ts = [matrix(rng, "token_embd.weight", vocab, DIM, types["embd"]), ("output_norm.weight", [DIM], 0, ones),
          matrix(rng, "output.weight", vocab, DIM, types["output"])]
    D = DIM // H
    for layer in range(L):
        p = "blk.%d." % layer
        ts += [(p + "attn_norm.weight", [DIM], 0, ones), (p + "ffn_norm.weight", [DIM], 0, ones),
               matrix(rng, p + "attn_q.weight", H * D, DIM, types["attn"]),
               matrix(rng, p + "attn_k.weight", K * D, DIM, types["attn"]),
               matrix(rng, p + "attn_v.weight", K * D, DIM, types["attn"]),
               matrix(rng, p + "attn_output.weight", DIM, H * D, types["wo"]),
               matrix(rng, p + "ffn_gate.weight", FFN, DIM, types["attn"]),
               matrix(rng, p + "ffn_up.weight", FFN, DIM, types["attn"]),
               matrix(rng, p + "ffn_down.weight", DIM, FFN, types["ffn_down"])]
    if patch:
        ts = [(n, dims, gt, patch(n, data)) for n, dims, gt, data in ts]
    with open(path, "wb") as f:
        f.write(G.gguf(kvs, ts))


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True)


def peak_kb(*args):
    """capture's peak resident memory (KiB, its --stats line's peak_rss_kib) and its stderr."""
    r = run(*args, "--stats")
    words = r.stderr.split()
    at = [i for i, w in enumerate(words) if w == "peak_rss_kib"]
    return (int(words[at[0] + 1]) if at else -1), r.stderr


def same(a, b):
    with h5py.File(a, "r") as x, h5py.File(b, "r") as y:
        keys = [k for k in ("tokens", "keys", "values", "queries", "logits", "attention/colsum") if k in x]
        bad = [k for k in keys if x[k].shape != y[k].shape or
               not np.array_equal(x[k][()].view(np.uint32) if x[k].dtype == np.float32 else x[k][()],
                                  y[k][()].view(np.uint32) if y[k].dtype == np.float32 else y[k][()])]
        finite = all(np.isfinite(x[k][()]).all() for k in keys if x[k].dtype == np.float32)
    return not bad and finite, bad


def one_line(r, code):
    return r.returncode == code and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("kvtrace: error: ")


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-quant-")
    toks = os.path.join(tmp, "t.json")
    with open(toks, "w") as f:
        f.write(str([int(x) for x in np.random.default_rng(1).integers(0, V, 40)]))
    common = ["--tokens", toks, "--chunk", "16", "--generate", "8", "--logits", "--quiet"]
    # rerun under each OpenBLAS kernel (the blas tag): the K-quants of the mix and Q8_0 suffice there, the
    # decoders being the kernel-free part
    types = {k: v for k, v in TYPES.items() if k in (8, 12, 14)} if os.environ.get("OPENBLAS_CORETYPE") else TYPES
    for gt, (name, *_rest) in types.items():
        path = os.path.join(tmp, name + ".gguf")
        write_model(path, {"attn": gt, "ffn_down": gt, "output": gt, "embd": gt, "wo": gt})
        a, b = os.path.join(tmp, name + "-kept.h5"), os.path.join(tmp, name + "-f32.h5")
        ra = run("capture", "--model", path, *common, "-o", a)
        rb = run("capture", "--model", path, *common, "--weights", "f32", "-o", b)
        ok, bad = same(a, b) if ra.returncode == 0 and rb.returncode == 0 else (False, ra.stderr + rb.stderr)
        check(ok, "%s matrices kept: the trace equals --weights f32's bit for bit (32 prompt tokens in chunks of 16, "
              "8 generated, logits)" % name, bad)
    mix = os.path.join(tmp, "q4_k_m.gguf")
    write_model(mix, {"attn": 12, "ffn_down": 14, "output": 14, "embd": 8, "wo": 1}, vocab=32768)  # 64 MiB in f32
    a, b = os.path.join(tmp, "mix-kept.h5"), os.path.join(tmp, "mix-f32.h5")
    ka, ea = peak_kb("capture", "--model", mix, *common, "--threads", "1", "-o", a)
    kb, eb = peak_kb("capture", "--model", mix, *common, "--threads", "1", "--weights", "f32", "-o", b)
    ok, bad = same(a, b) if os.path.exists(a) and os.path.exists(b) else (False, ea + eb)
    check(ok, "a Q4_K_M-like mix (Q4_K, Q6_K, Q8_0, F16 W_o) loads, kept, and equals --weights f32", bad)
    print("# the mix's peak RSS: kept %d KiB, widened %d KiB (the matrices: %.1f MiB as blocks, %.1f MiB in float32)"
          % (ka, kb, os.path.getsize(mix) / 2**20, 4 * (2 * 32768 * DIM + L * (3 * DIM * DIM + 3 * DIM * FFN)) / 2**20))
    check(kb - ka > 40 * 1024, "kept quantised, the capture's peak memory is at least 40 MiB below the widened one's",
          "%d vs %d KiB" % (ka, kb))

    iq = os.path.join(tmp, "iq.gguf")
    write_model(iq, {"attn": 12, "ffn_down": 12, "output": 12, "embd": 12, "wo": 12})
    with open(iq, "rb") as f:
        raw = bytearray(f.read())
    at = raw.find(b"blk.0.attn_q.weight") + len("blk.0.attn_q.weight") + 4 + 16  # n_dims, two dims
    raw[at:at + 4] = (16).to_bytes(4, "little")  # IQ2_XXS: 66 bytes a block, not 144: shift the size back
    open(iq, "wb").write(raw)
    out = os.path.join(tmp, "no.h5")
    r = run("capture", "--model", iq, *common, "-o", out)
    check(r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1 and "attn_q" in r.stderr and
          "IQ2_XXS" in r.stderr and not os.path.exists(out),
          "a tensor of a type kvtrace does not decode (IQ2_XXS): exit 3, one line naming it, nothing written", r.stderr)

    def nan_scale(name, data):
        if name != "blk.1.ffn_up.weight":
            return data
        d = bytearray(data)
        d[144 * 77:144 * 77 + 2] = b"\x00\x7e"  # block 77's d: a float16 NaN
        return bytes(d)

    nan = os.path.join(tmp, "nan.gguf")
    write_model(nan, {"attn": 12, "ffn_down": 14, "output": 14, "embd": 8, "wo": 0}, patch=nan_scale)
    for extra in ([], ["--weights", "f32"]):
        r = run("capture", "--model", nan, *common, *extra, "-o", out)
        check(one_line(r, 3) and "blk.1.ffn_up.weight" in r.stderr and "NaN" in r.stderr and not os.path.exists(out),
              "a NaN scale %s: exit 3, one line naming the tensor, nothing written" % (extra or "(kept)"), r.stderr)

    two = os.path.join(tmp, "two.json")
    with open(two, "w") as f:
        f.write("[5, 9]")
    outs = []
    for i, spec in enumerate(["random:llama-3.2-1b:4:q4_k", "random:llama-3.2-1b:4:q4_k", "random:llama-3.2-1b:5:q4_k"]):
        outs.append(os.path.join(tmp, "rand%d.h5" % i))
        r = run("capture", "--model", spec, "--tokens", two, "--attention", "none", "--quiet", "--threads", "1",
                "-o", outs[-1])
        check(r.returncode == 0, "capture --model %s runs" % spec, r.stderr)
    if all(os.path.exists(o) for o in outs):
        with h5py.File(outs[0]) as x, h5py.File(outs[1]) as y, h5py.File(outs[2]) as z:
            kx, ky, kz = x["keys"][()], y["keys"][()], z["keys"][()]
        check(np.array_equal(kx, ky) and not np.array_equal(kx, kz) and np.isfinite(kx).all() and
              0.1 < float(np.std(kx)) < 10, "random:NAME:SEED:q4_k: the same seed the same trace, another seed "
              "another; finite keys of unit scale (std %.3g)" % float(np.std(kx)))
    for spec, what in (("random:stories260k:q4_k", "whole blocks"), ("random:llama-3.2-1b:q9_z", "quantised type")):
        r = run("capture", "--model", spec, "--tokens", two, "-o", out)
        check(one_line(r, 2) and what in r.stderr and not os.path.exists(out), "%s: exit 2, one line" % spec, r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
