"""The PyTorch peer of `kvtrace sim`: the same replay, vectorised over the kv heads of a
layer, for `tova` (scope=layer: one kept set per layer) and `keydiff` (anchor=norm, metric=cos: one set
per kv head). Per layer: the full-cache reference (o_full and the log-sum-exp of every query head,
blockwise, causal); then per (policy, budget) the chunks of B over the trace (docs/sim.md#the-eviction-step-step-by-step: candidates
C = S ∪ chunk; the chunk's queries attend to the visible candidates and are measured; if |C| > N the
policy keeps N, higher score kept, exact ties to the later position). Metrics as docs/sim.md#metrics over the
queries i >= N: out_rel_err mean and p95 (linear), attn_recall mean and min, per (layer, query head),
then the mean over layers and heads (summary.csv's phase `all` when prompt_len = T).

  peer_sim_torch.py TRACE --policies tova,keydiff --budgets 128,256 --chunk 64 --threads 2 -o OUT.npz

Prints one line `peer-sim: seconds S blas CORE` (S: from opening the trace to the last metric, torch's
import and start-up excluded) and writes OUT.npz: per configuration `POLICY_N_summary` (the four means)
and `POLICY_N_kept` [L, K, N] (sorted kept positions). Attention is float32 (torch.matmul: OpenBLAS
sgemm under Debian's torch), scores and selection as kvtrace (tova: float32 mean of the heads' last-query
weights; keydiff in float64). Run with OMP_WAIT_POLICY=PASSIVE and OPENBLAS_NUM_THREADS = --threads."""
import argparse
import ctypes
import math
import sys
import time

import h5py
import numpy as np
import torch


def blas_core():
    """The OpenBLAS kernel this process runs (torch's sgemm is libblas.so.3 -> OpenBLAS on Debian)."""
    with open("/proc/self/maps") as f:
        libs = sorted({ln.split()[-1] for ln in f if "openblas" in ln and ln.split()[-1].startswith("/")})
    for lib in libs:
        try:
            c = ctypes.CDLL(lib)
            c.openblas_get_corename.restype = ctypes.c_char_p
            return c.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return "not-OpenBLAS(%s)" % torch.__config__.show().split("BLAS_INFO=")[-1].split(",")[0]


def reference(q, k, v, blk=128):
    """o_full [K, G, T, D] and lse [K, G, T] of every query head over its causal past."""
    K, G, T, D = q.shape
    out, lse = torch.empty_like(q), torch.empty(K, G, T)
    pos = torch.arange(T)
    for t0 in range(0, T, blk):
        t1 = min(T, t0 + blk)
        s = torch.matmul(q[:, :, t0:t1], k[:, None, :t1].transpose(-1, -2)) / math.sqrt(D)
        s.masked_fill_(pos[None, :t1] > pos[t0:t1, None], -math.inf)
        m = torch.logsumexp(s, -1)
        lse[:, :, t0:t1] = m
        out[:, :, t0:t1] = torch.matmul(torch.exp(s - m[..., None]), v[:, None, :t1])
    return out, lse


def select(scores, C, N):
    """Keep N per row: higher score, exact ties to the later position (C ascending per row)."""
    rev = torch.flip(scores, [1])  # later positions first, so a stable sort keeps them ahead on ties
    order = torch.sort(rev, dim=1, descending=True, stable=True).indices[:, :N]
    keep = torch.sort(C.shape[1] - 1 - order, dim=1).values
    return torch.gather(C, 1, keep)


def replay(q, k, v, ref, policy, N, B):
    """One layer: per (kv head, group head) the lists of errors and recalls of the queries i >= N; kept sets."""
    K, G, T, D = q.shape
    o_full, lse_full = ref
    rows = torch.arange(K)[:, None]
    S = torch.empty(K, 0, dtype=torch.long)
    errs, recs = [], []
    for p0 in range(0, T, B):
        p1 = min(p0 + B, T)
        C = torch.cat([S, torch.arange(p0, p1).expand(K, -1)], 1)
        n, b = C.shape[1], p1 - p0
        kc, vc = k[rows, C], v[rows, C]
        s = torch.matmul(q[:, :, p0:p1], kc[:, None].transpose(-1, -2)) / math.sqrt(D)  # [K, G, b, n]
        s.masked_fill_(torch.arange(n)[None, :] > (n - b + torch.arange(b))[:, None], -math.inf)
        lse = torch.logsumexp(s, -1)
        a = torch.exp(s - lse[..., None])
        e0 = max(p0, N)
        if e0 < p1:
            o = torch.matmul(a[:, :, e0 - p0:], vc[:, None])
            f = o_full[:, :, e0:p1]
            errs.append(torch.linalg.vector_norm(o - f, dim=-1) / torch.linalg.vector_norm(f, dim=-1))
            recs.append(torch.exp(lse[:, :, e0 - p0:] - lse_full[:, :, e0:p1]))
        if n > N:
            if policy == "tova":  # the chunk's last query, mean over all the layer's heads (float32)
                sc = a[:, :, -1].reshape(K * G, n).sum(0) / (K * G)
                C = select(sc.double()[None], C[:1], N).expand(K, -1)
            else:  # keydiff: -cos(k_j, mean of the normalised keys), float64
                kd = kc.double()
                nrm = torch.linalg.vector_norm(kd, dim=-1)
                mu = (kd / nrm[..., None]).mean(1)
                sc = -(kd @ mu[:, :, None])[..., 0] / (nrm * torch.linalg.vector_norm(mu, dim=-1)[:, None])
                C = select(sc, C, N)
        S = C
    return torch.cat(errs, -1).double(), torch.cat(recs, -1).double(), S


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--policies", default="tova,keydiff")
    ap.add_argument("--budgets", default="128,256")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    policies, budgets = a.policies.split(","), [int(x) for x in a.budgets.split(",")]
    for p in policies:
        if p not in ("tova", "keydiff"):
            sys.exit("peer-sim: error: policy %s: only tova and keydiff are replayed here" % p)
    t0 = time.perf_counter()
    res = {}
    with h5py.File(a.trace, "r") as f:
        L, H, T, D = f["queries"].shape
        K = f["keys"].shape[1]
        acc = {(p, N): ([], [], []) for p in policies for N in budgets}
        for ly in range(L):
            q = torch.from_numpy(f["queries"][ly]).view(K, H // K, T, D)
            k, v = torch.from_numpy(f["keys"][ly]), torch.from_numpy(f["values"][ly])
            ref = reference(q, k, v)
            for p in policies:
                for N in budgets:
                    e, r, S = replay(q, k, v, ref, p, N, a.chunk)
                    acc[(p, N)][0].append(e.reshape(H, -1))
                    acc[(p, N)][1].append(r.reshape(H, -1))
                    acc[(p, N)][2].append(S.numpy().astype(np.int32))
    for (p, N), (E, R, S) in acc.items():
        E, R = torch.stack(E).numpy(), torch.stack(R).numpy()  # [L, H, queries]
        res["%s_%d_summary" % (p, N)] = np.array([E.mean(-1).mean(), np.percentile(E, 95, axis=-1).mean(),
                                                  R.mean(-1).mean(), R.min(-1).mean()])
        res["%s_%d_kept" % (p, N)] = np.stack(S)
    secs = time.perf_counter() - t0
    np.savez(a.output, **res)
    print("peer-sim: seconds %.3f blas %s threads %d" % (secs, blas_core(), a.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
