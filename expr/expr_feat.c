/* expr_feat: the features a score expression reads (docs/expressions.md),
 * each computed the way the built-in policy it comes from computes it (the
 * same functions, the same order of sums), so an expression restating a
 * built-in keeps exactly its sets: knorm and keydiff (vecmath.c), tova's
 * attn_last, h2o's attn_acc (attn_hist.c), snapkv's window sums and pool,
 * oracle's future attention (called through its interface). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr.h"
#include "core/anchor.h"
#include "policies/attn_hist.h"
#include "policies/attn_window.h"
#include "core/vecmath.h"

extern const policy_iface policy_oracle;

const expr_feature EXPR_FEATURES[EF_COUNT] = {
    [EF_KNORM] = {"knorm", 0, {0, 0}, "", "|k_j| (L2 norm of the key)", false, false, false, false},
    [EF_VNORM] = {"vnorm", 0, {0, 0}, "", "|v_j| (L2 norm of the value)", false, false, false, false, true},
    [EF_COS_ANCHOR] = {"cos_anchor", 0, {0, 0}, "", "cos(k_j, mean_m k_m/|k_m|) (keydiff anchor=norm)", false,
                       false, false, false},
    [EF_COS_ANCHOR_RAW] = {"cos_anchor_raw", 0, {0, 0}, "", "cos(k_j, mean_m k_m) (keydiff anchor=raw)", false,
                           false, false, false},
    [EF_COS_PAIRWISE] = {"cos_pairwise", 0, {0, 0}, "", "mean_{m!=j} cos(k_j, k_m); 0 with one candidate", false,
                         false, false, false},
    [EF_ATTN_LAST] = {"attn_last", 0, {0, 0}, "", "attention from the chunk's last query, mean over the kv group "
                      "(tova scope=group)", true, false, false, false, true},
    [EF_ATTN_WINDOW] = {"attn_window", 1, {32, 0}, "(W)", "sum over the last W queries (trace) of their "
                        "attention to k_j, mean over the kv group (snapkv before pooling); W default 32",
                        false, false, true, false},
    [EF_ATTN_POOLED] = {"attn_pooled", 2, {32, 5}, "(W, K)", "attn_window(W) average-pooled over K neighbouring "
                        "candidates, zero padded (snapkv pool=avg, no window protection); default (32, 5)",
                        false, false, true, false},
    [EF_ATTN_ACC] = {"attn_acc", 0, {0, 0}, "", "attention received since it entered the cache, every query of "
                     "every chunk (h2o)", true, true, false, false},
    [EF_ATTN_ACC_NORM] = {"attn_acc_norm", 0, {0, 0}, "", "attn_acc / (now - pos + 1), the queries that could see "
                          "it (h2o normalize=age)", true, true, false, false},
    [EF_POS] = {"pos", 0, {0, 0}, "", "the candidate's position", false, false, false, false, true},
    [EF_AGE] = {"age", 0, {0, 0}, "", "now - pos (now: the last position of the chunk)", false, false, false,
                false, true},
    [EF_IS_SINK] = {"is_sink", 1, {4, 0}, "(k)", "1 when pos < k, else 0; k default 4", false, false, false, false,
                    true},
    [EF_RECENCY_RANK] = {"recency_rank", 0, {0, 0}, "", "(n-1-j)/(n-1) for the j-th candidate by position: 0 the "
                         "newest, 1 the oldest; 0 with one candidate", false, false, false, false, true},
    [EF_FUTURE_ATTN] = {"future_attn", 0, {0, 0}, "", "sum over the future queries of their full-cache attention "
                        "to k_j, mean over the kv group (oracle; offline only)", false, false, false, true},
};

int expr_feature_index(const char *name, size_t len)
{
    for (int i = 0; i < EF_COUNT; i++)
        if (strlen(EXPR_FEATURES[i].name) == len && strncmp(EXPR_FEATURES[i].name, name, len) == 0) return i;
    return -1;
}

/* keydiff's cosines from scratch, the same doubles as its step-by-step anchor (core/anchor.h):
 * normed or pairwise through anchor_sum's rounded sum (below ANCHOR_MAX_N), raw (or beyond) the
 * plain sum; sign flipped back. The norms from the per-position cache (vm_norm: keydiff's values);
 * tmp: D + 2n doubles. */
static int cos_anchor(const policy_view *v, vm_norm_cache *cache, bool normed, bool pairwise, double *out,
                      double *tmp, kv_err *err)
{
    const int64_t D = v->D, n = v->n;
    double *mu = tmp, *norms = mu + D, *w = norms + n;
    int rc = vm_norms_cached(cache, v->keys, v->pos, n, D, norms, err);
    if (rc) return rc;
    if ((normed || pairwise) && n < ANCHOR_MAX_N) {
        anchor_sum(v->keys, n, D, norms, w, mu);
    } else {
        vm_weighted_mean(v->keys, n, D, normed || pairwise ? norms : NULL, mu, w);
        for (int64_t d = 0; d < D; d++) mu[d] *= (double)n; /* the sum, as keydiff's anchor_of gives it */
    }
    anchor_cos_scores(v->keys, n, D, norms, mu, pairwise, mu, out);
    for (int64_t j = 0; j < n; j++) out[j] = -out[j];
    return KV_OK;
}

/* snapkv's window sums, pooled (attn_pooled) or not (attn_window), with its code (attn_window.h). */
static int attn_window(const policy_view *v, int64_t window, int64_t kernel, double *out, kv_err *err)
{
    int64_t i0;
    if (kernel == 0) return attn_window_sums(v, window, out, &i0, "expression window scores", err);
    double *sum = kv_calloc((size_t)v->n + 1, sizeof *sum, "expression pooled scores", err);
    int rc = sum ? attn_window_sums(v, window, sum, &i0, "expression window scores", err) : err->code;
    if (!rc) attn_window_pool(sum, v->n, kernel, false, out);
    free(sum);
    return rc;
}

/* The view_only features (EXPR_FEATURES): one loop per feature (the switch outside it). */
static void simple(const expr_feat_use *u, const policy_view *v, double *out)
{
    const int64_t n = v->n, D = v->D;
    const float *last = v->attn && v->n_queries > 0 ? v->attn + (v->n_queries - 1) * n : NULL;
    switch (u->id) {
    case EF_VNORM: for (int64_t j = 0; j < n; j++) out[j] = vm_norm(v->values + j * D, D); break;
    case EF_ATTN_LAST:
        for (int64_t j = 0; j < n; j++) out[j] = last ? (double)last[j] : 0.0;
        break;
    case EF_POS: for (int64_t j = 0; j < n; j++) out[j] = (double)v->pos[j]; break;
    case EF_AGE: for (int64_t j = 0; j < n; j++) out[j] = (double)(v->now - v->pos[j]); break;
    case EF_IS_SINK: for (int64_t j = 0; j < n; j++) out[j] = (double)v->pos[j] < u->a ? 1.0 : 0.0; break;
    case EF_RECENCY_RANK:
        for (int64_t j = 0; j < n; j++) out[j] = n < 2 ? 0.0 : (double)(n - 1 - j) / (double)(n - 1);
        break;
    default: for (int64_t j = 0; j < n; j++) out[j] = 0.0; break;
    }
}

int expr_feature_values(const expr_feat_use *u, const policy_view *v, const expr_feat_ctx *ctx, double *out,
                        double *tmp, kv_err *err)
{
    switch (u->id) {
    case EF_KNORM: return vm_norms_cached(ctx->norms, v->keys, v->pos, v->n, v->D, out, err);
    case EF_COS_ANCHOR: return cos_anchor(v, ctx->norms, true, false, out, tmp, err);
    case EF_COS_ANCHOR_RAW: return cos_anchor(v, ctx->norms, false, false, out, tmp, err);
    case EF_COS_PAIRWISE: return cos_anchor(v, ctx->norms, true, true, out, tmp, err);
    case EF_ATTN_WINDOW: return attn_window(v, (int64_t)u->a, 0, out, err);
    case EF_ATTN_POOLED: return attn_window(v, (int64_t)u->a, (int64_t)u->b, out, err);
    case EF_FUTURE_ATTN: return policy_oracle.score(NULL, ctx->oracle, v, out, err);
    case EF_ATTN_ACC:
    case EF_ATTN_ACC_NORM:
        if (ctx->hist) attn_hist_lookup(ctx->hist, v, out);
        else for (int64_t c = 0; c < v->n; c++) out[c] = 0.0;
        if (u->id == EF_ATTN_ACC_NORM)   /* h2o normalize=age's division, in its order */
            for (int64_t c = 0; c < v->n; c++)
                out[c] /= (double)(v->now >= v->pos[c] ? v->now - v->pos[c] + 1 : 1);
        return KV_OK;
    default: simple(u, v, out); return KV_OK;
    }
}
