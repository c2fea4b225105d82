"""The PyTorch peer of `kvtrace capture`: an eager forward of a random llama-3.2-1b (the
config of `random:llama-3.2-1b`: 16 layers, dim 2048, H = 32, K = 8, D = 64, FFN 8192, vocabulary
128,256 with tied embeddings, RoPE neox with llama3 scaling; float32 weights, uniform on [-a, a],
a = sqrt(3 / fan_in), norms ones) over the same token ids in prefill chunks of B, with the same
recording: /keys and /values [L, K, T, D] after RoPE, /queries [L, H, T, D], /attention/colsum
[L, H, T] (the attention every key received, summed in float64) and /logprobs [T], written with h5py
chunk by chunk as capture writes them.

  peer_capture_torch.py --tokens T --chunk 128 --threads 2 -o OUT.h5

Prints `peer-capture: tokens T seconds S tokens_per_s R blas CORE`: S from the first chunk to the
file closed (weight generation and torch's start-up excluded, as capture's `seconds` excludes the
model's load). Peak RSS is measured around the process (/usr/bin/time). Run with
OMP_WAIT_POLICY=PASSIVE and OPENBLAS_NUM_THREADS = --threads (torch's sgemm is OpenBLAS on Debian)."""
import argparse
import math
import sys
import time

import h5py
import numpy as np
import torch

from peer_sim_torch import blas_core

L, DIM, H, K, D, FFN, V = 16, 2048, 32, 8, 64, 8192, 128256
THETA, EPS = 500000.0, 1e-5


def rope_tables(T):
    """cos, sin [T, D/2] of neox RoPE with llama3 frequency scaling (factor 32, 1, 4, 8192)."""
    inv = THETA ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    wl = 2 * math.pi / inv
    lo, hi, factor, orig = 1.0, 4.0, 32.0, 8192.0
    smooth = ((orig / wl - lo) / (hi - lo)).clamp(0, 1)
    inv = torch.where(wl < orig / hi, inv, torch.where(wl > orig / lo, inv / factor,
                                                      (1 - smooth) * inv / factor + smooth * inv))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(x, cos, sin):  # x [n, b, D]; neox: halves (i, i + D/2)
    a, b = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


def weights(seed=1):
    g = torch.Generator().manual_seed(seed)

    def u(rows, fan_in):
        a = math.sqrt(3.0 / fan_in)
        return torch.empty(rows, fan_in).uniform_(-a, a, generator=g)
    layers = [dict(wq=u(H * D, DIM), wk=u(K * D, DIM), wv=u(K * D, DIM), wo=u(DIM, H * D), w1=u(FFN, DIM),
                   w3=u(FFN, DIM), w2=u(DIM, FFN)) for _ in range(L)]
    return u(V, DIM), layers


def rmsnorm(x):  # the norms' weights are ones
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def forward(tokens, B, emb, layers, out):
    T, G = len(tokens), H // K
    cos, sin = rope_tables(T)
    ck, cv = torch.zeros(L, K, T, D), torch.zeros(L, K, T, D)
    colsum = np.zeros((L, H, T))
    logprobs = np.full(T, np.nan, dtype=np.float32)
    ids = torch.from_numpy(tokens.astype(np.int64))
    for p0 in range(0, T, B):
        p1 = min(T, p0 + B)
        b = p1 - p0
        x = emb[ids[p0:p1]]
        c, s = cos[p0:p1], sin[p0:p1]
        mask = torch.arange(p1)[None, :] > torch.arange(p0, p1)[:, None]
        for ly, w in enumerate(layers):
            h = rmsnorm(x)
            q = rope((h @ w["wq"].T).view(b, H, D).transpose(0, 1), c, s)
            k = rope((h @ w["wk"].T).view(b, K, D).transpose(0, 1), c, s)
            ck[ly, :, p0:p1], cv[ly, :, p0:p1] = k, (h @ w["wv"].T).view(b, K, D).transpose(0, 1)
            sc = torch.matmul(q.reshape(K, G, b, D), ck[ly, :, None, :p1].transpose(-1, -2)) / math.sqrt(D)
            a = torch.softmax(sc.masked_fill_(mask, -math.inf), -1)
            colsum[ly, :, :p1] += a.sum(2).reshape(H, p1).double().numpy()
            o = torch.matmul(a, cv[ly, :, None, :p1]).reshape(H, b, D).transpose(0, 1).reshape(b, H * D)
            x = x + o @ w["wo"].T
            h = rmsnorm(x)
            x = x + (torch.nn.functional.silu(h @ w["w1"].T) * (h @ w["w3"].T)) @ w["w2"].T
            out["queries"][ly, :, p0:p1] = q.numpy()
            out["keys"][ly, :, p0:p1] = k.numpy()
            out["values"][ly, :, p0:p1] = cv[ly, :, p0:p1].numpy()
        lp = torch.log_softmax(rmsnorm(x) @ emb.T, -1)
        nxt = ids[p0 + 1:p1 + 1]
        logprobs[p0:p0 + len(nxt)] = lp[torch.arange(len(nxt)), nxt].numpy()
    out["attention/colsum"][...] = colsum.astype(np.float32)
    out["logprobs"][...] = logprobs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    T = a.tokens
    tokens = np.array([1 if i == 0 else 3 + (i * 7919) % 250 for i in range(T)], dtype=np.int32)
    emb, layers = weights()
    with torch.no_grad():
        t0 = time.perf_counter()
        with h5py.File(a.output, "w") as f:
            f["tokens"] = tokens
            for name, heads in (("queries", H), ("keys", K), ("values", K)):
                f.create_dataset(name, (L, heads, T, D), "f4", chunks=(1, 1, min(T, a.chunk), D))
            f.create_dataset("attention/colsum", (L, H, T), "f4")
            f.create_dataset("logprobs", (T,), "f4")
            forward(tokens, a.chunk, emb, layers, f)
        secs = time.perf_counter() - t0
    print("peer-capture: tokens %d seconds %.3f tokens_per_s %.1f blas %s threads %d" %
          (T, secs, T / secs, blas_core(), a.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
