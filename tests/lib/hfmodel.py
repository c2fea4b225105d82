"""Hugging Face checkpoint directories written with numpy, and an independent
float64 forward pass of the models kvtrace runs (llama, mistral, qwen2,
qwen3), for the test scripts and the bench.

A safetensors file is a little-endian uint64 N, an N-byte JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}} and the data."""
import json
import math
import os
import struct

import numpy as np


def to_bf16_bits(a):
    """float array -> uint16 bfloat16 bits (round to nearest even)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def encode(a, dtype):
    """The bytes of `a` stored as dtype F32, F16 or BF16."""
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(a, dtype="<f2").tobytes()
    if dtype == "BF16":
        return to_bf16_bits(a).astype("<u2").tobytes()
    raise ValueError(dtype)


def stored(a, dtype):
    """What kvtrace reads back from `a` stored as dtype (float64)."""
    if dtype == "F32":
        return np.asarray(a, dtype=np.float32).astype(np.float64)
    if dtype == "F16":
        return np.asarray(a, dtype=np.float16).astype(np.float64)
    return from_bf16_bits(to_bf16_bits(a)).astype(np.float64)


def safetensors_bytes(tensors, dtype="F32", metadata=None):
    """tensors: list of (name, array[, dtype]) -> (header bytes, [data blobs])."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for item in tensors:
        name, a = item[0], item[1]
        dt = item[2] if len(item) > 2 else dtype
        blob = encode(a, dt)
        header[name] = {"dtype": dt, "shape": list(np.shape(a)), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h, blobs


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    head, blobs = safetensors_bytes(tensors, dtype, metadata)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)


def hf_names(w, cfg):
    """The checkpoint's tensors, in HF names, from a weight dict (see random_weights)."""
    out = [("model.embed_tokens.weight", w["embed"]), ("model.norm.weight", w["norm"])]
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", w["lm_head"]))
    for l, y in enumerate(w["layers"]):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", y["attn_norm"]), (p + "self_attn.q_proj.weight", y["wq"]),
                (p + "self_attn.k_proj.weight", y["wk"]), (p + "self_attn.v_proj.weight", y["wv"]),
                (p + "self_attn.o_proj.weight", y["wo"]), (p + "post_attention_layernorm.weight", y["ffn_norm"]),
                (p + "mlp.gate_proj.weight", y["wg"]), (p + "mlp.up_proj.weight", y["wu"]),
                (p + "mlp.down_proj.weight", y["wd"])]
        for k, n in (("bq", "q_proj.bias"), ("bk", "k_proj.bias"), ("bv", "v_proj.bias"),
                     ("q_norm", "q_norm.weight"), ("k_norm", "k_norm.weight")):
            if k in y:
                out.append((p + "self_attn." + n, y[k]))
    return out


def write_hf_dir(d, cfg, w, dtype="F32", shards=1):
    """config.json and model.safetensors (or `shards` files and the index)."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    ts = hf_names(w, cfg)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), ts, dtype)
        return
    wmap = {}
    for s in range(shards):
        name = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = ts[s::shards]
        write_safetensors(os.path.join(d, name), part, dtype)
        wmap.update({t[0]: name for t in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, f)


def random_weights(cfg, seed, bias=False, qk_norm=False):
    """Random weights of an HF config (float32 values, as the file holds)."""
    r = np.random.default_rng(seed)
    dim, ffn, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    H = cfg["num_attention_heads"]
    K = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim", dim // H)
    V = cfg["vocab_size"]
    mat = lambda o, i: (r.uniform(-1, 1, (o, i)) * math.sqrt(3.0 / i)).astype(np.float32)
    near1 = lambda n: (1 + 0.2 * r.standard_normal(n)).astype(np.float32)
    w = {"embed": mat(V, dim), "norm": near1(dim), "lm_head": mat(V, dim), "layers": []}
    for _ in range(L):
        y = {"attn_norm": near1(dim), "ffn_norm": near1(dim), "wq": mat(H * D, dim), "wk": mat(K * D, dim),
             "wv": mat(K * D, dim), "wo": mat(dim, H * D), "wg": mat(ffn, dim), "wu": mat(ffn, dim),
             "wd": mat(dim, ffn)}
        if bias:
            y.update(bq=(0.5 * r.standard_normal(H * D)).astype(np.float32),
                     bk=(0.5 * r.standard_normal(K * D)).astype(np.float32),
                     bv=(0.5 * r.standard_normal(K * D)).astype(np.float32))
        if qk_norm:
            y.update(q_norm=near1(D) * 2, k_norm=near1(D) * 2)
        w["layers"].append(y)
    return w


def llama3_divisors(D, theta, factor, low, high, orig):
    div = []
    for p in range(D // 2):
        wavelen = 2 * math.pi / theta ** (-2.0 * p / D)
        if wavelen < orig / high:
            div.append(1.0)
        elif wavelen > orig / low:
            div.append(factor)
        else:
            s = (orig / wavelen - low) / (high - low)
            div.append(1.0 / ((1 - s) / factor + s))
    return np.array(div)


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, theta, div=None, style="neox"):
    """x [T, heads, D] rotated at positions pos [T]."""
    D = x.shape[-1]
    freq = theta ** (-2.0 * np.arange(D // 2) / D) / (1.0 if div is None else div)
    ang = pos[:, None] * freq[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if style == "neox":
        a, b = x[..., : D // 2], x[..., D // 2:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    ra, rb = a * c - b * s, a * s + b * c
    out = np.empty_like(x)
    if style == "neox":
        out[..., : D // 2], out[..., D // 2:] = ra, rb
    else:
        out[..., 0::2], out[..., 1::2] = ra, rb
    return out


def forward(w, cfg, tokens, use_bias=True, use_qk_norm=True, div=None, style="neox"):
    """float64 forward pass: (logits [T, V], colsum [L, H, T], keys [L, K, T, D])."""
    r = forward_all(w, cfg, tokens, use_bias, use_qk_norm, div, style)
    return r["logits"], r["colsum"], r["keys"]


def forward_all(w, cfg, tokens, use_bias=True, use_qk_norm=True, div=None, style="neox"):
    """float64 forward pass: {"logits" [T, V], "colsum" [L, H, T], "keys" [L, K, T, D] and
    "queries" [L, H, T, D] (after RoPE), "values" [L, K, T, D]}."""
    f = lambda a: np.asarray(a, dtype=np.float64)
    dim, H = cfg["hidden_size"], cfg["num_attention_heads"]
    K = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim", dim // H)
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    x = f(w["embed"])[tokens]
    colsum, keys, queries, values = [], [], [], []
    mask = np.tril(np.ones((T, T), dtype=bool))
    for y in w["layers"]:
        h = rmsnorm(x, f(y["attn_norm"]), eps)
        q, k, v = h @ f(y["wq"]).T, h @ f(y["wk"]).T, h @ f(y["wv"]).T
        if use_bias and "bq" in y:
            q, k, v = q + f(y["bq"]), k + f(y["bk"]), v + f(y["bv"])
        q, k, v = q.reshape(T, H, D), k.reshape(T, K, D), v.reshape(T, K, D)
        if use_qk_norm and "q_norm" in y:
            q, k = rmsnorm(q, f(y["q_norm"]), eps), rmsnorm(k, f(y["k_norm"]), eps)
        q, k = rope(q, pos, theta, div, style), rope(k, pos, theta, div, style)
        keys.append(k.transpose(1, 0, 2))
        queries.append(q.transpose(1, 0, 2))
        values.append(v.transpose(1, 0, 2))
        o = np.empty((T, H, D))
        cs = []
        for hh in range(H):
            g = hh // (H // K)
            s = q[:, hh] @ k[:, g].T / math.sqrt(D)
            s = np.where(mask, s, -np.inf)
            a = np.exp(s - s.max(1, keepdims=True))
            a /= a.sum(1, keepdims=True)
            cs.append(a.sum(0))
            o[:, hh] = a @ v[:, g]
        colsum.append(cs)
        x = x + o.reshape(T, H * D) @ f(y["wo"]).T
        h = rmsnorm(x, f(y["ffn_norm"]), eps)
        gt, up = h @ f(y["wg"]).T, h @ f(y["wu"]).T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ f(y["wd"]).T
    out = w["embed"] if cfg.get("tie_word_embeddings", False) else w["lm_head"]
    logits = rmsnorm(x, f(w["norm"]), eps) @ f(out).T
    return {"logits": logits, "colsum": np.array(colsum), "keys": np.array(keys), "queries": np.array(queries),
            "values": np.array(values)}
