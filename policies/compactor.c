/* compactor: Compactor (Chari & Van Durme, "Compactor: Calibrated
 * Query-Agnostic KV Cache Compression with Approximate Leverage Scores", 2025,
 * arXiv 2507.08143; kvpress CompactorPress, kvpress/presses/compactor_press.py
 * with leverage_press.py and non_causal_attention_press.py).
 * Over the candidates in position order, the first `first` and the last
 * `last` are protected; on the m others:
 *   l_i = x_i (XᵀX + 0.01·I)⁻¹ x_iᵀ,  X = (K̃ − mean K̃)·Φ   (m×sketch)
 * K̃ the keys before RoPE (turned back with the trace's RoPE), Φ a D×sketch
 * Gaussian sketch / √sketch drawn per (seed, layer, kv head, step);
 *   a_i = pool3(‖v_i‖ · mean_h Σ_{q in chunk(i)} softmax_chunk(q·k)_i)
 * the non-causal attention of the candidates' own queries (post-RoPE,
 * unscaled) within consecutive chunks of `chunk` candidates, column sums,
 * mean over the stream's query heads, times ‖v‖, then a zero-padded average
 * over the neighbours i−1, i, i+1;
 *   s_i = blend·z(l)_i + z(a)_i,  z(x) = (x − mean x)/max(std x, 1e-6)
 * (unbiased std), blend = `blending`, or, when it is −1 (the default), the
 * step's compression ratio 1 − N/|C| (the source's default). It reads every
 * candidate's own query, which an in-model run does not keep: sim only.
 * Parameters: blending (−1), chunk (256), first (8), last (4), seed (0),
 * sketch (48). */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "policies/policy.h"

/* z-score of x[m] in place: unbiased std clamped to 1e-6 (m < 2: every z is 0). */
static void zscore(double *x, int64_t m)
{
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < m; i++) mean += x[i];
    mean /= (double)m;
    for (int64_t i = 0; i < m; i++) var += (x[i] - mean) * (x[i] - mean);
    const double sd = m > 1 ? fmax(sqrt(var / (double)(m - 1)), 1e-6) : 1e-6;
    for (int64_t i = 0; i < m; i++) x[i] = m > 1 ? (x[i] - mean) / sd : 0.0;
}

/* l[m]: the sketched ridge leverage of the candidates a .. a+m−1. Work: X [m][k], G [k][k], Phi [D][k], kp [D]. */
static void leverage(const policy_config *cfg, const policy_view *v, int64_t a, int64_t m, double *X, double *G,
                     double *Phi, double *kp, double *l)
{
    const int64_t D = v->D, k = (int64_t)policy_num(cfg, "sketch");
    kv_rng r;
    rng_init(&r, (uint64_t)policy_num(cfg, "seed"), (uint64_t)v->layer, (uint64_t)v->kv_head, (uint64_t)v->step);
    for (int64_t i = 0; i < D * k; i++) Phi[i] = rng_normal(&r) / sqrt((double)k);
    double *mean = kp + D;
    memset(mean, 0, sizeof(double) * (size_t)D);
    for (int64_t i = 0; i < m; i++) { /* X's rows: the keys before RoPE (centred below) */
        for (int64_t d = 0; d < D; d++) kp[d] = v->keys[(a + i) * D + d];
        rope_rotate_d(&v->rope, kp, D, -(double)v->pos[a + i]);
        for (int64_t d = 0; d < D; d++) mean[d] += kp[d], X[i * D + d] = kp[d];
    }
    for (int64_t d = 0; d < D; d++) mean[d] /= (double)m;
    for (int64_t i = 0; i < m; i++)
        for (int64_t d = 0; d < D; d++) X[i * D + d] -= mean[d];
    double *S = X + m * D; /* [m][k] = X Φ */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)k, (int)D, 1.0, X, (int)D, Phi, (int)k, 0.0,
                S, (int)k);
    /* the source's adaptive jitter: 0.01, then ×10 while Cholesky fails (5 tries) */
    for (double jit = 1e-2, t = 0; t < 5; t++, jit *= 10.0) {
        memset(G, 0, sizeof(double) * (size_t)(k * k));
        for (int64_t d = 0; d < k; d++) G[d * k + d] = jit;
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)k, (int)m, 1.0, S, (int)k, 1.0, G, (int)k);
        if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)k, G, (lapack_int)k) == 0) {
            /* G = UᵀU: x G⁻¹ xᵀ = ‖U⁻ᵀx‖²; S is k×m column-major */
            cblas_dtrsm(CblasColMajor, CblasLeft, CblasUpper, CblasTrans, CblasNonUnit, (int)k, (int)m, 1.0, G,
                        (int)k, S, (int)k);
            for (int64_t i = 0; i < m; i++) {
                double s = 0.0;
                for (int64_t d = 0; d < k; d++) s += S[i * k + d] * S[i * k + d];
                l[i] = s;
            }
            return;
        }
    }
    memset(l, 0, sizeof(double) * (size_t)m); /* not reached for finite keys (G is SPD) */
}

/* att[m]: the non-causal chunked attention term (before the pool) of the candidates a .. a+m−1.
 * w: [2·c·D + c²], c = min(chunk, m): a chunk's queries, keys and dot products (one dgemm per chunk and head). */
static void noncausal(const policy_config *cfg, const policy_view *v, int64_t a, int64_t m, double *w, double *att)
{
    const int64_t D = v->D, C = (int64_t)policy_num(cfg, "chunk"), H = v->q_heads;
    const int64_t cc = C < m ? C : m; /* the longest chunk */
    double *Q = w, *K = Q + cc * D, *P = K + cc * D;
    memset(att, 0, sizeof(double) * (size_t)m);
    if (!v->queries || H < 1) return; /* no queries (not an engine's view): no attention term */
    for (int64_t c0 = 0; c0 < m; c0 += C) {
        const int64_t c = (c0 + C < m ? c0 + C : m) - c0;
        for (int64_t i = 0; i < c * D; i++) K[i] = v->keys[(a + c0) * D + i];
        for (int64_t h = 0; h < H; h++) {
            for (int64_t i = 0; i < c; i++) {
                const float *q = v->queries + (h * v->T + v->pos[a + c0 + i] - v->q0) * D;
                for (int64_t d = 0; d < D; d++) Q[i * D + d] = q[d];
            }
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c, (int)c, (int)D, 1.0, Q, (int)D, K, (int)D,
                        0.0, P, (int)c);
            for (int64_t i = 0; i < c; i++) { /* row i: query i's softmax over the chunk's keys, unscaled */
                double *row = P + i * c, best = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < c; j++) best = fmax(best, row[j]);
                for (int64_t j = 0; j < c; j++) sum += (row[j] = exp(row[j] - best));
                for (int64_t j = 0; j < c; j++) att[c0 + j] += row[j] / sum;
            }
        }
    }
    for (int64_t i = 0; i < m; i++) {
        double nv = 0.0;
        for (int64_t d = 0; d < D; d++) nv += (double)v->values[(a + i) * D + d] * v->values[(a + i) * D + d];
        att[i] = att[i] / (double)H * sqrt(nv);
    }
}

static int compactor_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)state;
    const int64_t n = v->n, D = v->D, k = (int64_t)policy_num(cfg, "sketch"), C = (int64_t)policy_num(cfg, "chunk");
    const int64_t left = n < (int64_t)policy_num(cfg, "first") ? n : (int64_t)policy_num(cfg, "first");
    const int64_t rmax = (int64_t)policy_num(cfg, "last"), right = n - left < rmax ? n - left : rmax;
    const int64_t m = n - left - right;
    for (int64_t i = 0; i < n; i++) scores[i] = INFINITY;
    if (m <= 0) return KV_OK;
    const int64_t cc = C < m ? C : m; /* the longest chunk */
    const size_t need = (size_t)(m * D + m * k + k * k + D * k + 2 * D + 3 * m + 2 * cc * D + cc * cc);
    double *buf = kv_calloc(need, sizeof(double), "compactor scratch", err);
    if (!buf) return err->code;
    double *X = buf, *G = X + m * D + m * k, *Phi = G + k * k, *kp = Phi + D * k, *l = kp + 2 * D, *att = l + m,
           *pool = att + m, *w = pool + m;
    leverage(cfg, v, left, m, X, G, Phi, kp, l);
    noncausal(cfg, v, left, m, w, att);
    for (int64_t i = 0; i < m; i++) /* avg_pool1d(kernel 3, padding 1): zeros outside, divided by 3 */
        pool[i] = ((i > 0 ? att[i - 1] : 0.0) + att[i] + (i + 1 < m ? att[i + 1] : 0.0)) / 3.0;
    zscore(l, m);
    zscore(pool, m);
    double blend = policy_num(cfg, "blending");
    if (blend < 0) blend = 1.0 - (double)v->budget / (double)n;
    for (int64_t i = 0; i < m; i++) scores[left + i] = blend * l[i] + pool[i];
    free(buf);
    return KV_OK;
}

const policy_iface policy_compactor = {
    .name = "compactor",
    .summary = "Compactor: sketched key leverage plus non-causal chunked attention times ‖v‖, z-scored (sim only)",
    .params = {{.key = "blending", .kind = PARAM_NUMBER, .def = "-1", .min = -1, .max = 1e6,
                .doc = "weight of the leverage term; -1: the step's compression ratio 1 - N/|C| (the source's)"},
               {.key = "chunk", .kind = PARAM_NUMBER, .def = "256", .min = 1, .max = 1 << 20, .integer = true,
                .doc = "candidates per non-causal attention chunk"},
               {.key = "first", .kind = PARAM_NUMBER, .def = "8", .min = 0, .max = 1 << 30, .integer = true,
                .doc = "oldest candidates protected"},
               {.key = "last", .kind = PARAM_NUMBER, .def = "4", .min = 0, .max = 1 << 30, .integer = true,
                .doc = "newest candidates protected"},
               {.key = "seed", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 9007199254740992.0, .integer = true,
                .doc = "sketch seed (drawn per layer, kv head and step)"},
               {.key = "sketch", .kind = PARAM_NUMBER, .def = "48", .min = 1, .max = 4096, .integer = true,
                .doc = "sketch dimensions"}},
    .score = compactor_score,
    /* every candidate's own query: the in-model run keeps only a window of them */
    .offline_only = true,
    /* z-scores within each head */
    .scores_comparable = false,
};
