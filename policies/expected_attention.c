/* expected_attention: Expected Attention (Devoto et al., "Expected
 * Attention: KV Cache Compression by Estimating Attention from Future
 * Queries Distribution", 2025, arXiv:2510.00636; reference: kvpress
 * kvpress/presses/expected_attention_press.py, ExpectedAttentionPress).
 * Per query head h of the kv group: μ_h and Σ_h, the mean and covariance
 * (divided by the count) of the head's queries before RoPE, over every
 * position from `sinks` up to now seen so far (the source takes the whole
 * prompt; in chunked replay only the past is honest). The trace holds
 * post-RoPE queries: each is turned back by its position's RoPE
 * (rope_rotate_d with the view's rope: theta, style, frequency factors).
 * R̄, the mean RoPE rotation of the next n_future positions now+1 .. now +
 * n_future, gives μ' = R̄μ, Σ' = R̄ΣR̄ᵀ, and over the candidates at positions
 * >= sinks (those below are protected):
 *   z_hi = k_i·μ'_h/√D + k_iᵀΣ'_h k_i/(2D),  a_hi = softmax_i(z_hi)
 *   s_i = (mean_h a_hi + epsilon)·‖v_i‖
 * With no query seen (or none past the sinks) μ = Σ = 0: a uniform a.
 * In-model only the latest EA_QWIN queries of each chunk are held, so the
 * statistics there take in those (every query when chunks are no longer).
 * Parameters: epsilon (>= 0, 0.01), n_future (integer >= 1, 512), sinks
 * (integer >= 0, 4). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policy.h"
#include "core/vecmath.h"

enum { EA_QWIN = 64 };

typedef struct {
    double *sum, *m2;   /* [G][D] Σ q, [G][D][D] Σ q qᵀ of the pre-RoPE queries */
    double *count;      /* [G] */
    int64_t G, D, last; /* queries taken in up to position last */
} ea_state;

static int ea_create(const policy_config *cfg, void **state, kv_err *err)
{
    (void)cfg;
    ea_state *s = kv_calloc(1, sizeof *s, "expected_attention state", err);
    if (!s) return err->code;
    s->last = -1;
    *state = s;
    return KV_OK;
}

static void ea_destroy(void *state)
{
    ea_state *s = state;
    if (s) free(s->sum);
    free(s);
}

static int ensure(ea_state *s, const policy_view *v, kv_err *err)
{
    if (s->sum) return s->G == v->q_heads && s->D == v->D ? KV_OK
                                                          : kv_fail(err, KV_EFAIL, "expected_attention: stream shape changed");
    const int64_t G = v->q_heads, D = v->D;
    if (!(s->sum = kv_calloc((size_t)(G * D * (D + 1) + G + D), sizeof(double), "expected_attention statistics", err)))
        return err->code;
    s->m2 = s->sum + G * D, s->count = s->m2 + G * D * D, s->G = G, s->D = D;
    return KV_OK;
}

static int ea_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    ea_state *s = state;
    const int64_t D = v->D, sinks = (int64_t)fmin(policy_num(cfg, "sinks"), 9e15);
    int rc = ensure(s, v, err);
    if (rc || !v->queries) return rc;
    double *x = s->count + s->G; /* D doubles of scratch */
    int64_t from = s->last + 1 > v->q0 ? s->last + 1 : v->q0;
    from = from > sinks ? from : sinks;
    for (int64_t h = 0; h < v->q_heads; h++)
        for (int64_t t = from; t <= v->now; t++) {
            const float *q = v->queries + (h * v->T + t - v->q0) * D;
            for (int64_t d = 0; d < D; d++) x[d] = q[d];
            rope_rotate_d(&v->rope, x, D, -(double)t); /* back to before RoPE */
            double *sm = s->sum + h * D, *m2 = s->m2 + h * D * D;
            for (int64_t a = 0; a < D; a++) {
                sm[a] += x[a];
                for (int64_t b = 0; b <= a; b++) m2[a * D + b] += x[a] * x[b];
            }
            s->count[h] += 1;
        }
    s->last = v->now > s->last ? v->now : s->last;
    return KV_OK;
}

/* mu[D], cov[D][D] of head h, rotated by the mean RoPE cs (per pair). */
static void rotated_moments(const ea_state *s, const policy_view *v, int64_t h, const double *cs, double *mu,
                            double *cov, double *tmp)
{
    const int64_t D = s->D;
    const double c = s->count[h];
    for (int64_t a = 0; a < D; a++) mu[a] = c > 0 ? s->sum[h * D + a] / c : 0.0;
    for (int64_t a = 0; a < D; a++)
        for (int64_t b = 0; b <= a; b++)
            cov[a * D + b] = cov[b * D + a] = c > 0 ? s->m2[(h * D + a) * D + b] / c - mu[a] * mu[b] : 0.0;
    rope_pairs_apply(v->rope.style, cs, mu, D);
    for (int64_t a = 0; a < D; a++) rope_pairs_apply(v->rope.style, cs, cov + a * D, D); /* rows: Σ R̄ᵀ */
    for (int64_t a = 0; a < D; a++)
        for (int64_t b = 0; b < D; b++) tmp[b * D + a] = cov[a * D + b];
    for (int64_t a = 0; a < D; a++) rope_pairs_apply(v->rope.style, cs, tmp + a * D, D); /* R̄ (Σ R̄ᵀ) */
    memcpy(cov, tmp, sizeof(double) * (size_t)(D * D)); /* symmetric: its transpose is itself */
}

/* z[i] for one head over the candidates from i0, then its softmax added to acc / G. */
static void head_weights(const policy_view *v, int64_t i0, const double *mu, const double *cov, const double *kd,
                         double *y, double *z, double *acc)
{
    const int64_t D = v->D, m = v->n - i0;
    cblas_dsymm(CblasRowMajor, CblasRight, CblasUpper, (int)m, (int)D, 1.0, cov, (int)D, kd, (int)D, 0.0, y, (int)D);
    double top = -INFINITY, sum = 0;
    for (int64_t i = 0; i < m; i++) {
        double lin = 0, quad = 0;
        for (int64_t d = 0; d < D; d++) lin += kd[i * D + d] * mu[d], quad += kd[i * D + d] * y[i * D + d];
        z[i] = lin / sqrt((double)D) + quad / (2.0 * (double)D);
        top = z[i] > top ? z[i] : top;
    }
    for (int64_t i = 0; i < m; i++) sum += z[i] = exp(z[i] - top);
    for (int64_t i = 0; i < m; i++) acc[i] += z[i] / sum / (double)v->q_heads;
}

static int ea_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    ea_state *s = state;
    int rc = ensure(s, v, err);
    if (rc) return rc;
    const int64_t D = v->D, n = v->n, sinks = (int64_t)fmin(policy_num(cfg, "sinks"), 9e15);
    int64_t i0 = 0;
    while (i0 < n && v->pos[i0] < sinks) scores[i0++] = INFINITY;
    const int64_t m = n - i0;
    double *buf = kv_calloc((size_t)(2 * D * D + D + D + 2 * m * D + m), sizeof(double), "expected_attention scores",
                            err);
    if (!buf) return err->code;
    double *cov = buf, *tmp = cov + D * D, *mu = tmp + D * D, *cs = mu + D, *kd = cs + D, *y = kd + m * D, *z = y + m * D;
    rope_mean_rotation(&v->rope, D, v->now + 1, (int64_t)policy_num(cfg, "n_future"), cs);
    for (int64_t i = 0; i < m * D; i++) kd[i] = v->keys[i0 * D + i];
    for (int64_t i = i0; i < n; i++) scores[i] = 0.0;
    for (int64_t h = 0; h < v->q_heads; h++) {
        rotated_moments(s, v, h, cs, mu, cov, tmp);
        head_weights(v, i0, mu, cov, kd, y, z, scores + i0);
    }
    if (v->q_heads == 0)
        for (int64_t i = i0; i < n; i++) scores[i] = 1.0 / (double)m;
    const double eps = policy_num(cfg, "epsilon");
    for (int64_t i = i0; i < n; i++) scores[i] = (scores[i] + eps) * vm_norm(v->values + i * D, D);
    free(buf);
    return KV_OK;
}

static int64_t ea_query_window(const policy_config *cfg)
{
    (void)cfg;
    return EA_QWIN;
}

const policy_iface policy_expected_attention = {
    .name = "expected_attention",
    .summary = "Expected Attention: attention expected from the past queries' Gaussian under the next positions' RoPE, times |v|",
    .params = {{.key = "epsilon", .kind = PARAM_NUMBER, .def = "0.01", .min = 0, .max = 1e6,
                .doc = "added to the expected attention before the value norm weights it"},
               {.key = "n_future", .kind = PARAM_NUMBER, .def = "512", .min = 1, .max = 1 << 20, .integer = true,
                .doc = "future positions whose RoPE rotations are averaged"},
               {.key = "sinks", .kind = PARAM_NUMBER, .def = "4", .min = 0, .max = 9007199254740992.0,
                .integer = true, .doc = "absolute positions below this are kept, and their queries left out"}},
    .create = ea_create,
    .destroy = ea_destroy,
    .score = ea_score,
    .observe = ea_observe,
    .query_window = ea_query_window,
};
