/* adakv: Ada-KV's head-wise budget (Feng et al., "Ada-KV: Optimizing KV
 * Cache Eviction by Adaptive Budget Allocation for Efficient LLM Inference",
 * 2024; NVIDIA kvpress AdaKVPress). Per layer a pool of K·N rows: each kv
 * head first keeps its own top f = max(1, ⌊alpha·N⌋) (all its candidates when
 * it has fewer), and the rest of the pool goes to the best remaining
 * candidates of all the layer's heads together. A head's unused floor thus
 * returns to the pool, and each head keeps a prefix of its own ranking, so
 * the shares are all this returns (each head then keeps its top share).
 *
 * The layer-wide ranking: score descending, then later position, then lower
 * head. +INFINITY (protected) candidates rank first, as in each head's own
 * ranking. When the policy's scores are not comparable across heads
 * (policy_iface.scores_comparable false: keydiff, knorm, primekv) a finite
 * score is replaced by its z-score within its head, (s − mean)/std over the
 * head's finite scores (0 when they are all equal), so heads compete by how
 * far a candidate stands out in its own head rather than by raw scale (a
 * quantile would not do: heads with as many candidates would always split
 * the pool evenly, i.e. uniform).
 * Parameters: alpha (in [0, 1], default 0.2). */
#include <math.h>

#include "allocators/alloc.h"
#include "policies/select.h"

/* How stream x's finite scores are rescaled for the layer-wide ranking:
 * v -> (v - shift) * scale (identity for comparable scores). */
typedef struct {
    double shift[256], scale[256];
} rescale;

static void rescale_of(const alloc_scope *s, rescale *z)
{
    for (int64_t x = 0; x < s->n_streams; x++) {
        double sum = 0, sq = 0;
        int64_t m = 0;
        for (int64_t i = 0; !s->comparable && i < s->n[x]; i++)
            if (isfinite(s->scores[x][i])) sum += s->scores[x][i], m++;
        const double mean = m ? sum / (double)m : 0;
        for (int64_t i = 0; !s->comparable && i < s->n[x]; i++)
            if (isfinite(s->scores[x][i])) sq += (s->scores[x][i] - mean) * (s->scores[x][i] - mean);
        const double sd = m ? sqrt(sq / (double)m) : 0;
        z->shift[x] = s->comparable ? 0 : mean;
        z->scale[x] = s->comparable ? 1 : sd > 0 ? 1 / sd : 0;
    }
}

/* The layer-wide key of stream x's candidate i. */
static double key_of(const alloc_scope *s, const rescale *z, int64_t x, int64_t i)
{
    const double v = s->scores[x][i];
    if (isnan(v)) return -INFINITY;
    return isinf(v) ? v : (v - z->shift[x]) * z->scale[x];
}

/* Whether (x, r) ranks before (y, q) in the layer-wide order. */
static bool ahead(const alloc_scope *s, const rescale *z, const int64_t *const *ord, int64_t x, int64_t r, int64_t y,
                  int64_t q)
{
    const double a = key_of(s, z, x, ord[x][r]), b = key_of(s, z, y, ord[y][q]);
    if (a != b) return a > b;
    const int64_t pa = s->pos[x][ord[x][r]], pb = s->pos[y][ord[y][q]];
    if (pa != pb) return pa > pb;
    return x < y;
}

static int adakv_shares(const alloc_config *ac, const alloc_scope *s, alloc_buf *b, int64_t *counts, kv_err *err)
{
    (void)err;
    const int64_t S = s->n_streams;
    int64_t floor_n = (int64_t)floor(alloc_num(ac, "alpha") * (double)s->budget + 1e-9);
    if (floor_n < 1) floor_n = 1;   /* a head never keeps fewer than one row */
    const int64_t *ord[256];
    KV_ASSERT(S <= 256);
    int64_t off = 0, left = s->total;
    for (int64_t x = 0; x < S; x++) {
        KV_ASSERT(off + s->n[x] <= b->cap);
        policy_rank_order(s->scores[x], s->pos[x], s->n[x], b->order + off);
        ord[x] = b->order + off;
        off += s->n[x];
        counts[x] = s->n[x] < floor_n ? s->n[x] : floor_n;
        left -= counts[x];
    }
    KV_ASSERT(left >= 0);
    rescale z;
    rescale_of(s, &z);
    for (; left > 0; left--) {   /* the pool: one best remaining candidate at a time */
        int64_t best = -1;
        for (int64_t x = 0; x < S; x++)
            if (counts[x] < s->n[x] && (best < 0 || ahead(s, &z, ord, x, counts[x], best, counts[best]))) best = x;
        KV_ASSERT(best >= 0);   /* total < Σ n: there is always one */
        counts[best]++;
    }
    return KV_OK;
}

const alloc_iface alloc_adakv = {
    .name = "adakv",
    .summary = "Ada-KV: per layer a pool of K*N; each head keeps its top floor(alpha*N), the rest by layer-wide score",
    .params = {
        {.key = "alpha", .kind = PARAM_NUMBER, .def = "0.2", .min = 0, .max = 1,
         .doc = "share of N each head keeps by its own ranking first (1: every head keeps N, as uniform)"},
    },
    .kind = ALLOC_DYNAMIC_LAYER,
    .shares = adakv_shares,
};
