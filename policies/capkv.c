/* capkv: CAPKV (arXiv 2604.25975; kvpress CapPress, kvpress/presses/cap_press.py).
 * A weighted leverage of the values:
 *   s_i = w_i · v_iᵀ A⁻¹ v_i,   A = I + Σ_j (w_j + eps) v_j v_jᵀ   (D×D, per query head)
 *   w_i = exp(tau·c_i − max_j tau·c_j),   c_i = cos(k_i, μ)   (clamped to [−1, 1])
 * μ = R̄ · mean of the queries before RoPE of the positions sinks .. now seen so
 * far (the source: every prompt query after the sinks), R̄ the mean RoPE rotation
 * of the next `future` positions now+1 .. now+future. Sums run over the
 * non-sink candidates; s is averaged over the kv group's query heads; the
 * candidates at positions < sinks are protected (the source pads them with
 * max + 1). The queries before RoPE come from the trace's (post-RoPE) ones,
 * rotated back by their position; they are summed in observe() (step 3), so
 * the mean covers every query seen, cached or not.
 * Parameters: eps (1e-6), future (512), sinks (4), tau (5), as the source. */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policy.h"

typedef struct {
    double *qsum;        /* [q_heads][D] the queries before RoPE, summed */
    double *tmp;         /* [2D + 2] observe's vector and rotation */
    int64_t q_heads, D;
    int64_t next;        /* the first position not yet summed */
} capkv_state;

static int capkv_create(const policy_config *cfg, void **state, kv_err *err)
{
    capkv_state *s = kv_calloc(1, sizeof *s, "capkv state", err);
    if (!s) return err->code;
    s->next = (int64_t)policy_num(cfg, "sinks");
    *state = s;
    return KV_OK;
}

static void capkv_destroy(void *state)
{
    capkv_state *s = state;
    if (s) free(s->qsum), free(s->tmp);
    free(s);
}

/* Step 3: adds the queries of the positions next .. now (those the view holds), before RoPE. */
static int capkv_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)cfg;
    capkv_state *st = state;
    const int64_t D = v->D;
    if (!v->queries || v->q_heads < 1) return KV_OK;
    if (!st->qsum) {
        st->q_heads = v->q_heads, st->D = D;
        if (!(st->qsum = kv_calloc((size_t)(v->q_heads * D), sizeof(double), "capkv query sums", err)) ||
            !(st->tmp = kv_calloc((size_t)(2 * D + 2), sizeof(double), "capkv rotation", err)))
            return err->code;
    }
    double *x = st->tmp;
    for (int64_t i = st->next > v->q0 ? st->next : v->q0; i <= v->now; i++) {
        for (int64_t j = 0; j < st->q_heads; j++) {
            const float *q = v->queries + (j * v->T + i - v->q0) * D;
            for (int64_t d = 0; d < D; d++) x[d] = q[d];
            rope_rotate_d(&v->rope, x, D, -(double)i); /* theta 0 (no RoPE known): unchanged */
            for (int64_t d = 0; d < D; d++) st->qsum[j * D + d] += x[d];
        }
    }
    if (v->now + 1 > st->next) st->next = v->now + 1;
    return KV_OK;
}

/* mu[D]: query head j's sum rotated by the mean rotation cs (its norm is all that differs from the
 * mean's, and the cosine ignores it); zero before any query. */
static void anchor(const capkv_state *st, const policy_view *v, int64_t j, const double *cs, double *mu)
{
    const int64_t D = v->D;
    if (!st->qsum) return;
    memcpy(mu, st->qsum + j * D, sizeof(double) * (size_t)D);
    rope_pairs_apply(v->rope.style, cs, mu, D);
}

/* w[i] of the m non-sink candidates from index i0 for anchor mu (zero anchor: cos 0, w = 1). */
static void weights(const policy_view *v, int64_t i0, const double *mu, double tau, double *w)
{
    const int64_t D = v->D;
    double nmu = 0.0, best = -INFINITY;
    for (int64_t d = 0; d < D; d++) nmu += mu[d] * mu[d];
    nmu = fmax(sqrt(nmu), 1e-12);
    for (int64_t i = i0; i < v->n; i++) {
        const float *k = v->keys + i * D;
        double dot = 0.0, nk = 0.0;
        for (int64_t d = 0; d < D; d++) dot += k[d] * mu[d], nk += (double)k[d] * k[d];
        double cs = dot / (fmax(sqrt(nk), 1e-12) * nmu);
        w[i - i0] = tau * fmin(1.0, fmax(-1.0, cs));
        best = fmax(best, w[i - i0]);
    }
    for (int64_t i = i0; i < v->n; i++) w[i - i0] = exp(w[i - i0] - best);
}

/* acc[i] += w_i · v_iᵀ A⁻¹ v_i / G over the non-sink candidates; A by Cholesky (it is SPD). */
static int leverage(const policy_view *v, int64_t i0, const double *w, double eps, int64_t G, double *A, double *X,
                    double *acc, kv_err *err)
{
    const int64_t D = v->D, m = v->n - i0;
    memset(A, 0, sizeof(double) * (size_t)(D * D));
    for (int64_t d = 0; d < D; d++) A[d * D + d] = 1.0;
    for (int64_t i = 0; i < m; i++) { /* A += Σ (sqrt(w + eps) v)(sqrt(w + eps) v)ᵀ, lower half */
        const float *x = v->values + (i0 + i) * D;
        const double a = sqrt(w[i] + eps);
        for (int64_t d = 0; d < D; d++) X[i * D + d] = a * x[d];
    }
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)D, (int)m, 1.0, X, (int)D, 1.0, A, (int)D);
    for (int64_t i = 0; i < m; i++) /* rows = the right-hand sides */
        for (int64_t d = 0; d < D; d++) X[i * D + d] = v->values[(i0 + i) * D + d];
    /* row-major lower = column-major upper: A = UᵀU, so vᵀA⁻¹v = ‖U⁻ᵀv‖² (one triangular solve);
     * X is [m][D] row-major = D×m column-major, ld D */
    if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)D, A, (lapack_int)D) != 0)
        return kv_fail(err, KV_EFAIL, "capkv: the %lldx%lld system did not solve (values not finite?)",
                       (long long)D, (long long)D);
    cblas_dtrsm(CblasColMajor, CblasLeft, CblasUpper, CblasTrans, CblasNonUnit, (int)D, (int)m, 1.0, A, (int)D, X,
                (int)D);
    for (int64_t i = 0; i < m; i++) {
        double lev = 0.0;
        for (int64_t d = 0; d < D; d++) lev += X[i * D + d] * X[i * D + d];
        acc[i0 + i] += w[i] * lev / (double)G;
    }
    return KV_OK;
}

static int capkv_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    const capkv_state *st = state;
    const int64_t n = v->n, D = v->D, sinks = (int64_t)policy_num(cfg, "sinks");
    int64_t i0 = 0;
    while (i0 < n && v->pos[i0] < sinks) i0++;
    for (int64_t i = 0; i < n; i++) scores[i] = i < i0 ? INFINITY : 0.0;
    if (i0 == n) return KV_OK;
    const int64_t m = n - i0, G = st->qsum ? st->q_heads : 1; /* no query seen yet: a zero anchor, w = 1 */
    double *mu = kv_calloc((size_t)(2 * D + 2), sizeof *mu, "capkv anchor", err);
    double *w = mu ? kv_calloc((size_t)m, sizeof *w, "capkv weights", err) : NULL;
    double *A = w ? kv_calloc((size_t)(D * D), sizeof *A, "capkv matrix", err) : NULL;
    double *X = A ? kv_calloc((size_t)(m * D), sizeof *X, "capkv solution", err) : NULL;
    int rc = X ? KV_OK : err->code;
    if (!rc) rope_mean_rotation(&v->rope, D, v->now + 1, (int64_t)policy_num(cfg, "future"), mu + D);
    for (int64_t j = 0; !rc && j < G; j++) {
        anchor(st, v, j, mu + D, mu);
        weights(v, i0, mu, policy_num(cfg, "tau"), w);
        rc = leverage(v, i0, w, policy_num(cfg, "eps"), G, A, X, scores, err);
    }
    free(mu), free(w), free(A), free(X);
    return rc;
}

/* In-model, the latest 128 query positions are held: a chunk longer than that adds only its last 128 */
static int64_t capkv_query_window(const policy_config *cfg)
{
    (void)cfg;
    return 128;
}

const policy_iface policy_capkv = {
    .name = "capkv",
    .summary = "CAPKV (kvpress CapPress): value leverage weighted by exp(tau·cos(k, RoPE-rotated query mean))",
    .params = {{.key = "eps", .kind = PARAM_NUMBER, .def = "1e-06", .min = 0, .max = 1,
                .doc = "added to each weight inside A = I + sum (w + eps) v v^T"},
               {.key = "future", .kind = PARAM_NUMBER, .def = "512", .min = 1, .max = 1 << 20, .integer = true,
                .doc = "the query mean is rotated by the mean RoPE of the next `future` positions"},
               {.key = "sinks", .kind = PARAM_NUMBER, .def = "4", .min = 0, .max = 1 << 20, .integer = true,
                .doc = "positions below this are protected and left out of the sums"},
               {.key = "tau", .kind = PARAM_NUMBER, .def = "5", .min = 0, .max = 1e3,
                .doc = "temperature on the cosine to the query mean"}},
    .create = capkv_create,
    .destroy = capkv_destroy,
    .score = capkv_score,
    .observe = capkv_observe,
    .query_window = capkv_query_window,
    /* the leverage depends on each head's value scale and the weights on its own maximum */
    .scores_comparable = false,
};
