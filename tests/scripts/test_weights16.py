"""16-bit weights in memory on the CPU (docs/capture.md#where-the-16-bits-come-from). TAP output.

- a 16-bit model (stories260K's weights in an HF directory and in a GGUF, BF16 and F16,
  written here with numpy; and a dim-512 model whose products take many tiles) captured with its matrices
  held in 16 bits (the default: the file's type, used in place from the mapping) and with
  --weights f32 (widened on load): the traces are equal bit for bit, since the tiled
  widening feeds OpenBLAS's sgemm the same float32 values and each tile's call sums over K
  in the same order as the whole product's;
- one 16-bit product against numpy: layer 0's key and query at position 0 (RoPE is the
  identity there) against the float64 product of the widened weights;
- --weights f32 against bf16 / f16 on the default model (a float32 GGUF: the matrices are
  rounded on load) and on random:stories260k (generated directly in 16 bits): traces equal
  within the documented tolerance (relative to each dataset's largest magnitude);
- peak RSS of a 58 MB BF16 checkpoint: grows by about its 16-bit size held in place (under
  twice it), by about three times that with --weights f32 (float32 copy + the mapping read
  while loading);
- --weights on a bad word: exit 2.
Run by tests/run_all.sh with KVTRACE and KVTRACE_MODEL_DIR set."""
# tags: blas
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfmodel  # noqa: E402
from kvrun import KVTRACE, capture, run, write_tokens  # noqa: E402
from tap import NO_MODEL, check, finish, skip  # noqa: E402
import ggufio  # noqa: E402
from test_gguf_types import write_gguf  # noqa: E402
from test_hf import STORIES_CFG, TOKENS, stories_weights  # noqa: E402

DATASETS = ("keys", "values", "queries", "logits", "attention/colsum")
# --weights f32 against 16-bit rounding of the same weights, over 20 tokens through 5 layers:
# max |difference| / max |f32 value| per dataset (measured: bf16 <= 5.9e-3, f16 <= 8.1e-4)
TOL = {"bf16": 3e-2, "f16": 4e-3}


def read(f, name):
    return np.asarray(f[name][()], dtype=np.float64)


def same_bits(a, b, what, datasets=DATASETS):
    bad = [d for d in datasets if not np.array_equal(a[d][()], b[d][()])]
    check(not bad, what, "differ: %s" % bad)


def within(a, b, tol, what):
    worst = {}
    for d in DATASETS:
        x, y = read(a, d), read(b, d)
        worst[d] = float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-30))
    print("# %s: max |diff| / max |value|: %s" % (what, ", ".join("%s %.2g" % kv for kv in worst.items())))
    check(max(worst.values()) <= tol, what + " (relative %.0e)" % tol, worst)


def hf_bit_exact(tmp, toks):
    w = stories_weights()
    for dt in ("BF16", "F16"):
        d = os.path.join(tmp, "stories-" + dt)
        hfmodel.write_hf_dir(d, STORIES_CFG, w, dt)
        held = capture(os.path.join(tmp, dt + "-held.h5"), d, toks)
        wide = capture(os.path.join(tmp, dt + "-f32.h5"), d, toks, "--weights", "f32")
        same_bits(held, wide, "%s checkpoint: matrices held in 16 bits == widened on load, bit for bit" % dt)
        if dt == "BF16":
            product_check(held, w, "held in 16 bits")
            product_check(wide, w, "widened on load")
    bad = dict(w, layers=[dict(y) for y in w["layers"]])
    bad["layers"][2]["wu"] = w["layers"][2]["wu"].copy()
    bad["layers"][2]["wu"][3, 5] = np.inf
    d = os.path.join(tmp, "stories-inf")
    hfmodel.write_hf_dir(d, STORIES_CFG, bad, "BF16")
    r = run("capture", "--model", d, "--tokens", toks, "-o", os.path.join(tmp, "inf.h5"))
    check(r.returncode == 3 and "model.layers.2.mlp.up_proj.weight" in r.stderr and "non-finite" in r.stderr
          and len(r.stderr.strip().splitlines()) == 1 and not os.path.exists(os.path.join(tmp, "inf.h5")),
          "a BF16 matrix holding inf, used in place: exit 3, one line naming the tensor, no trace", r.stderr)
    return w


def gguf_bit_exact(tmp, gguf, toks):
    meta, tensors = ggufio.read(gguf)
    for gt, name in ((ggufio.T_BF16, "BF16"), (ggufio.T_F16, "F16")):
        path = os.path.join(tmp, "stories-%s.gguf" % name)
        write_gguf(path, meta, list(tensors.items()), gt)
        held = capture(os.path.join(tmp, name + "-gguf-held.h5"), path, toks)
        wide = capture(os.path.join(tmp, name + "-gguf-f32.h5"), path, toks, "--weights", "f32")
        same_bits(held, wide, "%s GGUF: matrices held in 16 bits (in place) == widened on load, bit for bit" % name)


def product_check(f, w, how):
    """Layer 0 at position 0: k = Wk . rmsnorm(embed[t0]) and q = Wq . (...) with the BF16 weights widened,
    in float64, against the trace (RoPE at position 0 is the identity)."""
    st = lambda a: hfmodel.stored(a, "BF16")
    y = w["layers"][0]
    x = st(w["embed"])[TOKENS[0]].astype(np.float32).astype(np.float64)
    h = hfmodel.rmsnorm(x, st(y["attn_norm"]), STORIES_CFG["rms_norm_eps"]).astype(np.float32)  # as the walk's
    k = (st(y["wk"]) @ h).reshape(4, 8)
    q = (st(y["wq"]) @ h).reshape(8, 8)
    got_k, got_q = read(f, "keys")[0, :, 0, :], read(f, "queries")[0, :, 0, :]
    ek = np.abs(got_k - k).max() / np.abs(k).max()
    eq = np.abs(got_q - q).max() / np.abs(q).max()
    print("# layer 0, position 0, %s: relative error of the product: keys %.2g, queries %.2g" % (how, ek, eq))
    check(ek < 1e-5 and eq < 1e-5, "one BF16 product (layer 0's k and q at position 0, %s) against float64 "
          "numpy" % how,
          "keys %.3g queries %.3g" % (ek, eq))


def tolerance_checks(tmp, gguf, toks):
    for label, model in (("stories260K.gguf", gguf), ("random:stories260k", "random:stories260k:3")):
        ref = capture(os.path.join(tmp, "ref.h5"), model, toks, "--weights", "f32", "--force")
        for wt in ("bf16", "f16"):
            got = capture(os.path.join(tmp, wt + ".h5"), model, toks, "--weights", wt, "--force")
            within(ref, got, TOL[wt], "%s: --weights %s against f32" % (label, wt))
            got.close()
        ref.close()


def peak_rss_kib(model, toks, *args):
    out = os.path.join(os.path.dirname(toks), "rss.h5")
    r = subprocess.run(["/usr/bin/time", "-f", "%M", KVTRACE, "capture", "--quiet", "--attention", "none",
                        "--model", model, "--tokens", toks, "--force", "-o", out, *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return int(r.stderr.strip().splitlines()[-1])


def rss_check(tmp, gguf):
    cfg = dict(STORIES_CFG, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
               num_attention_heads=8, num_key_value_heads=8, vocab_size=32000, tie_word_embeddings=True)
    w = hfmodel.random_weights(cfg, 7)
    d = os.path.join(tmp, "rss-bf16")
    hfmodel.write_hf_dir(d, cfg, w, "BF16")
    n = sum(a.size for _, a in hfmodel.hf_names(w, cfg))
    toks = write_tokens(tmp, "rss.tokens", TOKENS)
    base = peak_rss_kib(gguf, toks) * 1024.0
    held = peak_rss_kib(d, toks) * 1024.0 - base
    wide = peak_rss_kib(d, toks, "--weights", "f32") * 1024.0 - base
    print("# %d weights (%.1f MB in BF16): peak RSS above the 260K model's: held %.1f MB, --weights f32 %.1f MB"
          % (n, 2e-6 * n, held / 1e6, wide / 1e6))
    # measured 1.13x the 16-bit size (1.51x under ASan, whose shadow memory grows with what is touched)
    check(held < 2 * 2 * n and held < 0.6 * wide,
          "BF16 checkpoint held in place: peak RSS grows by ~its 16-bit size (< 2x it, < 0.6x --weights f32's)",
          "%.1f MB for %.1f MB (--weights f32: %.1f MB)" % (held / 1e6, 2e-6 * n, wide / 1e6))
    check(wide > 2.5 * 2 * n, "the same with --weights f32 grows by > 2.5x the 16-bit size (the float32 copy)",
          "%.1f MB for %.1f MB" % (wide / 1e6, 2e-6 * n))
    # products over many tiles (the output's 32000 rows: 4 sgemm calls of up to 8192 rows), two chunks of 128
    toks = write_tokens(tmp, "tiles.tokens", [(7 * i) % 32000 for i in range(256)])
    held = capture(os.path.join(tmp, "tiles-held.h5"), d, toks, "--attention", "none")
    wide = capture(os.path.join(tmp, "tiles-f32.h5"), d, toks, "--attention", "none", "--weights", "f32")
    same_bits(held, wide, "dim 512, V 32000 BF16 checkpoint, T 256: tiled widening == widened on load, bit for bit",
              ("keys", "values", "queries", "logits"))


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-w16-")
    try:
        r = run("capture", "--model", "random:stories260k", "--weights", "f8", "-o", os.path.join(tmp, "x.h5"))
        check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, "--weights f8: exit 2, one line",
              r.stderr)
        gguf = os.path.join(os.environ.get("KVTRACE_MODEL_DIR", ""), "stories260K.gguf")
        if not os.environ.get("KVTRACE_MODEL_DIR"):
            skip("16-bit weights: bit-exact widening, the numpy product, tolerances, peak RSS", NO_MODEL)
            return finish()
        toks = write_tokens(tmp, "w16.tokens", TOKENS)
        hf_bit_exact(tmp, toks)
        gguf_bit_exact(tmp, gguf, toks)
        tolerance_checks(tmp, gguf, toks)
        rss_check(tmp, gguf)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
