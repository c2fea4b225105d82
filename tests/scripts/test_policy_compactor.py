"""compactor against numpy written from kvpress's compactor_press.py, leverage_press.py and
non_causal_attention_press.py (not from policies/compactor.c): (1) one chunk holding the whole prompt, no
decode: sim keeps what the source keeps (one kv head per layer, where the source's z-score over a layer's kv
heads is the per-head one; the Gaussian sketch is kvtrace's generator, core/rng.c, re-implemented here);
(2) chunked replay with decode against numpy's replay of the chunked definition (docs/policies.md);
(3) 1 and 2 threads agree; (4) in-model eviction refuses it (it reads every candidate's own query). TAP."""
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, finish  # noqa: E402
import policy_trace as pt  # noqa: E402
from policy_trace import run_sim  # noqa: E402
from kvrng import Rng  # noqa: E402  (core/rng.c restated)

L, H, D, THETA = 2, 2, 8, 10000.0


def rope_matrix(pos):
    """neox RoPE: pair (p, p + D/2) turned by pos * theta^(-2p/D)."""
    R = np.zeros((D, D))
    for p, w in enumerate(THETA ** (-np.arange(0, D, 2) / D)):
        a, b = p, p + D // 2
        c, s = np.cos(pos * w), np.sin(pos * w)
        R[a, a], R[a, b], R[b, a], R[b, b] = c, -s, s, c
    return R


def zscore(x):
    return (x - x.mean()) / max(x.std(ddof=1), 1e-6) if len(x) > 1 else np.zeros(len(x))


def source_scores(kpre, k, v, q, phi, ratio, first=8, last=4, chunk=256, blending=None):
    """CompactorPress.score for one kv head: kpre/k/v [S][D] (before RoPE / cached), q [G][S][D] (post-RoPE)."""
    S = len(k)
    left = min(first, S)
    right = min(last, max(0, S - left))
    sl = slice(left, S - right)
    # LeverageScorePress: centre, right sketch, Cholesky of XᵀX + 0.01 I, diag(X G⁻¹ Xᵀ), z-score
    X = (kpre[sl] - kpre[sl].mean(0)) @ phi
    G = X.T @ X
    G = 0.5 * (G + G.T) + 1e-2 * np.eye(len(G))
    lev = np.maximum(np.sum(X * np.linalg.solve(G, X.T).T, axis=1), 0)
    lz = zscore(lev)
    # NonCausalAttnPress: unscaled softmax within chunks, column sums, mean over the group, × ‖v‖, pool 3, z-score
    kk, m = k[sl], S - left - right
    A = np.zeros(m)
    for g in range(len(q)):
        qq = q[g][sl]
        for c0 in range(0, m, chunk):
            dots = qq[c0:c0 + chunk] @ kk[c0:c0 + chunk].T
            e = np.exp(dots - dots.max(1, keepdims=True))
            A[c0:c0 + chunk] += (e / e.sum(1, keepdims=True)).sum(0)
    A = A / len(q) * np.linalg.norm(v[sl], axis=1)
    pooled = np.convolve(np.concatenate([[0], A, [0]]), np.ones(3) / 3, mode="valid")
    az = zscore(pooled)
    b = ratio if blending is None else blending
    s = b * lz + az
    top = s.max() + 1 if m else 0
    return np.concatenate([np.full(left, top), s, np.full(right, top)])


def write_trace(path, T, P, K, seed):
    rng = np.random.default_rng(seed)
    kpre = rng.normal(size=D) + rng.normal(size=(L, K, T, D)) * rng.uniform(0.3, 2, size=(L, K, T, 1))
    kpre[:, :, ::7] *= 3  # a few outliers for the leverage
    keys = np.einsum("tab,lktb->lkta", np.stack([rope_matrix(t) for t in range(T)]), kpre)
    values = rng.normal(size=(L, K, T, D)) * rng.uniform(0.5, 1.5, size=(L, K, T, 1))
    queries = 0.7 * rng.normal(size=(L, K * H, T, D))  # H query heads per kv head
    pt.write_trace(path, keys, values, queries, P, rope_theta=THETA, creator="test_compactor")
    return kpre


def sketch(seed, layer, kv, step, k):
    r = Rng(seed, layer, kv, step)
    return np.array([r.normal() for _ in range(D * k)]).reshape(D, k) / math.sqrt(k)


def select(scores, pos, N):
    order = sorted(range(len(pos)), key=lambda i: (-scores[i], -pos[i]))
    return np.sort(np.array(order[:N]))


def source_case(tmp):
    T = 60
    trace = os.path.join(tmp, "one.h5")
    kpre = write_trace(trace, T, T, 1, 3)
    out = os.path.join(tmp, "one")
    cfgs = [("", dict()), ("sketch=5:chunk=16", dict(k=5, chunk=16)), ("blending=2:chunk=25:sketch=6",
                                                                          dict(k=6, chunk=25, blending=2.0))]
    budgets = [15, 30, 47]
    r = run_sim(trace, out, ["compactor" + (":" + c if c else "") for c, _ in cfgs], budgets, 64, 1)
    check(r.returncode == 0, "sim runs compactor (one chunk)", r.stderr)
    if r.returncode:
        return
    q, k, v = pt.load(trace)
    bad = []
    for spec, kw in cfgs:
        params = "blending=%s:chunk=%d:first=8:last=4:seed=0:sketch=%d" % (
            "%g" % kw.get("blending", -1), kw.get("chunk", 256), kw.get("k", 48))
        for N in budgets:
            got = pt.kept(out, "compactor", params, N)
            for l in range(L):
                phi = sketch(0, l, 0, 0, kw.get("k", 48))
                s = source_scores(kpre[l, 0], k[l, 0], v[l, 0], q[l], phi, 1 - N / T, chunk=kw.get("chunk", 256),
                                  blending=kw.get("blending"))
                want = np.sort(np.argsort(-s, kind="stable")[:N])  # topk(scores, N)
                if list(want) != got[l][0]:
                    bad.append((spec, N, l, list(want), got[l][0]))
    check(not bad, "one chunk = the whole prompt: compactor keeps what CompactorPress keeps (3 configs, 3 budgets)",
          "\n".join(map(str, bad[:3])))


def replay(kpre, k, v, q, T, P, N, B, dc, layer, kv, ksk, chunk):
    S, p0, step = np.array([], dtype=np.int64), 0, 0
    while p0 < T:
        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
        C = np.concatenate([S, np.arange(p0, p1)])
        if len(C) > N:
            phi = sketch(0, layer, kv, step, ksk)
            s = source_scores(kpre[C], k[C], v[C], q[:, C], phi, 1 - N / len(C), chunk=chunk)
            lo, hi = min(8, len(C)), max(min(8, len(C)), len(C) - 4)
            s[:lo], s[hi:] = np.inf, np.inf
            C = C[select(s, C, N)]
        S, p0, step = C, p1, step + 1
    return S


def chunked_case(tmp):
    T, P, B, dc, K = 70, 45, 9, 4, 2
    trace = os.path.join(tmp, "c.h5")
    kpre = write_trace(trace, T, P, K, 5)
    out = os.path.join(tmp, "c")
    pols, budgets = ["compactor:sketch=4:chunk=10"], [14, 25]
    r = run_sim(trace, out, pols, budgets, B, dc)
    check(r.returncode == 0, "sim runs compactor (chunks of 9, decode chunks of 4)", r.stderr)
    if r.returncode:
        return
    q, k, v = pt.load(trace)
    G = H
    bad = []
    for N in budgets:
        got = pt.kept(out, "compactor", "blending=-1:chunk=10:first=8:last=4:seed=0:sketch=4", N)
        for l in range(L):
            for g in range(K):
                want = replay(kpre[l, g], k[l, g], v[l, g], q[l, g * G:(g + 1) * G], T, P, N, B, dc, l, g, 4, 10)
                if list(want) != got[l][g]:
                    bad.append((N, l, g, list(want), got[l][g]))
    check(not bad, "compactor kept sets equal numpy's chunked replay (sketch and z-scores per step and head)",
          "\n".join(map(str, bad[:3])))
    same, msg = pt.one_thread_same(trace, out, pols, budgets, B, dc)
    check(same, "compactor: results.csv equal for 1 and 2 threads", msg)


def refusal_case():
    model = os.environ.get("KVTRACE_MODEL_DIR")
    r = subprocess.run([os.environ["KVTRACE"], "capture", "--evict", "compactor", "--budget", "8", "--prompt", "x",
                        "-o", "/nonexistent/never.h5"], capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "compactor" in lines[0] and "offline only" in lines[0],
          "capture --evict compactor is refused (exit 2, one line)", "%s %r %s" % (r.returncode, r.stderr, model))


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-compactor-")
    try:
        source_case(tmp)
        chunked_case(tmp)
        refusal_case()
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
