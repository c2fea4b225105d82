"""make bench (Hugging Face checkpoints): random:llama-3.2-1b written here as a BF16
Hugging Face directory (config.json with llama3 rope scaling and tied embeddings,
the weights in two safetensors shards and their index), then `kvtrace capture` of
it at T = 1024: load time (safetensors mapped, BF16 matrices held in place) and capture
tokens/s, next to the load time of random:llama-3.2-1b (weights generated in
memory; its capture rate at T = 1024 is bench_capture.sh's row, the same walk).

The weights are uniform on [-a, a], a = sqrt(3 / fan_in), as random:NAME's, drawn
once into a pool per fan-in and written out cyclically, so writing 2.5 GB takes
seconds rather than minutes of random numbers."""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KV = os.path.join(ROOT, "build", "kvtrace")
T = int(os.environ.get("BENCH_HF_TOKENS", "1024"))
CHUNK = os.environ.get("BENCH_CHUNK", "128")
POOL = (1 << 22) + 7  # not a multiple of any row width: rows do not repeat in step

CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
       "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
       "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "rms_norm_eps": 1e-5,
       "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": True,
       "hidden_act": "silu", "torch_dtype": "bfloat16",
       "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}


def bf16(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def tensors():
    """(name, shape, fan_in or 0 for ones) in file order."""
    c = CFG
    dim, ffn, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    out = [("model.embed_tokens.weight", (V, dim), dim), ("model.norm.weight", (dim,), 0)]
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", (dim,), 0), (p + "self_attn.q_proj.weight", (q, dim), dim),
                (p + "self_attn.k_proj.weight", (kv, dim), dim), (p + "self_attn.v_proj.weight", (kv, dim), dim),
                (p + "self_attn.o_proj.weight", (dim, q), q), (p + "post_attention_layernorm.weight", (dim,), 0),
                (p + "mlp.gate_proj.weight", (ffn, dim), dim), (p + "mlp.up_proj.weight", (ffn, dim), dim),
                (p + "mlp.down_proj.weight", (dim, ffn), ffn)]
    return out


def write_shard(path, items, pools):
    head, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in items:
        n = 2 * math.prod(shape)
        head[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, shape, fan in items:
            n = math.prod(shape)
            pool = pools[fan]
            while n > 0:
                k = min(n, len(pool) // 2)
                f.write(pool[: 2 * k])
                n -= k
    return off


def write_dir(d):
    rng = np.random.default_rng(0)
    pools = {0: bf16(np.ones(POOL)).tobytes()}
    for fan in {t[2] for t in tensors()} - {0}:
        pools[fan] = bf16(rng.uniform(-1, 1, POOL) * math.sqrt(3.0 / fan)).tobytes()
    os.makedirs(d)
    json.dump(CFG, open(os.path.join(d, "config.json"), "w"), indent=1)
    ts = tensors()
    half = len(ts) // 2
    wmap, total = {}, 0
    for i, part in enumerate((ts[:half], ts[half:])):
        name = "model-%05d-of-00002.safetensors" % (i + 1)
        total += write_shard(os.path.join(d, name), part, pools)
        wmap.update({t[0]: name for t in part})
    json.dump({"metadata": {"total_size": total}, "weight_map": wmap},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
    return total


def capture(model, tokens, out):
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", KV, "capture", "--quiet", "--stats", "--model", model,
                        "--tokens", tokens, "--chunk", CHUNK, "--force", "-o", out], capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit("bench_hf: capture of %s failed: %s" % (model, r.stderr.strip()))
    stats = next(l for l in r.stderr.splitlines() if l.startswith("capture-stats:")).split()[1:]
    v = {stats[i]: float(stats[i + 1]) for i in range(0, len(stats) - 1, 2)}
    v["rss_mib"] = int(r.stderr.strip().splitlines()[-1]) / 1024
    v["wall"] = wall
    return v


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-bench-hf-")
    try:
        d = os.path.join(tmp, "llama-3.2-1b-bf16")
        t0 = time.time()
        nbytes = write_dir(d)
        wrote = time.time() - t0
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            f.write(" ".join(str(1 if i == 0 else 3 + (i * 7919) % 250) for i in range(T)))
        print("HF BF16 directory of llama-3.2-1b: %.2f GB in 2 shards, written in %.1f s" % (nbytes / 1e9, wrote))
        print("%-34s %6s %8s %10s %10s %10s" % ("model", "T", "load_s", "tokens/s", "rss_MiB", "wall_s"))
        one = os.path.join(tmp, "one")
        with open(one, "w") as f:
            f.write("1")
        for label, model, toks, n in (("HF dir BF16 (random:llama-3.2-1b)", d, tokens, T),
                                      ("random:llama-3.2-1b (load only)", "random:llama-3.2-1b:1", one, 1)):
            v = capture(model, toks, os.path.join(tmp, "t.h5"))
            print("%-34s %6d %8.2f %10.1f %10.0f %10.1f" % (label, n, v["load_s"], v["tokens_per_s"], v["rss_mib"],
                                                          v["wall"]))
            sys.stdout.flush()
        print("(load_s: model_load alone: the HF row maps the shards and uses the BF16 matrices in place, "
              "docs/capture.md)")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
