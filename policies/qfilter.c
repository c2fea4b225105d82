/* qfilter: Q-Filters (Godey et al., "Q-Filters: Leveraging QK Geometry for
 * Efficient KV Cache Compression", 2025, arXiv:2503.02812; reference: kvpress
 * kvpress/presses/qfilter_press.py, QFilterPress, which loads filters the
 * authors calibrated offline). The filter u is the top right-singular vector
 * of the queries Q of the kv group's query heads (rows: every head's query at
 * every calibration position, as the trace holds them), i.e. the top
 * eigenvector of QᵀQ, with its sign chosen so that Σ ⟨u, q⟩ >= 0; then
 *   s_i = ⟨u, k_i⟩
 * (a key along the direction the queries lean to draws more attention: higher
 * keeps; kvpress writes −⟨f, k⟩ for its published filters f, see
 * docs/policies.md). Calibration:
 *   calib=stream  the queries of every position seen so far (observed each
 *                 chunk; in-model, of each chunk's latest QFILTER_QWIN)
 *   calib=prompt  the whole prompt's queries, once: reads the future, so it
 *                 is offline only (sim), like oracle
 * With no query seen, u = 0 and every score is 0 (recency by the tie rule).
 * Parameters: calib (prompt|stream, stream). */
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policy.h"
#include "core/vecmath.h"

enum { CALIB_PROMPT, CALIB_STREAM, QFILTER_QWIN = 64 };

typedef struct {
    double *m, *sum, *u;   /* [D][D] Σ q qᵀ; [D] Σ q; [D] the filter */
    int64_t D, last;       /* queries taken in up to position last */
    bool fresh;            /* u is up to date with m */
} qfilter_state;

static int qfilter_create(const policy_config *cfg, void **state, kv_err *err)
{
    (void)cfg;
    qfilter_state *s = kv_calloc(1, sizeof *s, "qfilter state", err);
    if (!s) return err->code;
    s->last = -1;
    *state = s;
    return KV_OK;
}

static void qfilter_destroy(void *state)
{
    qfilter_state *s = state;
    if (s) free(s->m);
    free(s);
}

/* Takes in the queries of positions last+1 .. upto the view holds. */
static int take_in(qfilter_state *s, const policy_view *v, int64_t upto, kv_err *err)
{
    const int64_t D = v->D;
    if (!s->m) {
        if (!(s->m = kv_calloc((size_t)(D * D + 2 * D), sizeof(double), "qfilter statistics", err))) return err->code;
        s->sum = s->m + D * D, s->u = s->sum + D, s->D = D;
    }
    const int64_t from = s->last + 1 > v->q0 ? s->last + 1 : v->q0;
    for (int64_t j = 0; v->queries && j < v->q_heads; j++)
        for (int64_t t = from; t <= upto; t++) {
            const float *q = v->queries + (j * v->T + t - v->q0) * D;
            for (int64_t a = 0; a < D; a++) {
                s->sum[a] += q[a];
                for (int64_t b = 0; b <= a; b++) s->m[a * D + b] += (double)q[a] * q[b];
            }
        }
    if (upto > s->last) s->last = upto, s->fresh = false;
    return KV_OK;
}

/* u = the top eigenvector of m (lower triangle), signed towards sum. */
static int update_filter(qfilter_state *s, kv_err *err)
{
    const int64_t D = s->D;
    double *a = kv_calloc((size_t)(D * D + 2 * D), sizeof(double), "qfilter eigenvector", err); /* m, z, w */
    lapack_int *sup = a ? kv_calloc(2, sizeof *sup, "qfilter eigenvector", err) : NULL;
    if (!sup) {
        free(a);
        return err->code;
    }
    memcpy(a, s->m, sizeof(double) * (size_t)(D * D));
    lapack_int found = 0;
    double *w = a + D * D + D; /* dsyevr writes up to D eigenvalues */
    int info = LAPACKE_dsyevr(LAPACK_ROW_MAJOR, 'V', 'I', 'L', (lapack_int)D, a, (lapack_int)D, 0, 0, (lapack_int)D,
                              (lapack_int)D, 0.0, &found, w, a + D * D, 1, sup);
    double dot = 0;
    for (int64_t d = 0; d < D; d++) s->u[d] = info == 0 && found == 1 && w[0] > 0 ? a[D * D + d] : 0.0;
    for (int64_t d = 0; d < D; d++) dot += s->u[d] * s->sum[d];
    if (dot < 0)
        for (int64_t d = 0; d < D; d++) s->u[d] = -s->u[d];
    s->fresh = true;
    free(a), free(sup);
    return KV_OK;
}

static int qfilter_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    if (policy_choice(cfg, "calib") != CALIB_STREAM) return KV_OK;
    return take_in(state, v, v->now, err);
}

static int qfilter_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    qfilter_state *s = state;
    int rc = KV_OK;
    if (policy_choice(cfg, "calib") == CALIB_PROMPT && s->last < 0) /* once: the whole prompt (sim: q0 = 0) */
        rc = take_in(s, v, (v->prompt_len > 0 ? v->prompt_len : v->now + 1) - 1, err);
    else if (!s->m)
        rc = take_in(s, v, -1, err);
    if (!rc && !s->fresh) rc = update_filter(s, err);
    if (rc) return rc;
    if (s->D != v->D) return kv_fail(err, KV_EFAIL, "qfilter: head dim changed within a stream");
    vm_dots(v->keys, v->n, v->D, s->u, scores);
    return KV_OK;
}

static int64_t qfilter_query_window(const policy_config *cfg)
{
    return policy_choice(cfg, "calib") == CALIB_STREAM ? QFILTER_QWIN : 0;
}

static bool qfilter_offline(const policy_config *cfg)
{
    return policy_choice(cfg, "calib") == CALIB_PROMPT;
}

const policy_iface policy_qfilter = {
    .name = "qfilter",
    .summary = "Q-Filters: projection of each key on the queries' top singular direction (seen so far, or the prompt's)",
    .params = {{.key = "calib", .kind = PARAM_CHOICE, .def = "stream", .choices = "prompt|stream",
                .doc = "filter from the queries seen so far, or from the whole prompt's (offline only)"}},
    .create = qfilter_create,
    .destroy = qfilter_destroy,
    .score = qfilter_score,
    .observe = qfilter_observe,
    .query_window = qfilter_query_window,
    .offline_for = qfilter_offline,
};
