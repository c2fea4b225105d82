"""The PyTorch peer of `kvtrace sim`: the same replay, vectorised over the kv heads of a layer and over
the policies that share a budget, for `tova` (scope=layer: one kept set per layer) and `keydiff`
(anchor=norm, metric=cos: one set per kv head). Per layer: the full-cache reference (o_full and the
log-sum-exp of every query head over its causal past: torch's fused flash-attention kernel for the CPU,
blocked over queries and keys, causal blocks skipped; a blockwise matmul where torch lacks it); then the
chunks of B over the trace, every (policy, budget) configuration advanced together
(docs/sim.md#the-eviction-step-step-by-step): candidates C = S ∪ chunk; the chunk's queries attend to the
visible candidates and are measured (one fused attention call per budget and chunk for all its
configurations, kv heads and query heads: rows (query head, position), the causal mask on the chunk's
own columns); if |C| > N the policy keeps N, higher score kept, exact ties to the later position.
While nothing has been evicted the candidates are the full cache: those queries get error exactly 0 and
recall exactly 1, as kvtrace, and no attention is computed for them. Metrics as docs/sim.md#metrics over
the queries i >= N: out_rel_err mean and p95 (linear), attn_recall (exp(lse_C - lse_full), capped at 1)
mean and min, per (layer, query head), then the mean over layers and heads (summary.csv's phase `all`
when prompt_len = T).

  peer_sim_torch.py TRACE --policies tova,keydiff --budgets 128,256 --chunk 64 --threads 2 -o OUT.npz
                    [--reference compute|recorded]

--reference recorded reads the trace's /attention/out and /attention/lse instead of computing them, as
`kvtrace sim` does when a trace has them (docs/sim.md#the-recorded-reference); the default computes them.
The next layer is read from the trace, and its reference computed, on a second thread while one is
replayed (the replay alone leaves a core partly idle between its small ops); glibc is told to keep
freed memory (mallopt) so that each chunk's temporaries do not fault in fresh pages.

Prints one line `peer-sim: seconds S blas CORE threads N` (S: from opening the trace to the last
metric, torch's import and start-up excluded; CORE: the OpenBLAS kernel when torch's BLAS is OpenBLAS,
else `torch-BLAS-CAPABILITY`, e.g. `torch-mkl-AVX512`) and writes OUT.npz: per configuration
`POLICY_N_summary` (the four means) and `POLICY_N_kept` [L, K, N] (sorted kept positions). Attention is
float32 (as kvtrace); scores and selection as kvtrace (tova: float32 mean of the layer's heads'
last-query weights, compared as doubles; keydiff: -cos(k_j, mean of the normalised keys) in float64).
Run with OMP_WAIT_POLICY=PASSIVE and OMP_NUM_THREADS (OPENBLAS_NUM_THREADS) = --threads."""
import argparse
import ctypes
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import torch

try:
    _FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
except (AttributeError, RuntimeError):
    _FLASH = None


def keep_freed_memory():
    """glibc: serve the replay's large temporaries (the attention outputs, ~1 MB a chunk) from the heap and
    keep what is freed, instead of mapping fresh zeroed pages for each (page faults dominated the
    elementwise ops on them)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: the largest glibc allows (32 MiB)
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def blas_core():
    """The OpenBLAS kernel this process runs when torch's sgemm is OpenBLAS; else torch's BLAS and CPU
    capability (`torch-mkl-AVX512`)."""
    with open("/proc/self/maps") as f:
        libs = sorted({ln.split()[-1] for ln in f if "openblas" in ln and ln.split()[-1].startswith("/")})
    for lib in libs:
        try:
            c = ctypes.CDLL(lib)
            c.openblas_get_corename.restype = ctypes.c_char_p
            return c.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    cfg = torch.__config__.show()
    blas = cfg.split("BLAS_INFO=")[-1].split(",")[0].strip() if "BLAS_INFO=" in cfg else "unknown"
    try:
        cap = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        cap = "unknown"
    return "torch-%s-%s" % (blas, cap.replace(" ", ""))


def attend(q, k, v, mask, causal, scale):
    """softmax(q k^T * scale + mask) v and its log-sum-exp: q [B, h, M, D], k and v [B, h, n, D]; mask
    additive [M, n] (0 or -inf) or None. -> out [B, h, M, D], lse [B, h, M] (float32)."""
    if _FLASH is not None:
        r = _FLASH(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)
        return r[0], r[1]
    s = torch.matmul(q, k.transpose(-1, -2)).mul_(scale)
    if causal:
        M, n = s.shape[-2:]
        s.masked_fill_(torch.ones(M, n, dtype=torch.bool).triu_(n - M + 1), -math.inf)
    elif mask is not None:
        s.add_(mask)
    m = s.amax(-1, keepdim=True)
    s.sub_(m).exp_()
    den = s.sum(-1, keepdim=True)
    o = torch.matmul(s, v).div_(den)
    return o, (m + den.log_())[..., 0]


def reference(q, k, v, scale, blk=256):
    """o_full [H, T, D] and lse [H, T] of every query head over its causal past (q [H, T, D], k and v
    [K, T, D]); query blocks of `blk` rows against the keys they see."""
    H, T, D = q.shape
    K = k.shape[0]
    G = H // K
    if _FLASH is not None:  # batch: the kv heads; heads: the group's query heads, sharing k and v (stride 0)
        o, lse = attend(q.view(K, G, T, D), k[:, None].expand(K, G, T, D), v[:, None].expand(K, G, T, D), None,
                        True, scale)
        return o.reshape(H, T, D), lse.reshape(H, T)
    ke, ve = k[:, None].expand(K, G, T, D), v[:, None].expand(K, G, T, D)
    out, lse = torch.empty_like(q), torch.empty(H, T)
    for t0 in range(0, T, blk):
        t1 = min(T, t0 + blk)
        o, m = attend(q.view(K, G, T, D)[:, :, t0:t1], ke[:, :, :t1], ve[:, :, :t1], None, True, scale)
        out[:, t0:t1], lse[:, t0:t1] = o.reshape(H, t1 - t0, D), m.reshape(H, t1 - t0)
    return out, lse


def select(scores, C, N):
    """Keep N per row: higher score, exact ties to the later position (C ascending per row). scores
    [..., n] double, C [..., n] -> [..., N] ascending."""
    n = scores.shape[-1]
    rev = torch.flip(scores, [-1])  # later positions first, so a stable sort keeps them ahead on ties
    order = torch.sort(rev, dim=-1, descending=True, stable=True).indices[..., :N]
    keep = torch.sort(n - 1 - order, dim=-1).values
    return torch.gather(C, -1, keep)


class Group:
    """The configurations of one budget N (policies P, in order): their kept sets S [P, K, m] and, per
    layer, their chunks' errors (before the division by ||o_full||) and log-sum-exps [P, K, G, T]."""

    def __init__(self, policies, N, K, G, T):
        self.policies, self.N = policies, N
        self.tova = policies.index("tova") if "tova" in policies else -1
        self.kd = [i for i, p in enumerate(policies) if p == "keydiff"]
        P = len(policies)
        self.err = torch.zeros(P, K, G, T)
        self.lse = torch.empty(P, K, G, T)
        self.start(K)

    def start(self, K):
        """A new layer: nothing kept, nothing evicted."""
        self.S = torch.empty(len(self.policies), K, 0, dtype=torch.long)
        self.evicted, self.first = False, None  # first: the end of the chunk of the first eviction
        self.err.zero_()


def scores_of(g, C, kc, q_last, ly, scale):
    """The candidates' scores [P, K, n] (double) of group g's policies. C [P, K, n] the candidates (rows
    of the layer's flattened keys), kc [P, K, n, D] their keys (float32), q_last [K, G, D] the chunk's
    last query of every head."""
    P, K, n = C.shape
    sc = torch.empty(P, K, n, dtype=torch.float64)
    if g.tova >= 0:  # the chunk's last query, mean over all the layer's heads (float32), as doubles
        s = torch.matmul(q_last, kc[g.tova].transpose(-1, -2))  # [K, G, n]
        a = torch.softmax(s.mul_(scale), -1)
        sc[g.tova] = (a.view(-1, n).sum(0) / a.shape[0] / a.shape[1]).double()
    for i in g.kd:  # keydiff: -cos(k_j, mu), mu the mean of the normalised keys, float64
        kd, nrm = kc[i].double(), ly["knorm"][C[i]]  # [K, n, D], [K, n]
        mu = torch.bmm((1.0 / nrm)[:, None], kd)[:, 0].div_(n)  # [K, D]
        dots = torch.bmm(kd, mu[:, :, None])[..., 0]
        den = nrm * torch.linalg.vector_norm(mu, dim=-1)[:, None]
        sc[i] = torch.where(den > 0, -dots / den, torch.zeros((), dtype=torch.float64))
    return sc


def replay_layer(groups, q, k, v, ref, B, masks):
    """One layer, every group's configurations advanced chunk by chunk together. Candidates are held as
    rows of the layer's keys flattened to [K*T, D] (kv head x, position j: x*T + j), ascending per row."""
    H, T, D = q.shape
    K = k.shape[0]
    G = H // K
    scale = 1.0 / math.sqrt(D)
    o_full, lse_full = ref
    of = o_full.view(K, G, T, D)
    qg = q.view(K, G, T, D)
    kf, vf = k.reshape(K * T, D), v.reshape(K * T, D)
    base = torch.arange(K)[:, None] * T
    ly = {"knorm": torch.linalg.vector_norm(k.double(), dim=-1).view(-1)}
    for g in groups:
        g.start(K)
    for p0 in range(0, T, B):
        p1 = min(p0 + B, T)
        b = p1 - p0
        chunk = base + torch.arange(p0, p1)  # [K, b]
        qc = None
        for g in groups:
            P, m = g.S.shape[0], g.S.shape[2]
            n = m + b
            C = torch.cat([g.S, chunk.expand(P, K, b)], -1) if m else chunk.expand(P, K, b)  # [P, K, n]
            if not g.evicted and n <= g.N:  # the full cache, nothing to measure or evict: S = C
                g.S = C
                continue
            kc = kf.index_select(0, C.reshape(-1)).view(P, K, n, D)
            if g.evicted:  # every query of the chunk is measured (i >= p0 > N)
                if qc is None:  # rows (query head, position) of each kv head
                    qc = qg[:, :, p0:p1].reshape(1, K, G * b, D)
                key = (b, n)
                if key not in masks:
                    tri = torch.ones(b, b, dtype=torch.bool).triu_(1)
                    mk = torch.zeros(b, n)
                    mk[:, n - b:].masked_fill_(tri, -math.inf)
                    masks[key] = mk.repeat(G, 1)
                vc = vf.index_select(0, C.reshape(-1)).view(P, K, n, D)
                o, lse = attend(qc.expand(P, K, G * b, D), kc, vc, masks[key], False, scale)
                o = o.view(P, K, G, b, D).sub_(of[:, :, p0:p1])
                g.err[:, :, :, p0:p1] = torch.linalg.vector_norm(o, dim=-1)
                g.lse[:, :, :, p0:p1] = lse.view(P, K, G, b)
            # else: not evicted yet: the measured queries' error 0 and recall 1 exactly (set at the end)
            if n > g.N:
                sc = scores_of(g, C, kc, qg[:, :, p1 - 1], ly, scale)
                g.S = select(sc, C, g.N)
                if not g.evicted:
                    g.evicted, g.first = True, p1
            else:
                g.S = C
    out = []
    for g in groups:  # per configuration: errors and recalls [H, T - N] of the queries i >= N (double)
        N = min(g.N, T)
        fn = torch.linalg.vector_norm(o_full[:, N:], dim=-1).double()
        e = torch.where(fn > 0, g.err.view(-1, H, T)[:, :, N:].double() / fn, 0.0)  # 0 when o_full = 0
        r = torch.exp(g.lse.view(-1, H, T)[:, :, N:].double() - lse_full[:, N:].double()).clamp_(max=1.0)
        full = (g.first if g.evicted else T) - N  # the queries up to the first eviction saw the full cache
        e[:, :, :full] = 0.0
        r[:, :, :full] = 1.0
        for i in range(len(g.policies)):
            out.append((e[i], r[i], g.S[i] - base))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--policies", default="tova,keydiff")
    ap.add_argument("--budgets", default="128,256")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reference", choices=("compute", "recorded"), default="compute",
                    help="compute the full-cache reference (default), or read the trace's /attention/out and "
                         "/attention/lse as `kvtrace sim` does when the trace has them")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    keep_freed_memory()
    policies, budgets = a.policies.split(","), [int(x) for x in a.budgets.split(",")]
    for p in policies:
        if p not in ("tova", "keydiff"):
            sys.exit("peer-sim: error: policy %s: only tova and keydiff are replayed here" % p)
    t0 = time.perf_counter()
    res = {}
    with torch.inference_mode(), h5py.File(a.trace, "r") as f:
        L, H, T, D = f["queries"].shape
        K = f["keys"].shape[1]
        groups = [Group(policies, N, K, H // K, T) for N in budgets]
        acc = {(p, N): ([], [], []) for N in budgets for p in policies}
        masks = {}

        names = ["queries", "keys", "values"]
        if a.reference == "recorded":
            if "attention/out" not in f or "attention/lse" not in f:
                sys.exit("peer-sim: error: %s has no recorded reference (/attention/out, /attention/lse)" % a.trace)
            names += ["attention/out", "attention/lse"]

        def read(ly):  # one layer's Q, K, V as float32 tensors and its reference (recorded or computed)
            q, k, v, *rec = [torch.from_numpy(np.asarray(f[d][ly], dtype=np.float32)) for d in names]
            with torch.inference_mode():
                return q, k, v, (rec if rec else reference(q, k, v, 1.0 / math.sqrt(D)))

        with ThreadPoolExecutor(1) as pool:  # the next layer is read while this one is replayed
            nxt = pool.submit(read, 0)
            for ly in range(L):
                q, k, v, ref = nxt.result()
                if ly + 1 < L:
                    nxt = pool.submit(read, ly + 1)
                res_ly = iter(replay_layer(groups, q, k, v, ref, a.chunk, masks))
                for N in budgets:
                    for p in policies:
                        e, r, S = next(res_ly)
                        acc[(p, N)][0].append(e)
                        acc[(p, N)][1].append(r)
                        acc[(p, N)][2].append(S.numpy().astype(np.int32))
    for (p, N), (E, R, S) in acc.items():
        E, R = torch.stack(E).numpy(), torch.stack(R).numpy()  # [L, H, queries]
        if E.shape[-1] == 0:  # no query i >= N: nothing measured (kvtrace reports nan)
            summ = np.full(4, np.nan)
        else:
            summ = np.array([E.mean(-1).mean(), np.percentile(E, 95, axis=-1).mean(), R.mean(-1).mean(),
                             R.min(-1).mean()])
        res["%s_%d_summary" % (p, N)] = summ
        res["%s_%d_kept" % (p, N)] = np.stack(S)
    secs = time.perf_counter() - t0
    np.savez(a.output, **res)
    print("peer-sim: seconds %.3f blas %s threads %d" % (secs, blas_core(), a.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
