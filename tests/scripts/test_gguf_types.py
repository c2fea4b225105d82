"""capture of GGUF files written here: F16, BF16 and Q8_0 tensors, qwen2 and qwen3
GGUFs, and Llama 3.x's rope_freqs.weight. TAP output.

- stories260K.gguf rewritten with F16 / BF16 / Q8_0 matrices: logits and column sums
  equal an independent float64 pass (tests/lib/hfmodel.py) over the values the file
  holds (so the dequantisers are exact), and stay within the type's precision of F32;
- tiny random qwen2 (biases), qwen3 (q/k norms, key_length != dim/heads, tied output)
  and llama with rope_freqs.weight (Q/K rows permuted for interleaved RoPE, as
  llama.cpp's converter does) give the float64 reference's logits, and the trace's rope
  attributes say what ran;
- bad files: exit 3, one line naming the file."""
import json
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ggufio as G  # noqa: E402
import hfmodel  # noqa: E402
from kvrun import capture, run, write_tokens  # noqa: E402
from tap import NO_MODEL, check, close, finish, skip  # noqa: E402

MODELS = os.environ.get("KVTRACE_MODEL_DIR", "")
GGUF = os.path.join(MODELS, "stories260K.gguf")
TOKENS = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267]


def kv_list(meta):
    """Metadata dict -> [(key, type, value)] with the usual GGUF types."""
    out = []
    for k, v in meta.items():
        if isinstance(v, str):
            out.append((k, G.STR, v))
        elif isinstance(v, bool):
            out.append((k, G.BOOL, int(v)))
        elif isinstance(v, int):
            out.append((k, G.U32 if v >= 0 else G.I32, v))
        elif isinstance(v, float):
            out.append((k, G.F32, v))
        elif v and isinstance(v[0], str):
            out.append((k, G.ARR, (G.STR, v)))
        elif v and isinstance(v[0], float):
            out.append((k, G.ARR, (G.F32, v)))
        else:
            out.append((k, G.ARR, (G.I32, v)))
    return out


def write_gguf(path, meta, tensors, mat_type=G.T_F32):
    """tensors: [(name, array)] (rows = ne1); 2-D ones stored as mat_type where ggml
    allows it (Q8_0 needs ne0 % 32 == 0). Returns {name: values read back}."""
    back, ts = {}, []
    for name, a in tensors:
        a = np.asarray(a, dtype=np.float32)
        gt = mat_type if a.ndim == 2 and (mat_type != G.T_Q8_0 or a.shape[1] % 32 == 0) else G.T_F32
        data, vals = G.tensor_bytes(a, gt)
        back[name] = vals
        ts.append((name, list(reversed(a.shape)), gt, data))
    with open(path, "wb") as f:
        f.write(G.gguf(kv_list(meta), ts))
    return back


def gguf_weights(back, L, tied=False):
    """hfmodel weight dict from GGUF names."""
    g = lambda n: back[n]
    w = {"embed": g("token_embd.weight"), "norm": g("output_norm.weight"),
         "lm_head": g("token_embd.weight" if tied else "output.weight"), "layers": []}
    names = {"attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight", "wv": "attn_v.weight",
             "wo": "attn_output.weight", "ffn_norm": "ffn_norm.weight", "wg": "ffn_gate.weight",
             "wu": "ffn_up.weight", "wd": "ffn_down.weight", "bq": "attn_q.bias", "bk": "attn_k.bias",
             "bv": "attn_v.bias", "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight"}
    for l in range(L):
        w["layers"].append({k: back["blk.%d.%s" % (l, n)] for k, n in names.items()
                            if "blk.%d.%s" % (l, n) in back})
    return w


STORIES_CFG = {"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 5, "num_attention_heads": 8,
               "num_key_value_heads": 4, "vocab_size": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}


def stories_types(tmp):
    meta, tensors = G.read(GGUF)
    toks = write_tokens(tmp, "s.tokens", TOKENS)
    with capture(os.path.join(tmp, "f32.h5"), GGUF, toks) as t:
        ref = t["logits"][:]
    # F32 logits reach ~20; 8-bit blocks (a step of amax/127) compound over 5 layers
    for gt, name, tol in ((G.T_F16, "F16", 2e-2), (G.T_BF16, "BF16", 1e-1), (G.T_Q8_0, "Q8_0", 3e-1)):
        path = os.path.join(tmp, "stories-%s.gguf" % name)
        back = write_gguf(path, meta, list(tensors.items()), gt)
        logits, colsum, _ = hfmodel.forward(gguf_weights(back, 5), STORIES_CFG, TOKENS, style="interleaved")
        with capture(os.path.join(tmp, name + ".h5"), path, toks) as t:
            close("stories %s GGUF: logits = float64 pass over the stored values" % name, t["logits"][:],
                  logits, 1e-4, 1e-4)
            close("stories %s GGUF: colsum = float64 pass" % name, t["attention/colsum"][:], colsum, 1e-5, 1e-4)
            close("stories %s GGUF: logits within %s precision of F32" % (name, name), t["logits"][:], ref, tol,
                  0.05)
            err = np.abs(t["logits"][:] - ref).max()
            check(err > 0, "stories %s: the weights really were %s (logits differ from F32 by %.3g)"
                  % (name, name, err))


def unpermute(w, n_heads):
    """HF rotate-half rows -> the interleaved rows llama.cpp's converter writes."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def tiny_meta(arch, cfg, **extra):
    H = cfg["num_attention_heads"]
    m = {"general.architecture": arch, "general.name": "tiny-" + arch,
         arch + ".embedding_length": cfg["hidden_size"], arch + ".feed_forward_length": cfg["intermediate_size"],
         arch + ".block_count": cfg["num_hidden_layers"], arch + ".attention.head_count": H,
         arch + ".attention.head_count_kv": cfg["num_key_value_heads"],
         arch + ".attention.layer_norm_rms_epsilon": cfg["rms_norm_eps"], arch + ".rope.freq_base": cfg["rope_theta"],
         arch + ".context_length": 128}
    m.update(extra)
    return m


def gguf_tensors(w, cfg, permute=False):
    H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    fix = (lambda a, n: unpermute(a, n)) if permute else (lambda a, n: a)
    ts = [("token_embd.weight", w["embed"]), ("output_norm.weight", w["norm"])]
    if not cfg.get("tie_word_embeddings"):
        ts.append(("output.weight", w["lm_head"]))
    for l, y in enumerate(w["layers"]):
        p = "blk.%d." % l
        ts += [(p + "attn_norm.weight", y["attn_norm"]), (p + "attn_q.weight", fix(y["wq"], H)),
               (p + "attn_k.weight", fix(y["wk"], K)), (p + "attn_v.weight", y["wv"]),
               (p + "attn_output.weight", y["wo"]), (p + "ffn_norm.weight", y["ffn_norm"]),
               (p + "ffn_gate.weight", y["wg"]), (p + "ffn_up.weight", y["wu"]), (p + "ffn_down.weight", y["wd"])]
        for k, n in (("bq", "attn_q.bias"), ("bk", "attn_k.bias"), ("bv", "attn_v.bias"),
                     ("q_norm", "attn_q_norm.weight"), ("k_norm", "attn_k_norm.weight")):
            if k in y:
                ts.append((p + n, y[k]))
    return ts


def tiny_cfg(**kw):
    cfg = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 40, "rms_norm_eps": 1e-6, "rope_theta": 10000.0}
    cfg.update(kw)
    return cfg


def tiny_archs(tmp):
    ids = [int(x) for x in np.random.default_rng(7).integers(0, 40, 24)]
    toks = write_tokens(tmp, "t.tokens", ids)
    # qwen2: biases
    cfg = tiny_cfg(rope_theta=1000000.0)
    w = hfmodel.random_weights(cfg, 11, bias=True)
    path = os.path.join(tmp, "qwen2.gguf")
    pieces = [c for c in "abcdefghij\u0120"] + ["<|x%d|>" % i for i in range(28)] + ["<|endoftext|>"]
    write_gguf(path, tiny_meta("qwen2", cfg, **{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": pieces,
                                                "tokenizer.ggml.token_type": [1] * 39 + [3],
                                                "tokenizer.ggml.eos_token_id": 39}), gguf_tensors(w, cfg))
    logits, colsum, _ = hfmodel.forward(w, cfg, ids)
    with capture(os.path.join(tmp, "q2.h5"), path, toks, "--chunk", "5") as t:
        check(t.attrs["architecture"] == "qwen2" and t.attrs["rope_style"] == "neox", "qwen2 GGUF: neox RoPE")
        close("qwen2 GGUF: logits vs float64 reference", t["logits"][:], logits, 1e-4, 1e-4)
        close("qwen2 GGUF: colsum vs float64 reference", t["attention/colsum"][:], colsum, 1e-5, 1e-4)
        nb, _, _ = hfmodel.forward(w, cfg, ids, use_bias=False)
        check(np.abs(nb - t["logits"][:]).max() > 1e-2, "qwen2 GGUF: the biases were applied")
    sw = os.path.join(tmp, "qwen2-sw.gguf")
    write_gguf(sw, tiny_meta("qwen2", cfg, **{"qwen2.attention.sliding_window": 8}), gguf_tensors(w, cfg))
    r = run("capture", "--model", sw, "--tokens", toks, "-o", os.path.join(tmp, "sw.h5"))
    check(r.returncode == 2 and "window 8" in r.stderr and not os.path.exists(os.path.join(tmp, "sw.h5")),
          "GGUF attention.sliding_window 8 < 24 tokens: refused", r.stderr)
    r = run("capture", "--model", path, "--prompt", "abc", "-o", os.path.join(tmp, "bpe.h5"))
    check(r.returncode == 2 and path in r.stderr and "--tokens" in r.stderr and "byte-level BPE" in r.stderr
          and len(r.stderr.strip().splitlines()) == 1 and not os.path.exists(os.path.join(tmp, "bpe.h5")),
          "gpt2 (byte-level BPE) GGUF tokenizer: --prompt refused naming the file, suggesting --tokens", r.stderr)
    r = run("capture", "--quiet", "--print", "--model", path, "--tokens", write_tokens(tmp, "abc", [0, 1, 2, 10, 3]),
            "-o", os.path.join(tmp, "bpe.h5"))
    check(r.returncode == 0 and r.stdout.startswith("abc d"), "gpt2 GGUF tokenizer: --print decodes",
          "rc %d out %r %s" % (r.returncode, r.stdout, r.stderr))
    # qwen3: q/k norm, key_length 16 != 32 / 4, tied output
    cfg = tiny_cfg(head_dim=16, tie_word_embeddings=True)
    w = hfmodel.random_weights(cfg, 12, qk_norm=True)
    path = os.path.join(tmp, "qwen3.gguf")
    write_gguf(path, tiny_meta("qwen3", cfg, **{"qwen3.attention.key_length": 16,
                                                "qwen3.attention.value_length": 16}), gguf_tensors(w, cfg))
    logits, colsum, _ = hfmodel.forward(w, cfg, ids)
    with capture(os.path.join(tmp, "q3.h5"), path, toks, "--chunk", "5") as t:
        check(t.attrs["head_dim"] == 16 and t.attrs["rope_style"] == "neox", "qwen3 GGUF: head_dim 16, neox")
        close("qwen3 GGUF: logits vs float64 reference", t["logits"][:], logits, 1e-4, 1e-4)
        close("qwen3 GGUF: colsum vs float64 reference", t["attention/colsum"][:], colsum, 1e-5, 1e-4)
        nn, _, _ = hfmodel.forward(w, cfg, ids, use_qk_norm=False)
        check(np.abs(nn - t["logits"][:]).max() > 1e-2, "qwen3 GGUF: the q/k norms were applied")
    # llama 3.x: rope_freqs.weight
    cfg = tiny_cfg(num_attention_heads=2, num_key_value_heads=1, rope_theta=500000.0)
    w = hfmodel.random_weights(cfg, 13)
    div = hfmodel.llama3_divisors(16, 500000.0, 8.0, 1.0, 4.0, 32)
    path = os.path.join(tmp, "llama3.gguf")
    write_gguf(path, tiny_meta("llama", cfg, **{"llama.rope.dimension_count": 16}),
               gguf_tensors(w, cfg, permute=True) + [("rope_freqs.weight", div.astype(np.float32))])
    div32 = div.astype(np.float32).astype(np.float64)
    logits, colsum, _ = hfmodel.forward(w, cfg, ids, div=div32)
    with capture(os.path.join(tmp, "l3.h5"), path, toks, "--chunk", "5") as t:
        check(t.attrs["rope_style"] == "interleaved" and t.attrs["rope_scaling"] == "rope_freqs.weight",
              "llama GGUF with rope_freqs: interleaved, rope_scaling names the tensor", dict(t.attrs))
        close("llama GGUF: rope_freq_factors attribute = the tensor", t.attrs["rope_freq_factors"], div32, 0, 0)
        close("llama GGUF with rope_freqs: logits vs float64 reference", t["logits"][:], logits, 1e-4, 1e-4)
        close("llama GGUF with rope_freqs: colsum", t["attention/colsum"][:], colsum, 1e-5, 1e-4)
        plain, _, _ = hfmodel.forward(w, cfg, ids)
        check(np.abs(plain - t["logits"][:]).max() > 1e-2, "llama GGUF: rope_freqs.weight was applied")
    return cfg, w


def bad_files(tmp, cfg, w):
    toks = write_tokens(tmp, "b.tokens", [1, 2, 3])

    def bad(name, meta, tensors, word, mat_type=G.T_F32):
        path = os.path.join(tmp, name + ".gguf")
        write_gguf(path, meta, tensors, mat_type)
        out = os.path.join(tmp, "bad.h5")
        r = run("capture", "--model", path, "--tokens", toks, "-o", out)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 3 and len(lines) == 1 and path in lines[0] and word in lines[0]
              and not os.path.exists(out), "%s: exit 3, one line naming the file and %s" % (name, word),
              "rc %d: %s" % (r.returncode, r.stderr))

    ts = gguf_tensors(w, cfg, permute=True)
    bad("qwen2-no-bias", tiny_meta("qwen2", cfg), ts, "missing tensor blk.0.attn_q.bias")
    bad("qwen3-no-norm", tiny_meta("qwen3", cfg), ts, "missing tensor blk.0.attn_q_norm.weight")
    bad("gemma", tiny_meta("gemma", cfg), ts, "architecture 'gemma' is not supported")
    bad("rope-freqs-shape", tiny_meta("llama", cfg), ts + [("rope_freqs.weight", np.ones(5, np.float32))],
        "rope_freqs.weight has shape [5]")
    bad("rope-freqs-zero", tiny_meta("llama", cfg), ts + [("rope_freqs.weight", np.zeros(8, np.float32))],
        "not a positive divisor")
    bad("yarn", tiny_meta("llama", cfg, **{"llama.rope.scaling.type": "yarn"}), ts, "'yarn' is not supported")
    # a Q8_K tensor (ggml's dot-product intermediate, never a model's): parsed, named, not converted
    path = os.path.join(tmp, "q8k.gguf")
    meta = kv_list(tiny_meta("llama", dict(cfg, hidden_size=256)))
    blob = G.gguf(meta, [("token_embd.weight", [256, 40], 15, bytes(292 * 40))])
    open(path, "wb").write(blob)
    r = run("capture", "--model", path, "--tokens", toks, "-o", os.path.join(tmp, "bad.h5"))
    check(r.returncode == 3 and "Q8_K" in r.stderr and "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and BF16" in r.stderr,
          "Q8_K: exit 3 naming the type and the types kvtrace reads", r.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-gguft-")
    try:
        cfg, w = tiny_archs(tmp)
        bad_files(tmp, cfg, w)
        if MODELS:
            stories_types(tmp)
        else:
            skip("stories260K rewritten with F16, BF16 and Q8_0 matrices", NO_MODEL)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
