"""Fits learned_weights.npy (used by learned_weights.py) on a kvtrace trace by least squares.

For every layer and kv head and every 32nd position t, the candidates are the positions 0..t; the target of
candidate j is the attention the next 32 queries give it (softmax over the keys each can see, mean over the
kv group's query heads and the 32 queries); the features are learned_weights.features(). Run with Debian's
python (numpy, h5py):

    kvtrace demo -o out/demo            # or any capture with --record keys,queries
    /usr/bin/python3 examples/python/make_learned_weights.py out/demo/trace.h5 examples/python/learned_weights.npy
"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learned_weights import features  # noqa: E402

HORIZON = 32


def attention(q, k):
    """q [H][T][D], k [T][D] -> causal softmax [H][T][T]."""
    T = k.shape[0]
    s = q @ k.T / np.sqrt(k.shape[1])
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def main(trace, out):
    with h5py.File(trace, "r") as f:
        keys, queries = f["keys"][:].astype(np.float64), f["queries"][:].astype(np.float64)
    L, K, T, _ = keys.shape
    group = queries.shape[1] // K
    X, y = [], []
    for layer in range(L):
        for h in range(K):
            a = attention(queries[layer, h * group:(h + 1) * group], keys[layer, h]).mean(axis=0)   # [T][T]
            for t in range(HORIZON, T - HORIZON, HORIZON):
                pos = np.arange(t + 1)
                X.append(features(keys[layer, h, :t + 1], pos, t))
                y.append(a[t + 1:t + 1 + HORIZON, :t + 1].mean(axis=0))
    X, y = np.concatenate(X), np.concatenate(y)
    w, *_ = np.linalg.lstsq(X, y, rcond=None)
    np.save(out, w.astype(np.float64))
    print("%s: weights %s from %d candidates of %s" % (out, np.array2string(w, precision=4), len(y), trace))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: make_learned_weights.py TRACE OUT.npy")
    main(sys.argv[1], sys.argv[2])
