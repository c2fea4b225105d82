/* oracle: keeps the keys with the most future attention (SPEC §5). s_j =
 * Σ_{i > now} a^full_ij, the full-cache attention every future query will
 * give candidate j, averaged over the kv group's heads; a^full_ij =
 * exp(q_i.k_j/sqrt(D) − lse_i) with lse_i the full-cache log-sum-exp.
 * What it bounds: at one eviction step, no N of the candidates hold more of
 * the future queries' summed full-cache attention than the N it keeps (up
 * to float rounding). What it does not bound: the output error (values and
 * the renormalised softmax over the kept set matter too; on random-weight
 * models random can beat it), nor recall over a whole run (each step is
 * greedy and later steps evict again). The future terms are summed
 * directly, never as colsum minus the past (which cancels catastrophically
 * for tiny weights). With no future left every score is 0 and the tie rule
 * keeps the newest. Uses the future: an offline reference only.
 *
 * The future queries are taken ORACLE_ROWS at a time: one sgemm scores them
 * against the candidates, each weight is exp'd in float (as every attention
 * weight here) and added to the candidate's sum in double.
 * Parameters: none. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "core/fastexp.h"
#include "policies/policy.h"

enum { ORACLE_ROWS = 128 };

typedef struct {
    float *s;       /* [ORACLE_ROWS][cap] scores, then weights */
    int64_t cap;
} oracle_state;

static int oracle_create(const policy_config *cfg, void **state, kv_err *err)
{
    (void)cfg;
    oracle_state *s = kv_calloc(1, sizeof *s, "oracle state", err);
    if (!s) return err->code;
    *state = s;
    return KV_OK;
}

static void oracle_destroy(void *state)
{
    oracle_state *s = state;
    if (s) free(s->s);
    free(s);
}

/* acc[c] += Σ_r exp(s[r][c] − lse[r]) over a block of rows, in row order. */
static void add_weights(double *acc, float *s, const double *lse, int64_t rows, int64_t n, double per_head)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = s + r * n;
        const float m = (float)lse[r];
        for (int64_t c = 0; c < n; c++) row[c] = kv_expf(row[c] - m);
        for (int64_t c = 0; c < n; c++) acc[c] += per_head * (double)row[c];
    }
}

static int oracle_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                        kv_err *err)
{
    (void)cfg;
    oracle_state *st = state;
    const int64_t n = v->n, D = v->D, T = v->T;
    for (int64_t c = 0; c < n; c++) scores[c] = 0.0;
    if (!v->queries || n == 0 || v->now + 1 >= T) return KV_OK;
    if (n > st->cap) {
        free(st->s);
        st->cap = 0;
        if (!(st->s = kv_calloc((size_t)ORACLE_ROWS * (size_t)n, sizeof(float), "oracle scores", err)))
            return err->code;
        st->cap = n;
    }
    const float scale = (float)(1.0 / sqrt((double)D));
    for (int64_t j = 0; j < v->q_heads; j++)
        for (int64_t i0 = v->now + 1; i0 < T; i0 += ORACLE_ROWS) {
            const int64_t rows = T - i0 < ORACLE_ROWS ? T - i0 : ORACLE_ROWS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)D, scale,
                        v->queries + (j * T + i0) * D, (int)D, v->keys, (int)D, 0.0f, st->s, (int)n);
            add_weights(scores, st->s, v->lse + j * T + i0, rows, n, 1.0 / (double)v->q_heads);
        }
    return KV_OK;
}

const policy_iface policy_oracle = {
    .name = "oracle",
    .summary = "keeps the keys with the most future full-cache attention (reads the future: offline only); "
               "a reference for attention recall, NOT a bound on output error",
    .create = oracle_create,
    .destroy = oracle_destroy,
    .score = oracle_score,
    .offline_only = true,
    .scores_comparable = true,
};
