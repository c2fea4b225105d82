/* oracle: keeps the keys with the most future attention
 * (docs/policies.md#the-first-ten-policies). s_j =
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
 * weight here) and added to the candidate's sum in double. Incrementally
 * (the default): a candidate's weights are computed once, when it joins, per
 * block of ORACLE_BLOCK future queries, and kept as suffix sums over the
 * blocks (sums of positive terms, from the end: nothing cancels); each step
 * adds the queries before the next block start to the suffix from there, so a
 * step costs O(ORACLE_BLOCK·|C|·D) at most (nothing when now + 1 starts a
 * block) and each candidate O((T − now)·D) once. The
 * rescanning form (policy_oracle_rescan, tests only) sums every future query
 * at every step; the two differ by rounding only (docs/policies.md).
 * A joiner's weights do not depend on the budget: sim replays a stream's budgets
 * in lock step with one share (share_create), where the first budget to take in
 * a step's joiners leaves their suffix sums and the others, finding the same
 * joiners (positions and key bits) at the same step, copy them: the same
 * doubles, computed once.
 * Parameters: none. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fastexp.h"
#include "core/vectorize.h"
#include "policies/policy.h"

enum { ORACLE_ROWS = 128, ORACLE_BLOCK = 64 };

typedef struct {
    float *s;                 /* [ORACLE_ROWS][cap] scores, then weights */
    int64_t cap;
    /* the incremental form: the last step's candidates (members) by position, each with a row of
     * suffix sums suf[row][b] = Σ over query blocks ≥ b of its weight (suf[row][nb] = 0) */
    int64_t T, nb, n, mcap, n_free;
    int64_t *mpos, *mrow, *npos, *nrow, *free_rows, *join; /* [mcap] */
    float *kj;                /* [mcap][D] the joiners' keys */
    double *suf, *tmp;        /* [mcap][nb + 1], [mcap] */
} oracle_state;

/* The lock-step replays' share: the last joiners computed (by any budget) with their suffix sums
 * over the blocks from bs, and what they were computed from (the stream's queries and lse). */
typedef struct {
    const float *queries;
    const double *lse;
    int64_t T, D, q_heads, bs, J, cap;
    int64_t *pos;             /* [cap] */
    float *keys;              /* [cap][D] */
    double *suf;              /* [cap][nb + 1 − bs] */
} oracle_share;

static void share_destroy(void *share)
{
    oracle_share *sh = share;
    if (sh) free(sh->pos), free(sh->keys), free(sh->suf);
    free(sh);
}

static int share_create(const policy_config *cfg, void **share, kv_err *err)
{
    (void)cfg;
    *share = kv_calloc(1, sizeof(oracle_share), "oracle share", err);
    return *share ? KV_OK : err->code;
}

static int oracle_create(const policy_config *cfg, void **state, kv_err *err)
{
    (void)cfg;
    oracle_state *s = kv_calloc(1, sizeof *s, "oracle state", err);
    if (!s) return err->code;
    *state = s;
    return KV_OK;
}

static void members_free(oracle_state *s)
{
    free(s->mpos), free(s->mrow), free(s->npos), free(s->nrow), free(s->free_rows), free(s->join);
    free(s->kj), free(s->suf), free(s->tmp);
    s->mpos = s->mrow = s->npos = s->nrow = s->free_rows = s->join = NULL, s->kj = NULL, s->suf = s->tmp = NULL;
    s->n = s->mcap = s->n_free = 0;
}

static void oracle_destroy(void *state)
{
    oracle_state *s = state;
    if (s) free(s->s), members_free(s);
    free(s);
}

/* acc[c] += Σ_r exp(s[r][c] − lse[r]) over a block of rows, in row order (each column on its own:
 * the clones give the same doubles). */
KV_VECTOR_CLONES
static void add_weights(double *acc, float *s, const double *lse, int64_t rows, int64_t n, double per_head)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = s + r * n;
        const float m = (float)lse[r];
        for (int64_t c = 0; c < n; c++) row[c] = kv_expf(row[c] - m);
        for (int64_t c = 0; c < n; c++) acc[c] += per_head * (double)row[c];
    }
}

/* acc[c] += the mean over the group's heads of Σ_{r0 ≤ i < r1} a^full_ic, keys [m][D]. */
static int future_rows(oracle_state *st, const policy_view *v, const float *keys, int64_t m, int64_t r0, int64_t r1,
                       double *acc, kv_err *err)
{
    const int64_t D = v->D, T = v->T;
    if (m > st->cap) {
        free(st->s);
        st->cap = 0;
        if (!(st->s = kv_calloc((size_t)ORACLE_ROWS * (size_t)m, sizeof(float), "oracle scores", err)))
            return err->code;
        st->cap = m;
    }
    const float scale = (float)(1.0 / sqrt((double)D));
    for (int64_t j = 0; j < v->q_heads; j++)
        for (int64_t i0 = r0; i0 < r1; i0 += ORACLE_ROWS) {
            const int64_t rows = r1 - i0 < ORACLE_ROWS ? r1 - i0 : ORACLE_ROWS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)m, (int)D, scale,
                        v->queries + (j * T + i0) * D, (int)D, keys, (int)D, 0.0f, st->s, (int)m);
            add_weights(acc, st->s, v->lse + j * T + i0, rows, m, 1.0 / (double)v->q_heads);
        }
    return KV_OK;
}

static bool no_future(const policy_view *v, double *scores)
{
    for (int64_t c = 0; c < v->n; c++) scores[c] = 0.0;
    return !v->queries || v->n == 0 || v->now + 1 >= v->T;
}

static int rescan_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)cfg;
    return no_future(v, scores) ? KV_OK : future_rows(state, v, v->keys, v->n, v->now + 1, v->T, scores, err);
}

/* Room for n members (a new T starts over); new rows go on the free list. */
static int members_fit(oracle_state *st, int64_t n, int64_t D, int64_t T, kv_err *err)
{
    if (st->T != T) members_free(st), st->T = T, st->nb = (T + ORACLE_BLOCK - 1) / ORACLE_BLOCK;
    if (n <= st->mcap) return KV_OK;
    int64_t cap = st->mcap ? 2 * st->mcap : 64, w = st->nb + 1;
    while (cap < n) cap *= 2;
    bool ok = true;
    int64_t **ints[] = {&st->mpos, &st->mrow, &st->npos, &st->nrow, &st->free_rows, &st->join};
    for (size_t i = 0; ok && i < sizeof ints / sizeof *ints; i++) {
        int64_t *p = realloc(*ints[i], sizeof(int64_t) * (size_t)cap);
        ok = p != NULL, *ints[i] = p ? p : *ints[i];
    }
    float *kj = ok ? realloc(st->kj, sizeof(float) * (size_t)(cap * D)) : NULL;
    if (kj) st->kj = kj;
    double *suf = kj ? realloc(st->suf, sizeof(double) * (size_t)(cap * w)) : NULL;
    if (suf) st->suf = suf;
    double *tmp = suf ? realloc(st->tmp, sizeof(double) * (size_t)cap) : NULL;
    if (!tmp) return kv_fail(err, KV_EFAIL, "oracle: out of memory for %lld candidates", (long long)n);
    st->tmp = tmp;
    for (int64_t r = st->mcap; r < cap; r++) st->free_rows[st->n_free++] = r;
    st->mcap = cap;
    return KV_OK;
}

/* The candidates become the members: survivors keep their rows, the others (join[0..*J)) get free
 * ones; false when the positions do not ascend (no members kept). */
static bool members_merge(oracle_state *st, const int64_t *pos, int64_t n, int64_t *J)
{
    int64_t i = 0;
    *J = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j > 0 && pos[j] <= pos[j - 1]) {
            st->n = st->n_free = 0;
            for (int64_t r = 0; r < st->mcap; r++) st->free_rows[st->n_free++] = r;
            return false;
        }
        for (; i < st->n && st->mpos[i] < pos[j]; i++) st->free_rows[st->n_free++] = st->mrow[i];
        st->npos[j] = pos[j], st->nrow[j] = -1;
        if (i < st->n && st->mpos[i] == pos[j]) st->nrow[j] = st->mrow[i++];
        else st->join[(*J)++] = j;
    }
    for (; i < st->n; i++) st->free_rows[st->n_free++] = st->mrow[i];
    for (int64_t r = 0; r < *J; r++) st->nrow[st->join[r]] = st->free_rows[--st->n_free];
    int64_t *t = st->mpos;
    st->mpos = st->npos, st->npos = t, t = st->mrow, st->mrow = st->nrow, st->nrow = t, st->n = n;
    return true;
}

/* The joiners' (keys in st->kj) suffix sums over the blocks from bs, from the end: suf[b] = P[b] + suf[b + 1]. */
static int join_compute(oracle_state *st, const policy_view *v, int64_t J, int64_t bs, kv_err *err)
{
    const int64_t w = st->nb + 1;
    for (int64_t b = st->nb - 1; b >= bs; b--) {
        for (int64_t r = 0; r < J; r++) st->tmp[r] = 0.0;
        const int64_t r1 = (b + 1) * ORACLE_BLOCK < v->T ? (b + 1) * ORACLE_BLOCK : v->T;
        int rc = future_rows(st, v, st->kj, J, b * ORACLE_BLOCK, r1, st->tmp, err);
        if (rc) return rc;
        for (int64_t r = 0; r < J; r++) {
            double *row = st->suf + st->mrow[st->join[r]] * w;
            row[b] = st->tmp[r] + row[b + 1];
        }
    }
    return KV_OK;
}

/* Whether the share holds these J joiners (st->kj, at v->pos[st->join[..]]) from blocks bs on,
 * computed from the same queries: then their rows are what computing them gives, bit for bit. */
static bool share_holds(const oracle_share *sh, const oracle_state *st, const policy_view *v, int64_t J, int64_t bs)
{
    if (!sh || sh->queries != v->queries || sh->lse != v->lse || sh->T != v->T || sh->D != v->D ||
        sh->q_heads != v->q_heads || sh->bs != bs || sh->J != J)
        return false;
    for (int64_t r = 0; r < J; r++)
        if (sh->pos[r] != v->pos[st->join[r]]) return false;
    return memcmp(sh->keys, st->kj, sizeof(float) * (size_t)(J * v->D)) == 0;
}

/* The joiners just computed (their suffix rows in st) into the share, for the other budgets. */
static int share_keep(oracle_share *sh, const oracle_state *st, const policy_view *v, int64_t J, int64_t bs,
                      kv_err *err)
{
    const int64_t D = v->D, w = st->nb + 1 - bs;
    sh->J = -1; /* holds nothing until filled */
    if (J > sh->cap || sh->D != D || sh->T != v->T) {
        free(sh->pos), free(sh->keys), free(sh->suf);
        sh->pos = NULL, sh->keys = NULL, sh->suf = NULL, sh->cap = 0;
        const int64_t cap = J > 64 ? J : 64;
        if (!(sh->pos = kv_calloc((size_t)cap, sizeof(int64_t), "oracle share", err)) ||
            !(sh->keys = kv_calloc((size_t)(cap * D), sizeof(float), "oracle share", err)) ||
            !(sh->suf = kv_calloc((size_t)(cap * (st->nb + 1)), sizeof(double), "oracle share", err)))
            return err->code;
        sh->cap = cap;
    }
    for (int64_t r = 0; r < J; r++) {
        sh->pos[r] = v->pos[st->join[r]];
        memcpy(sh->suf + r * w, st->suf + st->mrow[st->join[r]] * (st->nb + 1) + bs, sizeof(double) * (size_t)w);
    }
    memcpy(sh->keys, st->kj, sizeof(float) * (size_t)(J * D));
    sh->queries = v->queries, sh->lse = v->lse, sh->T = v->T, sh->D = D, sh->q_heads = v->q_heads;
    sh->bs = bs, sh->J = J;
    return KV_OK;
}

/* The joiners' suffix sums over the blocks from bs (the first to start after now), computed once
 * (or, in lock step, copied from the budget that computed them at this step). */
static int join_suffixes(oracle_state *st, const policy_view *v, int64_t J, int64_t bs, kv_err *err)
{
    const int64_t D = v->D, w = st->nb + 1;
    for (int64_t r = 0; r < J; r++) {
        memcpy(st->kj + r * D, v->keys + st->join[r] * D, sizeof(float) * (size_t)D);
        st->suf[st->mrow[st->join[r]] * w + st->nb] = 0.0;
    }
    oracle_share *sh = v->share;
    if (share_holds(sh, st, v, J, bs)) {
        for (int64_t r = 0; r < J; r++)
            memcpy(st->suf + st->mrow[st->join[r]] * w + bs, sh->suf + r * (w - bs), sizeof(double) * (size_t)(w - bs));
        return KV_OK;
    }
    int rc = join_compute(st, v, J, bs, err);
    return rc || !sh ? rc : share_keep(sh, st, v, J, bs, err);
}

static int oracle_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    oracle_state *st = state;
    if (no_future(v, scores)) return KV_OK;
    int64_t J = 0, bs = (v->now + ORACLE_BLOCK) / ORACLE_BLOCK; /* ⌈(now + 1)/ORACLE_BLOCK⌉ */
    int rc = members_fit(st, v->n, v->D, v->T, err);
    if (rc) return rc;
    if (!members_merge(st, v->pos, v->n, &J)) return rescan_score(cfg, state, v, scores, err);
    if ((rc = join_suffixes(st, v, J, bs, err))) return rc;
    const int64_t end = bs * ORACLE_BLOCK < v->T ? bs * ORACLE_BLOCK : v->T; /* none when now + 1 starts a block */
    if ((rc = future_rows(st, v, v->keys, v->n, v->now + 1, end, scores, err))) return rc;
    for (int64_t c = 0; c < v->n; c++) scores[c] += st->suf[st->mrow[c] * (st->nb + 1) + bs];
    return KV_OK;
}

/* The rescanning form, for the tests (not in the registry): every future query at every step. */
const policy_iface policy_oracle_rescan = {
    .name = "oracle",
    .summary = "oracle, summing every future query at every step",
    .create = oracle_create,
    .destroy = oracle_destroy,
    .score = rescan_score,
    .offline_only = true,
    .scores_comparable = true,
};

const policy_iface policy_oracle = {
    .name = "oracle",
    .summary = "keeps the keys with the most future full-cache attention (reads the future: offline only); "
               "a reference for attention recall, NOT a bound on output error",
    .create = oracle_create,
    .destroy = oracle_destroy,
    .score = oracle_score,
    .offline_only = true,
    .scores_comparable = true,
    .share_create = share_create,
    .share_destroy = share_destroy,
};
