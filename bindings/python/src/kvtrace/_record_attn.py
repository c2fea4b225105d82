"""The recorder's attention: exact causal softmax attention of one chunk of queries over the whole
layer cache, computed blockwise, with what a trace keeps of it (docs/trace.md).

For a chunk of t queries at positions p0 .. p0+t-1 and a cache of Tc = p0 + t keys it forms at most
`max_block` scores at a time (query heads × query rows × Tc; never T × T over the sequence): scores
by a float32 matmul, the exponentials in float32, each row's sum in float64 (as core/attn_causal.c
does), the outputs by a float32 matmul divided by that sum, the log-sum-exp in float64, and the
softmax weights in float64 summed down each key's column; each row's largest score (/attention/max) on
request.
"""
import torch

MAX_BLOCK = 1 << 24   # scores per block: 64 MiB of float32 (and the same block's weights in float64)


def attend_chunk(q, k, v, scale, max_block=MAX_BLOCK, colsum=True, row_max=False):
    """q [H, t, D] (the model's queries), k, v [K, Tc, D] (the cache after this chunk's update), the
    scores q.k * scale. Query head h reads kv head h // (H/K). Returns (out [H, t, D] float32,
    lse [H, t] float64, col [H, Tc] float64 or None): col[h, j] = sum over this chunk's queries i of
    a[h, i, j]; with row_max, a fourth: mx [H, t] float32, the largest score of each row. Blocks: kv heads (each with its G = H/K query heads, which share its keys: no copy)
    times query rows, at most max_block scores each."""
    H, t, D = q.shape
    K, Tc = k.shape[0], k.shape[1]
    G = H // K
    p0 = Tc - t
    dev = q.device
    q4 = q.float().reshape(K, G, t, D)
    k, v = k.float(), v.float()
    out = torch.empty((K, G, t, D), dtype=torch.float32, device=dev)
    lse = torch.empty((K, G, t), dtype=torch.float64, device=dev)
    mx = torch.empty((K, G, t), dtype=torch.float32, device=dev) if row_max else None
    col = torch.zeros((K, G, Tc), dtype=torch.float64, device=dev) if colsum else None
    rows = t if G * t * Tc <= max_block else max(1, max_block // (G * Tc))
    heads = max(1, min(K, max_block // (G * rows * Tc)))
    key_pos = torch.arange(Tc, device=dev)
    for r0 in range(0, t, rows):
        r1 = min(t, r0 + rows)
        r = r1 - r0
        masked = key_pos[None, :] > (p0 + torch.arange(r0, r1, device=dev))[:, None]   # [r, Tc]: key j after query i
        for g0 in range(0, K, heads):
            g1 = min(K, g0 + heads)
            qb = q4[g0:g1, :, r0:r1].reshape(g1 - g0, G * r, D)
            s = torch.matmul(qb, k[g0:g1].transpose(1, 2)).mul_(scale)                # [kb, G*r, Tc]
            s = s.view(g1 - g0, G, r, Tc).masked_fill_(masked, float("-inf"))
            m = s.amax(dim=-1, keepdim=True)
            p = torch.exp(s.sub_(m))                                                   # float32
            den = p.sum(dim=-1, dtype=torch.float64)                                   # [kb, G, r]
            o = torch.matmul(p.view(g1 - g0, G * r, Tc), v[g0:g1]).view(g1 - g0, G, r, D)
            out[g0:g1, :, r0:r1] = o.div_(den.unsqueeze(-1).float())
            lse[g0:g1, :, r0:r1] = m.squeeze(-1).double() + torch.log(den)
            if row_max:
                mx[g0:g1, :, r0:r1] = m.squeeze(-1)
            if colsum:
                col[g0:g1] += p.double().div_(den.unsqueeze(-1)).sum(dim=2)
            del s, p, o
    res = (out.view(H, t, D), lse.view(H, t), col.view(H, Tc) if colsum else None)
    return res + (mx.view(H, t),) if row_max else res
