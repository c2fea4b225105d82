"""The policies that score from key, value and query statistics (cur, lagkv,
qfilter, expected_attention) against numpy written here from their sources
(kvpress's presses and the papers), not from the C: (1) one chunk holding the
whole prompt, no decode: sim keeps what the source's scoring keeps (top N,
ties to the later position); (2) small chunks and decode: sim's kept sets equal
a brute-force chunked replay of the documented chunked version
(docs/policies.md). Kept sets at many budgets pin the whole ranking. TAP."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
L, H, K, D = 1, 4, 2, 8
G = H // K


def write_trace(path, T, P, style="neox", theta=10000.0, factors=None, seed=3):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["kvtrace_schema"] = np.array([1, 0], dtype=np.int32)
        for k, v in dict(creator="test_policies_stats", model_name="stats", architecture="llama", rope_style=style,
                         capture_mode="full", storage_dtype="f32").items():
            a[k] = v
        for k, v in dict(n_layers=L, n_heads=H, n_kv_heads=K, head_dim=D, n_tokens=T, prompt_len=P,
                         vocab_size=100, capture_chunk=0).items():
            a[k] = np.int64(v)
        a["rope_theta"] = theta
        if factors is not None:
            a["rope_scaling"] = "rope_freqs.weight"
            a["rope_freq_factors"] = np.asarray(factors, dtype=np.float64)
        f["tokens"] = rng.integers(0, 100, T).astype(np.int32)
        scale = np.exp(rng.normal(size=(L, K, T, 1)) * 0.5)  # varied norms
        f["keys"] = (rng.normal(size=D) + rng.normal(size=(L, K, T, D)) * scale).astype(np.float32)
        f["values"] = (rng.normal(size=(L, K, T, D)) * scale[..., ::-1, :]).astype(np.float32)
        qmean = rng.normal(size=(1, H, 1, D)) * 1.5
        f["queries"] = (qmean + rng.normal(size=(L, H, T, D))).astype(np.float32)


def run_sim(trace, out, policies, budgets, B, dc=1):
    return subprocess.run([KVTRACE, "sim", trace, "--policies", ",".join(policies), "--budgets",
                           ",".join(map(str, budgets)), "--chunk", str(B), "--decode-chunk", str(dc),
                           "--threads", "2", "--quiet", "-o", out], capture_output=True, text=True)


def kept_sets(out, specs, budgets):
    """{(spec as given, budget): retained [L][K] lists} from results.h5, whose runs come in sim's
    order (policy-major as given, budgets as given) and name each configuration canonically."""
    got = {}
    with h5py.File(os.path.join(out, "results.h5"), "r") as rh:
        for i, name in enumerate(sorted(rh["runs"])):
            g = rh["runs"][name]
            spec, N = specs[i // len(budgets)], budgets[i % len(budgets)]
            if spec.split(":")[0] != g.attrs["policy"] or int(g.attrs["budget"]) != N:
                raise AssertionError("run %s is %s at %d, not %s at %d" % (name, g.attrs["config"],
                                                                          int(g.attrs["budget"]), spec, N))
            r = g["retained"][:]
            got[(spec, N)] = [[[int(y) for y in r[l, k] if y >= 0] for k in range(K)] for l in range(L)]
    return got


def top_n(scores, pos, N):
    """kvtrace's rule: highest scores, ties to the later position; ascending positions."""
    order = sorted(range(len(pos)), key=lambda i: (-scores[i], -pos[i]))
    return sorted(int(pos[i]) for i in order[:N])


# ---- the sources' scores, whole prompt at once (kvpress semantics) -------------

def cur_source(k, v, sinks=4, w=16, lev="kv_product"):
    """kvpress CURPress: squared norms, each over its (zero padded) window of w, combined, sinks set to 1."""
    n = len(k)
    k2, v2 = (k ** 2).sum(-1), (v ** 2).sum(-1)
    pad = (w - n % w) % w
    k2 = np.pad(k2, (0, pad)).reshape(-1, w)
    v2 = np.pad(v2, (0, pad)).reshape(-1, w)
    with np.errstate(invalid="ignore", divide="ignore"):
        k2 = np.nan_to_num(k2 / k2.sum(-1, keepdims=True)).reshape(-1)[:n]
        v2 = np.nan_to_num(v2 / v2.sum(-1, keepdims=True)).reshape(-1)[:n]
    s = {"kv_product": k2 * v2, "kv_avg": (k2 + v2) / 2, "key": k2, "value": v2}[lev]
    s = s / s.sum()
    s[:sinks] = 1.0
    return s


def lag_states(x, lag):
    """kvpress LagKVPress._get_states_score on [parts][lag][D]."""
    ref, cur = x[1:], x[:-1]
    lo, hi = ref.min(1, keepdims=True), ref.max(1, keepdims=True)
    sd = ((cur - lo) / (hi - lo)).std(-1, ddof=1)
    e = np.exp(sd - sd.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def lagkv_source(k, v, sinks=4, lag=128, cross=False):
    n = len(k)
    if n < sinks + 2 * lag:
        s = np.ones(n)
        s[sinks:] = np.arange(n - sinks) / (n - sinks)
        return s
    end = sinks + ((n - sinks) // lag) * lag
    tail = lag + n - end
    ks = lag_states(k[sinks:end].reshape(-1, lag, k.shape[1]), lag)
    vs = lag_states(v[sinks:end].reshape(-1, lag, v.shape[1]), lag)
    s = (ks + vs) / 2
    if not cross:
        s = s.argsort(-1, kind="stable").argsort(-1, kind="stable") / lag
    return np.concatenate([np.ones(sinks), s.reshape(-1), np.ones(tail)])


# ---- the chunked versions (docs/policies.md), one step's scores over C ---------

def cur_chunked(kC, vC, C, sinks=4, w=16, lev="kv_product"):
    s = cur_source(kC, vC, 0, w, lev)
    return np.where(C < sinks, np.inf, s)


def lagkv_chunked(kC, vC, C, sinks=4, lag=128, cross=False):
    s0 = int((C < sinks).sum())
    s = lagkv_source(kC, vC, s0, lag, cross)
    m = len(C) - s0
    s[:s0] = np.inf
    if m >= 2 * lag:
        end = s0 + (m // lag) * lag
        s[end - lag:] = np.inf
    return s


def brute(score_fn, ks, vs, N, B, T, P, dc=1):
    """The chunked replay of one kv head: candidates C = S ∪ chunk; |C| > N keeps top N."""
    S = np.array([], dtype=np.int64)
    p0 = 0
    while p0 < T:
        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
        C = np.concatenate([S, np.arange(p0, p1)])
        if len(C) > N:
            s = score_fn(C, p1 - 1)
            C = np.array(top_n(s, C, N), dtype=np.int64)
        S = C
        p0 = p1
    return [int(x) for x in S]


def compare(name, got, want):
    bad = [(key, want[key], got.get(key)) for key in want if got.get(key) != want[key]]
    check(not bad, name, "\n".join("%s: want %s\n  got %s" % (b[0], b[1], b[2]) for b in bad[:3]))


def no_attention_policies(tmp):
    T = 300
    trace = os.path.join(tmp, "kv.h5")
    write_trace(trace, T, T)
    with h5py.File(trace, "r") as f:
        k, v = f["keys"][0].astype(np.float64), f["values"][0].astype(np.float64)
    cfgs = {"cur": lambda kk, vv: cur_source(kk, vv),
            "cur:leverage=kv_avg:window=7": lambda kk, vv: cur_source(kk, vv, 4, 7, "kv_avg"),
            "lagkv": lambda kk, vv: lagkv_source(kk, vv),
            "lagkv:lag=16": lambda kk, vv: lagkv_source(kk, vv, 4, 16),
            "lagkv:lag=10:scoring=softmax:sinks=2": lambda kk, vv: lagkv_source(kk, vv, 2, 10, True)}
    budgets = [1, 5, 40, 100, 164, 200, 299]
    out = os.path.join(tmp, "one_chunk")
    r = run_sim(trace, out, list(cfgs), budgets, T)
    check(r.returncode == 0, "sim runs cur and lagkv with one chunk", r.stderr)
    if r.returncode:
        return
    got = kept_sets(out, list(cfgs), budgets)
    for c, fn in cfgs.items():
        want = {}
        for N in budgets:
            want[(c, N)] = [[top_n(fn(k[g], v[g]), np.arange(T), N) for g in range(K)]]
        compare("%s, one chunk holding the whole prompt: keeps what the source's scoring keeps" % c,
                {key: got.get(key) for key in want}, want)
    return trace, k, v


def no_attention_chunked(tmp, trace, k, v):
    T = 300
    P = 200
    trace2 = os.path.join(tmp, "kv_dec.h5")
    write_trace(trace2, T, P, seed=4)
    with h5py.File(trace2, "r") as f:
        k, v = f["keys"][0].astype(np.float64), f["values"][0].astype(np.float64)
    fns = {"cur": lambda g, C, now: cur_chunked(k[g][C], v[g][C], C),
           "cur:window=5": lambda g, C, now: cur_chunked(k[g][C], v[g][C], C, 4, 5),
           "lagkv:lag=8": lambda g, C, now: lagkv_chunked(k[g][C], v[g][C], C, 4, 8),
           "lagkv:lag=6:scoring=softmax": lambda g, C, now: lagkv_chunked(k[g][C], v[g][C], C, 4, 6, True)}
    budgets = [12, 30, 64]
    for B, dc in ((16, 1), (37, 5)):
        out = os.path.join(tmp, "chunked_%d" % B)
        r = run_sim(trace2, out, list(fns), budgets, B, dc)
        check(r.returncode == 0, "sim runs cur and lagkv in chunks of %d" % B, r.stderr)
        if r.returncode:
            continue
        got = kept_sets(out, list(fns), budgets)
        for c, fn in fns.items():
            want = {(c, N): [[brute(lambda C, now, g=g: fn(g, C, now), k[g], v[g], N, B, T, P, dc)
                                 for g in range(K)]] for N in budgets}
            compare("%s, chunks of %d, decode %d: kept sets equal the chunked replay in numpy" % (c, B, dc),
                    {key: got.get(key) for key in want}, want)


def qfilter_u(Qs):
    """Q-Filters: the top right-singular vector of the stacked queries, signed so that <u, q> > 0 on average."""
    Q = np.concatenate(Qs, 0)
    if len(Q) == 0:
        return np.zeros(D)
    u = np.linalg.svd(Q, full_matrices=False)[2][0]
    return u if (Q @ u).sum() >= 0 else -u


def query_policies(tmp):
    T, P = 120, 90
    trace = os.path.join(tmp, "q.h5")
    write_trace(trace, T, P, seed=7)
    with h5py.File(trace, "r") as f:
        q, k = f["queries"][0].astype(np.float64), f["keys"][0].astype(np.float64)
    heads = lambda g: range(g * G, (g + 1) * G)  # noqa: E731
    # calib=prompt with one chunk holding the prompt: the source's filter from the whole prompt
    budgets = [3, 20, 45, 89]
    out = os.path.join(tmp, "qf_prompt")
    r = run_sim(trace, out, ["qfilter:calib=prompt"], budgets, P, 1)
    check(r.returncode == 0, "sim runs qfilter:calib=prompt", r.stderr)
    if r.returncode == 0:
        got = kept_sets(out, ["qfilter:calib=prompt"], budgets)
        U = [qfilter_u([q[h, :P] for h in heads(g)]) for g in range(K)]
        want = {("qfilter:calib=prompt", N): [[brute(lambda C, now, g=g: k[g][C] @ U[g], None, None, N, P, T, P)
                                               for g in range(K)]] for N in budgets}
        compare("qfilter:calib=prompt, one chunk holding the prompt then decode: the prompt's filter", got, want)
    # calib=stream in chunks: the queries of every position so far
    budgets = [10, 33]
    for B in (P, 16):
        out = os.path.join(tmp, "qf_stream_%d" % B)
        r = run_sim(trace, out, ["qfilter"], budgets, B, 3)
        check(r.returncode == 0, "sim runs qfilter in chunks of %d" % B, r.stderr)
        if r.returncode:
            continue
        got = kept_sets(out, ["qfilter"], budgets)
        want = {("qfilter", N): [[brute(lambda C, now, g=g: k[g][C] @ qfilter_u([q[h, :now + 1] for h in heads(g)]),
                                        None, None, N, B, T, P, 3) for g in range(K)]] for N in budgets}
        compare("qfilter (calib=stream), chunks of %d: the filter of the queries so far" % B, got, want)
    return trace


def rope_np(x, t, style, theta, factors):
    """RoPE of rows x [n][D] at positions t [n] as Hugging Face (neox: rotate_half) or llama.cpp
    (interleaved pairs) apply it; factors divide the frequencies."""
    inv = 1.0 / theta ** (np.arange(0, D, 2) / D) / (np.ones(D // 2) if factors is None else factors)
    ang = np.outer(t, inv)
    if style == "neox":
        cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))
        rot = np.concatenate([-x[:, D // 2:], x[:, :D // 2]], 1)
        return x * cos + rot * sin
    y = x.copy()
    c, s_ = np.cos(ang), np.sin(ang)
    y[:, 0::2] = x[:, 0::2] * c - x[:, 1::2] * s_
    y[:, 1::2] = x[:, 0::2] * s_ + x[:, 1::2] * c
    return y


def mean_rotation(p0, n, style, theta, factors):
    """kvpress's R̄: the mean over positions p0 .. p0+n-1 of the RoPE matrices (columns: RoPE of e_d)."""
    R = np.zeros((D, D))
    for t in range(p0, p0 + n):
        R += rope_np(np.eye(D), np.full(D, t), style, theta, factors).T
    return R / n


def ea_scores(q_post, kC, vC, first, now, style, theta, factors, n_future=512, eps=0.01):
    """kvpress ExpectedAttentionPress on the candidates kC (sinks already removed): statistics of the
    pre-RoPE queries at positions first..now of each head, rotated by R̄ of now+1..now+n_future."""
    R = mean_rotation(now + 1, n_future, style, theta, factors)
    a = np.zeros(len(kC))
    for qh in q_post:
        pre = rope_np(qh[first:now + 1], -np.arange(first, now + 1), style, theta, factors)
        mu = pre.mean(0) if len(pre) else np.zeros(D)
        cov = (pre - mu).T @ (pre - mu) / len(pre) if len(pre) else np.zeros((D, D))
        mu, cov = R @ mu, R @ cov @ R.T
        z = kC @ mu / np.sqrt(D) + np.einsum("nd,de,ne->n", kC, cov, kC) / D / 2
        e = np.exp(z - z.max())
        a += e / e.sum() / len(q_post)
    return (a + eps) * np.linalg.norm(vC, axis=1)


def expected_attention(tmp):
    T = 70
    heads = lambda g: range(g * G, (g + 1) * G)  # noqa: E731
    ff = np.array([1.0, 2.0, 4.0, 8.0])
    for style, factors in (("neox", None), ("interleaved", ff)):
        trace = os.path.join(tmp, "ea_%s.h5" % style)
        write_trace(trace, T, T, style=style, theta=500.0, factors=factors, seed=11)
        with h5py.File(trace, "r") as f:
            q, k, v = (f[x][0].astype(np.float64) for x in ("queries", "keys", "values"))
        # the pre-RoPE recovery itself: rotate then unrotate is the identity
        x = np.random.default_rng(1).normal(size=(5, D))
        t = np.arange(5) * 13
        check(np.allclose(rope_np(rope_np(x, t, style, 500.0, factors), -t, style, 500.0, factors), x),
              "numpy RoPE (%s): unrotate after rotate is the identity" % style)
        specs = ["expected_attention", "expected_attention:epsilon=0:n_future=9:sinks=2"]
        pars = [(4, 512, 0.01), (2, 9, 0.0)]
        budgets = [1, 10, 30, 60]
        out = os.path.join(tmp, "ea_one_%s" % style)
        r = run_sim(trace, out, specs, budgets, T)
        check(r.returncode == 0, "sim runs expected_attention (%s) with one chunk" % style, r.stderr)
        if r.returncode:
            continue
        got = kept_sets(out, specs, budgets)
        for spec, (sinks, nf, eps) in zip(specs, pars):
            want = {}
            for N in budgets:
                sets = []
                for g in range(K):
                    s = ea_scores([q[h] for h in heads(g)], k[g][sinks:], v[g][sinks:], sinks, T - 1, style, 500.0,
                                  factors, nf, eps)
                    s = np.concatenate([np.full(sinks, s.max() + 1), s])  # the source pads the sinks with max + 1
                    sets.append(top_n(s, np.arange(T), N))
                want[(spec, N)] = [sets]
            compare("%s (%s RoPE%s), one chunk holding the prompt: keeps what kvpress's scoring keeps"
                    % (spec, style, ", frequency factors" if factors is not None else ""), got, want)
        out = os.path.join(tmp, "ea_chunked_%s" % style)
        budgets = [12, 25]
        r = run_sim(trace, out, specs, budgets, 16)
        check(r.returncode == 0, "sim runs expected_attention (%s) in chunks of 16" % style, r.stderr)
        if r.returncode:
            continue
        got = kept_sets(out, specs, budgets)
        for spec, (sinks, nf, eps) in zip(specs, pars):
            def fn(C, now, g, sinks=sinks, nf=nf, eps=eps):
                keep = C >= sinks
                s = np.full(len(C), np.inf)
                s[keep] = ea_scores([q[h] for h in heads(g)], k[g][C[keep]], v[g][C[keep]], sinks, now, style,
                                    500.0, factors, nf, eps)
                return s
            want = {(spec, N): [[brute(lambda C, now, g=g: fn(C, now, g), None, None, N, 16, T, T)
                                 for g in range(K)]] for N in budgets}
            compare("%s (%s), chunks of 16: statistics of the past queries only" % (spec, style), got, want)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        res = no_attention_policies(tmp)
        if res:
            no_attention_chunked(tmp, *res)
        query_policies(tmp)
        expected_attention(tmp)
    finish()


if __name__ == "__main__":
    main()
