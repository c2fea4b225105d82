"""chunkkv against numpy written from kvpress's chunkkv_press.py (not from policies/chunkkv.c):
(1) one chunk holding the whole prompt (T a multiple of the chunk size, N a multiple too), no decode:
sim keeps exactly the chunks the source keeps; (2) chunked replay with decode against a numpy replay of
the chunked definition (docs/policies.md: whole chunks while they fit, the next filled by the base score,
exactly N); bases knorm, keydiff and snapkv (test_sim.py's numpy snapkv); (3) 1 and 2 threads agree. TAP."""
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
from tap import check, finish  # noqa: E402
import policy_trace as pt  # noqa: E402
from policy_trace import run_sim  # noqa: E402
import test_sim  # noqa: E402  (its numpy snapkv; D = 8 there and here)

L, H, K, D = 2, 4, 2, 8


def write_trace(path, T, P, seed):
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=D) + rng.normal(size=(L, K, T, D)) * rng.uniform(0.2, 2, size=(L, K, T, 1))
    pt.write_trace(path, keys, rng.normal(size=(L, K, T, D)), 1.5 * rng.normal(size=(L, H, T, D)), P,
                   creator="test_chunkkv")


def base_scores(base, q, k, C, now, G):
    kc = k[C]
    if base == "knorm":
        return -np.linalg.norm(kc, axis=1)
    if base == "keydiff":  # anchor=norm, metric=cos (docs/policies.md)
        kn = kc / np.linalg.norm(kc, axis=1, keepdims=True)
        mu = kn.mean(0)
        return -(kn @ mu) / np.linalg.norm(mu)
    if base == "snapkv":
        return test_sim.snapkv_scores(q, k[None], C, now, len(q), 32, 5)
    raise ValueError(base)


def source_keep(scores, size, N):
    """chunkkv_press.py: chunk means, the top int(n_chunks * (1 - ratio)) chunks kept whole."""
    T = len(scores)
    full, rem = T // size, T % size
    cs = [scores[c * size:(c + 1) * size].mean() for c in range(full)] + ([scores[-rem:].mean()] if rem else [])
    n_keep = max(1, int((full + (rem > 0)) * (1 - (1 - N / T))))
    top = np.argsort(-np.array(cs), kind="stable")[:n_keep]
    return np.sort(np.concatenate([np.arange(c * size, min((c + 1) * size, T)) for c in top]))


def exact_keep(scores, pos, size, N):
    """The chunked definition: chunks by mean (ties: later chunk), whole while they fit, the next by the
    base score (ties: later position)."""
    n = len(scores)
    chunks = [np.arange(a, min(a + size, n)) for a in range(0, n, size)]
    order = sorted(range(len(chunks)), key=lambda c: (-scores[chunks[c]].mean(), -c))
    keep = []
    for c in order:
        idx = chunks[c]
        if len(keep) + len(idx) <= N:
            keep += list(idx)
        else:
            rest = sorted(idx, key=lambda i: (-scores[i], -pos[i]))
            keep += rest[:N - len(keep)]
            break
    return np.sort(np.array(keep, dtype=np.int64))


def replay(q, k, base, T, P, N, B, dc, size):
    G = len(q)
    S, p0 = np.array([], dtype=np.int64), 0
    while p0 < T:
        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
        C = np.concatenate([S, np.arange(p0, p1)])
        if len(C) > N:
            C = C[exact_keep(base_scores(base, q, k, C, p1 - 1, G), C, size, N)]
        S = C
        p0 = p1
    return S


def kept(out, params, N):
    return pt.kept(out, "chunkkv", params, N)


def load(trace):
    return pt.load(trace)[:2]


def source_case(tmp):
    T, size = 40, 5
    trace = os.path.join(tmp, "one.h5")
    write_trace(trace, T, T, 1)
    out = os.path.join(tmp, "one")
    budgets = [5, 10, 25]
    r = run_sim(trace, out, ["chunkkv:base=knorm:size=5", "chunkkv:base=keydiff:size=5"], budgets, 64, 1)
    check(r.returncode == 0, "sim runs chunkkv (one chunk)", r.stderr)
    q, k = load(trace)
    bad = []
    for base in ("knorm", "keydiff"):
        for N in budgets:
            got = kept(out, "base=%s:size=5" % base, N)
            for l in range(L):
                for g in range(K):
                    s = base_scores(base, q[l, 2 * g:2 * g + 2], k[l, g], np.arange(T), T - 1, 2)
                    want = source_keep(s, size, N)
                    if list(want) != got[l][g]:
                        bad.append((base, N, l, g, list(want), got[l][g]))
    check(not bad, "one chunk = the whole prompt: chunkkv keeps the source's chunks (knorm, keydiff bases)",
          "\n".join(map(str, bad[:3])))


def chunked_case(tmp, T, P, B, dc, budgets, what):
    trace = os.path.join(tmp, "c_%d_%d.h5" % (B, dc))
    write_trace(trace, T, P, B * 10 + dc)
    out = os.path.join(tmp, "c_%d_%d" % (B, dc))
    cfgs = [("knorm", 5), ("keydiff", 3), ("snapkv", 4)]
    r = run_sim(trace, out, ["chunkkv:base=%s:size=%d" % c for c in cfgs], budgets, B, dc)
    check(r.returncode == 0, "sim runs chunkkv (%s)" % what, r.stderr)
    if r.returncode:
        return None
    q, k = load(trace)
    G = H // K
    bad = []
    for base, size in cfgs:
        for N in budgets:
            got = kept(out, "base=%s:size=%d" % (base, size), N)
            for l in range(L):
                for g in range(K):
                    want = replay(q[l, g * G:(g + 1) * G], k[l, g], base, T, P, N, B, dc, size)
                    if list(want) != got[l][g]:
                        bad.append((base, size, N, l, g, list(want), got[l][g]))
    check(not bad, "chunkkv kept sets equal numpy's chunked definition (%s)" % what, "\n".join(map(str, bad[:3])))
    return trace, out


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-chunkkv-")
    try:
        source_case(tmp)
        chunked_case(tmp, 61, 40, 4, 1, [8, 19], "chunks of 4, decode 1")
        res = chunked_case(tmp, 61, 40, 7, 3, [8, 19, 100], "chunks of 7, decode chunks of 3")
        if res:
            trace, a = res
            same, msg = pt.one_thread_same(trace, a, ["chunkkv:base=knorm:size=5", "chunkkv:base=keydiff:size=3",
                                                      "chunkkv:base=snapkv:size=4"], [8, 19, 100], 7, 3)
            check(same, "chunkkv: results.csv equal for 1 and 2 threads", msg)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
