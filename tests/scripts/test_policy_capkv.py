"""capkv against numpy written from kvpress's cap_press.py (not from policies/capkv.c):
(1) one chunk holding the whole prompt, no decode: sim keeps exactly what the source's scoring keeps
(queries before RoPE through the source's rotation matrices, both RoPE layouts); (2) chunked replay with
decode against a numpy replay of the chunked definition (docs/policies.md); (3) 1 and 2 threads give the
same results. TAP."""
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402
import policy_trace as pt  # noqa: E402
from policy_trace import run_sim  # noqa: E402

L, H, K, D, THETA = 2, 4, 2, 8, 10000.0


def write_trace(path, T, P, style, seed):
    rng = np.random.default_rng(seed)
    keys = 0.5 * rng.normal(size=D) + rng.normal(size=(L, K, T, D))
    values = rng.normal(size=(L, K, T, D)) * rng.uniform(0.7, 1.4, size=(L, K, T, 1))
    # queries before RoPE near one direction per head, so that the anchor decides the weights
    pre = 2 * rng.normal(size=(L, H, 1, D)) + 0.5 * rng.normal(size=(L, H, T, D))
    queries = np.einsum("tab,lhtb->lhta", np.stack([rope_matrix(t, style) for t in range(T)]), pre)
    pt.write_trace(path, keys, values, queries, P, rope_style=style, rope_theta=THETA, creator="test_capkv")


def rope_matrix(pos, style):
    """The source's R(pos) = cos I + sin rotate_half (neox), or the same on adjacent pairs (interleaved)."""
    freq = THETA ** (-np.arange(0, D, 2) / D)
    R = np.zeros((D, D))
    for p, w in enumerate(freq):
        a, b = (p, p + D // 2) if style == "neox" else (2 * p, 2 * p + 1)
        c, s = np.cos(pos * w), np.sin(pos * w)
        R[a, a], R[a, b], R[b, a], R[b, b] = c, -s, s, c
    return R


def cap_scores(q_pre_sum, keys, vals, n_q, now, style, sinks=4, future=512, tau=5.0, eps=1e-6):
    """cap_press.py's score for one kv group: queries before RoPE summed over the positions seen
    (per head), the keys and values of the candidates; sinks = the candidates before `sinks`."""
    rbar = np.mean([rope_matrix(p, style) for p in range(now + 1, now + 1 + future)], axis=0)
    ks, vs = keys[sinks:], vals[sinks:]
    total = np.zeros(len(ks))
    for j in range(len(q_pre_sum)):
        mu = rbar @ (q_pre_sum[j] / max(n_q, 1))
        mu = mu / max(np.linalg.norm(mu), 1e-12)
        kn = ks / np.maximum(np.linalg.norm(ks, axis=1, keepdims=True), 1e-12)
        logit = tau * np.clip(kn @ mu, -1, 1)
        w = np.exp(logit - logit.max())
        sv = vs * np.sqrt(w + eps)[:, None]
        A = np.eye(D) + sv.T @ sv
        lev = np.sum(vs.T * np.linalg.solve(A, vs.T), axis=0)
        total += w * lev
    total /= len(q_pre_sum)
    return np.concatenate([np.full(min(sinks, len(keys)), np.inf), total])


def select(scores, pos, N):
    order = sorted(range(len(pos)), key=lambda i: (-scores[i], -pos[i]))
    return np.sort(np.array(order[:N]))


def replay(q, k, v, T, P, N, B, dc, style, **kw):
    """The chunked definition: each chunk's queries (positions >= sinks) summed before RoPE, then the
    source's score over the candidates with now = the chunk's end."""
    sinks = kw.get("sinks", 4)
    qs = np.zeros((len(q), D))
    n_q, S, p0 = 0, np.array([], dtype=np.int64), 0
    while p0 < T:
        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
        C = np.concatenate([S, np.arange(p0, p1)])
        for i in range(max(p0, sinks), p1):
            qs += np.stack([rope_matrix(i, style).T @ q[j, i] for j in range(len(q))])
            n_q += 1
        if len(C) > N:
            n_sink = int(np.sum(C < sinks))
            s = cap_scores(qs, k[C], v[C], n_q, p1 - 1, style, sinks=n_sink,
                           **{x: y for x, y in kw.items() if x != "sinks"})
            C = C[select(s, C, N)]
        S = C
        p0 = p1
    return S


CONFIGS = [("capkv", "eps=1e-06:future=512:sinks=4:tau=5", {}),
           ("capkv:tau=20", "eps=1e-06:future=512:sinks=4:tau=20", dict(tau=20.0)),
           ("capkv:future=8:tau=2:sinks=2", "eps=1e-06:future=8:sinks=2:tau=2", dict(future=8, tau=2.0, sinks=2))]


def compare(tmp, style, T, P, B, dc, budgets, what):
    trace = os.path.join(tmp, "t_%s_%d_%d.h5" % (style, B, dc))
    write_trace(trace, T, P, style, seed=B + dc)
    out = os.path.join(tmp, "r_%s_%d_%d" % (style, B, dc))
    r = run_sim(trace, out, [c[0] for c in CONFIGS], budgets, B, dc)
    check(r.returncode == 0, "sim runs capkv (%s)" % what, r.stderr)
    if r.returncode:
        return
    bad = []
    q, k, v = pt.load(trace)
    G = H // K
    for spec, params, kw in CONFIGS:
        for N in budgets:
            got = pt.kept(out, "capkv", params, N)
            for l in range(L):
                for g in range(K):
                    want = replay(q[l, g * G:(g + 1) * G], k[l, g], v[l, g], T, P, N, B, dc, style, **kw)
                    if list(want) != list(got[l][g]):
                        bad.append((spec, N, l, g, list(want), got[l][g]))
    check(not bad, "capkv kept sets equal numpy's (%s)" % what, "\n".join(map(str, bad[:3])))
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-capkv-")
    try:
        for style in ("neox", "interleaved"):  # the source's case: one chunk, the whole prompt, no decode
            compare(tmp, style, 40, 40, 64, 1, [6, 17, 30], "one chunk = the whole prompt, %s: the source" % style)
        compare(tmp, "neox", 45, 32, 7, 3, [6, 17], "chunks of 7, decode chunks of 3")
        a = compare(tmp, "interleaved", 45, 32, 5, 1, [9], "chunks of 5, decode 1, interleaved")
        if a:
            same, msg = pt.one_thread_same(os.path.join(tmp, "t_interleaved_5_1.h5"), a, [c[0] for c in CONFIGS],
                                           [9], 5, 1)
            check(same, "capkv: results.csv equal for 1 and 2 threads", msg)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
