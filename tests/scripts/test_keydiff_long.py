"""keydiff over long runs against a numpy replay written from docs/policies.md (not from the C):
T = 3072 tokens, a prompt of 1024 in chunks of 64 then 2048 decode steps of one token (2,064
steps per stream), budgets 64 and 200, anchor norm and pairwise, window 0 and 0.25, D = 64 and
D = 36 (odd column tails). Keys around a shared mean with zero keys and exact repeats (exact
ties, broken by position). numpy computes each step from scratch: each key's norm in the
documented order (16 double lanes, halves added, then the tail), k/‖k‖ as k·(1/‖k‖) rounded to a
multiple of 2^-36 (ties to even), the sum of all candidates, the scores, the selection of docs/sim.md#the-eviction-step-step-by-step.
sim's final kept sets must equal numpy's; steps where two numpy scores at the cut differ by less
than 1e-12 relative without being equal (near-ties, where the dot products' order could decide)
are counted and must be none. TAP."""
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402
import policy_trace as pt  # noqa: E402

L, K, T, P, B = 1, 2, 3072, 1024, 64
BUDGETS = [64, 200]
CONFIGS = [("keydiff", "anchor=norm:metric=cos:window=0"), ("keydiff:anchor=pairwise", "anchor=pairwise:metric=cos:window=0"),
           ("keydiff:window=0.25", "anchor=norm:metric=cos:window=0.25")]


def write_trace(path, D, seed):
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=D) + 0.8 * rng.normal(size=(L, K, T, D))
    keys[:, :, 100::997] = 0.0                          # zero keys
    keys[:, :, 2000:2040] = keys[:, :, 500:540]         # exact repeats
    values = rng.normal(size=(L, K, T, D))
    queries = rng.normal(size=(L, K, T, D))
    pt.write_trace(path, keys, values, queries, P, creator="test_keydiff_long")
    return keys.astype(np.float32).astype(np.float64)


def norms(k):
    """sqrt of Σ k² in 16 lanes over the blocks of 16, lanes l and l+8 added, then l and l+4, then
    (0+2)+(1+3), then the columns past the last block one by one."""
    D = k.shape[1]
    full = D // 16 * 16
    a = np.zeros((len(k), 16))
    for b in range(0, full, 16):
        a += k[:, b:b + 16] * k[:, b:b + 16]
    s = a[:, :8] + a[:, 8:]
    t = s[:, :4] + s[:, 4:]
    r = (t[:, 0] + t[:, 2]) + (t[:, 1] + t[:, 3])
    for d in range(full, D):
        r = r + k[:, d] * k[:, d]
    return np.sqrt(r)


def scores(k, nk, pairwise, window, N, pos):
    inv = np.where(nk > 0, 1.0 / np.where(nk > 0, nk, 1.0), 0.0)
    unit = np.round(k * inv[:, None] * 2.0 ** 36) / 2.0 ** 36  # a multiple of 2^-36, ties to even
    S = unit.sum(0)                                             # exact: every partial sum is
    n = len(k)
    if pairwise:
        dots = (k * S).sum(1)
        s = np.where(nk > 0, -(dots / np.where(nk > 0, nk, 1.0) - 1.0) / (n - 1), 0.0)
    else:
        mu = S / n
        nmu = np.sqrt((mu * mu).sum())
        dots = (k * mu).sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):   # zero keys: cos 0
            s = np.where((nk > 0) & (nmu > 0), -np.clip(dots / (nk * nmu), -1, 1), 0.0)
    w = int(np.floor(window * N))
    if w:
        s[np.argsort(pos)[-w:]] = np.inf
    return s


def replay(keys, pairwise, window, N):
    """The final kept positions and the near-ties met at the cut."""
    S = np.array([], dtype=np.int64)
    near = 0
    p0 = 0
    while p0 < T:
        p1 = min(p0 + (B if p0 < P else 1), P if p0 < P else T)
        C = np.concatenate([S, np.arange(p0, p1)])
        if len(C) > N:
            k = keys[C]
            s = scores(k, norms(k), pairwise, window, N, C)
            order = np.lexsort((-C, -s))            # by score, then the later position first
            a, b = s[order[N - 1]], s[order[N]]
            if a != b and np.isfinite(a) and abs(a - b) <= 1e-12 * max(abs(a), abs(b)):
                near += 1
            C = np.sort(C[order[:N]])
        S, p0 = C, p1
    return list(S), near


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-keydiff-long-")
    try:
        for D, seed in ((64, 24), (36, 25)):
            trace = os.path.join(tmp, "t%d.h5" % D)
            keys = write_trace(trace, D, seed)
            out = os.path.join(tmp, "r%d" % D)
            r = pt.run_sim(trace, out, [c[0] for c in CONFIGS], BUDGETS, B, 1)
            check(r.returncode == 0, "sim runs (D=%d)" % D, r.stderr)
            if r.returncode:
                continue
            for spec, params in CONFIGS:
                pairwise, window = "pairwise" in params, float(params.rsplit("=", 1)[1])
                for N in BUDGETS:
                    got = pt.kept(out, "keydiff", params, N)
                    bad, near = [], 0
                    for l in range(L):
                        for g in range(K):
                            want, nt = replay(keys[l, g], pairwise, window, N)
                            near += nt
                            if [int(x) for x in got[l][g]] != [int(x) for x in want]:
                                bad.append((l, g, sorted(set(got[l][g]) ^ set(want))[:8]))
                    check(not bad and near == 0, "%s N=%d D=%d: kept sets after 2,064 steps equal numpy's from "
                          "scratch (near-ties at the cut: %d)" % (spec, N, D, near), str(bad))
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
