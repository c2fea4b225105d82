/* keydiff: keep the geometrically distinctive keys
 * (docs/policies.md#the-first-ten-policies).
 * From Park et al., "KeyDiff: Key Similarity-Based KV Cache Eviction for
 * Long-Context LLM Inference in Resource-Constrained Environments" (NeurIPS
 * 2025, arXiv:2504.15364): the score S = topk(−CosSim(μ(K̂), k̂_i), N) with
 * the anchor μ(K̂) = (1/n) Σ k̂_i, k̂ = k/‖k‖; the paper's ablations swap the
 * anchor (raw mean of k) and the metric, and its O(n²) pairwise form is what
 * the anchor approximates. Over the candidates C:
 *   anchor=norm  μ = mean of k_j/‖k_j‖      anchor=raw  μ = mean of k_j
 *   metric=cos   s_j = −cos(k_j, μ)
 *   metric=dot   s_j = −k_j·μ
 *   metric=l2    s_j = ‖k_j − μ‖
 *   anchor=pairwise  s_j = −mean_{m≠j} cos(k_j, k_m)   (metric ignored)
 * computed in O(n·D) as (k̂_j·Σ_m k̂_m − ‖k̂_j‖²)/(n−1), exact algebra.
 * A zero key has cos 0 with everything. The most recent ⌊window·N⌋
 * candidates are protected.
 * Parameters: anchor (norm|raw|pairwise, norm), metric (cos|dot|l2, cos),
 * window (0..1, 0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/anchor.h"
#include "policies/anchor_step.h"
#include "policies/policy.h"
#include "policies/select.h"
#include "core/vecmath.h"

enum { ANCHOR_NORM, ANCHOR_RAW, ANCHOR_PAIRWISE };
enum { METRIC_COS, METRIC_DOT, METRIC_L2 };

static double l2_dist(const float *k, const double *mu, int64_t D)
{
    double s = 0;
    for (int64_t d = 0; d < D; d++) {
        double e = (double)k[d] - mu[d];
        s += e * e;
    }
    return sqrt(s);
}

typedef struct {
    anchor_state a;  /* the exact Σ k̂, step by step */
    double *buf;     /* [2 D + 2 cap] the scores' scratch, kept across calls */
    int64_t cap;
} keydiff_state;

static int keydiff_create(const policy_config *cfg, void **state, kv_err *err)
{
    (void)cfg;
    keydiff_state *c = kv_calloc(1, sizeof *c, "keydiff state", err);
    if (!c) return err->code;
    *state = c;
    return KV_OK;
}

static void keydiff_destroy(void *state)
{
    keydiff_state *c = state;
    anchor_free(&c->a);
    free(c->buf), free(c);
}

/* The norms and μ·n: the exact Σ k̂ updated by the keys that joined and left since the last
 * step (anchor.h), or for anchor=raw (or 2^16 candidates and more) the double sum of the rows. */
static int anchor_of(anchor_state *st, const policy_view *v, bool normed, double *norms, double *sum, double *w,
                     kv_err *err)
{
    const int64_t D = v->D, n = v->n;
    int rc = normed && n < ANCHOR_MAX_N ? anchor_update(st, v->keys, v->pos, n, D, norms, err)
                                        : vm_norms_cached(NULL, v->keys, v->pos, n, D, norms, err);
    if (!rc && normed && n < ANCHOR_MAX_N) memcpy(sum, st->sum, sizeof(double) * (size_t)D);
    if (rc || (normed && n < ANCHOR_MAX_N)) return rc;
    vm_weighted_mean(v->keys, n, D, normed ? norms : NULL, sum, w);
    for (int64_t d = 0; d < D; d++) sum[d] *= (double)n;
    return KV_OK;
}

/* One pass over the candidates' keys (their dot products with the anchor)
 * after the anchor's O(changed·D) update. */
static int keydiff_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                         kv_err *err)
{
    int anchor = policy_choice(cfg, "anchor"), metric = policy_choice(cfg, "metric");
    const int64_t D = v->D, n = v->n;
    keydiff_state *c = state;
    if (n + D > c->cap) {
        double *b = realloc(c->buf, sizeof(double) * (size_t)(2 * (n + D)));
        if (!b) return kv_fail(err, KV_EFAIL, "keydiff: out of memory for %lld candidates", (long long)n);
        c->buf = b, c->cap = n + D;
    }
    double *sum = c->buf, *mu = sum + D, *norms = mu + D, *w = norms + n; /* [D] [D] [n] [n] */
    int rc = anchor_of(&c->a, v, anchor != ANCHOR_RAW, norms, sum, w, err);
    if (rc) return rc;
    if (anchor == ANCHOR_PAIRWISE || metric == METRIC_COS) {
        anchor_cos_scores(v->keys, n, D, norms, sum, anchor == ANCHOR_PAIRWISE, mu, scores);
    } else {
        for (int64_t d = 0; d < D; d++) mu[d] = sum[d] / (double)n;
        if (metric == METRIC_DOT) vm_dots(v->keys, n, D, mu, scores);
        for (int64_t j = 0; j < n; j++) scores[j] = metric == METRIC_L2 ? l2_dist(v->keys + j * D, mu, D) : -scores[j];
    }
    policy_protect_recent(v, policy_recent_count(policy_num(cfg, "window"), v->budget), scores);
    return KV_OK;
}

const policy_iface policy_keydiff = {
    .name = "keydiff",
    .summary = "KeyDiff (Park et al. 2025): keeps the keys least similar to the mean key",
    .params = {
        {.key = "anchor", .kind = PARAM_CHOICE, .def = "norm", .choices = "norm|raw|pairwise",
         .doc = "mu = mean of normalised keys (norm), of raw keys (raw), or no anchor: "
                "mean pairwise cosine (pairwise, ignores metric)"},
        {.key = "metric", .kind = PARAM_CHOICE, .def = "cos", .choices = "cos|dot|l2",
         .doc = "s = -cos(k, mu), -k.mu, or |k - mu|"},
        {.key = "window", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1,
         .doc = "the most recent floor(window*N) candidates are protected"},
    },
    .create = keydiff_create,
    .destroy = keydiff_destroy,
    .score = keydiff_score,
};
