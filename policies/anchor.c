/* anchor: keydiff's exact anchor sum, from scratch and step by step (anchor.h),
 * and the cosine scores both keydiff and the expressions compute from it. */
#include "policies/anchor.h"

#include <stdlib.h>
#include <string.h>

#include "core/vectorize.h"
#include "policies/vecmath.h"

/* x (|x| ≤ 1) rounded to a multiple of 2^-ANCHOR_FRAC_BITS, ties to even: the
 * addition of 1.5·2^(52−F) leaves F fraction bits, the subtraction is exact.
 * No FMA and no reassociation under the Makefile's flags, so every clone
 * rounds alike. */
#define ANCHOR_ROUND ((double)(3LL << (52 - ANCHOR_FRAC_BITS - 1)))

static inline double round_frac(double x)
{
    return (x + ANCHOR_ROUND) - ANCHOR_ROUND;
}

KV_VECTOR_CLONES
void anchor_sum(const float *rows, int64_t n, int64_t D, const double *norms, double *inv, double *sum)
{
    for (int64_t j = 0; j < n; j++) inv[j] = norms[j] > 0 ? 1.0 / norms[j] : 0.0;
    for (int64_t d = 0; d < D; d++) sum[d] = 0.0;
    for (int64_t j = 0; j < n; j++)
        for (int64_t d = 0; d < D; d++) sum[d] += round_frac((double)rows[j * D + d] * inv[j]);
}

/* One key's rounded row added to the sum (join) or taken from it (leave):
 * the same rounding both ways, so what leaves is exactly what joined. */
KV_VECTOR_CLONES
static void join_row(const float *k, int64_t D, double norm, double *sum)
{
    const double inv = norm > 0 ? 1.0 / norm : 0.0;
    for (int64_t d = 0; d < D; d++) sum[d] += round_frac((double)k[d] * inv);
}

KV_VECTOR_CLONES
static void leave_row(const float *k, int64_t D, double norm, double *sum)
{
    const double inv = norm > 0 ? 1.0 / norm : 0.0;
    for (int64_t d = 0; d < D; d++) sum[d] -= round_frac((double)k[d] * inv);
}

void anchor_free(anchor_state *a)
{
    if (!a) return;
    free(a->sum), free(a->pos), free(a->npos), free(a->row), free(a->nrow), free(a->norm), free(a->nnorm);
    free(a->q), free(a->free_rows);
    memset(a, 0, sizeof *a);
}

static int grow(void **p, size_t size, kv_err *err)
{
    void *q = realloc(*p, size);
    if (!q) return kv_fail(err, KV_EFAIL, "keydiff anchor: out of memory (%zu bytes)", size);
    *p = q;
    return KV_OK;
}

/* Room for n members of D dims; a new D starts over. New pool rows go on the free list. */
static int fit(anchor_state *a, int64_t n, int64_t D, kv_err *err)
{
    if (a->D != D) anchor_free(a);
    if (!a->sum && !(a->sum = calloc((size_t)D, sizeof(double))))
        return kv_fail(err, KV_EFAIL, "keydiff anchor: out of memory");
    a->D = D;
    if (n <= a->cap) return KV_OK;
    int64_t cap = a->cap ? a->cap : 64;
    while (cap < n) cap *= 2;
    const size_t c = (size_t)cap;
    int rc = grow((void **)&a->pos, c * sizeof(int64_t), err);
    if (!rc) rc = grow((void **)&a->npos, c * sizeof(int64_t), err);
    if (!rc) rc = grow((void **)&a->row, c * sizeof(int64_t), err);
    if (!rc) rc = grow((void **)&a->nrow, c * sizeof(int64_t), err);
    if (!rc) rc = grow((void **)&a->norm, c * sizeof(double), err);
    if (!rc) rc = grow((void **)&a->nnorm, c * sizeof(double), err);
    if (!rc) rc = grow((void **)&a->q, c * (size_t)D * sizeof(float), err);
    if (!rc) rc = grow((void **)&a->free_rows, c * sizeof(int64_t), err);
    if (rc) return rc;
    for (int64_t r = a->cap; r < cap; r++) a->free_rows[a->n_free++] = r;
    a->cap = cap;
    return KV_OK;
}

static void reset(anchor_state *a)
{
    a->n = 0, a->n_free = 0;
    for (int64_t r = 0; r < a->cap; r++) a->free_rows[a->n_free++] = r;
    for (int64_t d = 0; d < a->D; d++) a->sum[d] = 0.0;
}

/* Members that are not candidates leave (their rows subtracted first, so
 * the sum never holds more than max(old, new) members); false when the
 * candidates' positions do not ascend. */
static bool leave(anchor_state *a, const int64_t *pos, int64_t n)
{
    int64_t i = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j > 0 && pos[j] <= pos[j - 1]) return false;
        for (; i < a->n && a->pos[i] < pos[j]; i++) {
            leave_row(a->q + a->row[i] * a->D, a->D, a->norm[i], a->sum);
            a->free_rows[a->n_free++] = a->row[i];
            a->pos[i] = -1;
        }
        if (i < a->n && a->pos[i] == pos[j]) i++;
    }
    for (; i < a->n; i++) {
        leave_row(a->q + a->row[i] * a->D, a->D, a->norm[i], a->sum);
        a->free_rows[a->n_free++] = a->row[i];
        a->pos[i] = -1;
    }
    return true;
}

/* The candidates become the members: survivors keep their rows, the others join. */
static void join(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, double *norms)
{
    const int64_t D = a->D;
    int64_t i = 0;
    for (int64_t j = 0; j < n; j++) {
        while (i < a->n && a->pos[i] < pos[j]) i++; /* left in leave() */
        if (i < a->n && a->pos[i] == pos[j]) {
            a->nrow[j] = a->row[i], a->nnorm[j] = a->norm[i++];
        } else {
            const int64_t r = a->free_rows[--a->n_free];
            a->nrow[j] = r;
            vm_norms(rows + j * D, 1, D, &a->nnorm[j]);
            memcpy(a->q + r * D, rows + j * D, sizeof(float) * (size_t)D);
            join_row(rows + j * D, D, a->nnorm[j], a->sum);
        }
        a->npos[j] = pos[j], norms[j] = a->nnorm[j];
    }
    int64_t *t = a->pos;
    a->pos = a->npos, a->npos = t;
    t = a->row, a->row = a->nrow, a->nrow = t;
    double *u = a->norm;
    a->norm = a->nnorm, a->nnorm = u;
    a->n = n;
}

int anchor_update(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, int64_t D, double *norms,
                  kv_err *err)
{
    int rc = fit(a, n > a->n ? n : a->n, D, err);
    if (rc) return rc;
    if (!leave(a, pos, n)) reset(a);
    join(a, rows, pos, n, norms);
    return KV_OK;
}

void anchor_cos_scores(const float *rows, int64_t n, int64_t D, const double *norms, const double *sum,
                       bool pairwise, double *mu, double *out)
{
    if (!pairwise) {
        for (int64_t d = 0; d < D; d++) mu[d] = n > 0 ? sum[d] / (double)n : 0.0;
        vm_dots(rows, n, D, mu, out);
        vm_cos_scores(out, norms, vm_norm_d(mu, D), n);
        return;
    }
    /* −mean over m≠j of cos(k_j, k_m) = −(k̂_j·Σ_m k̂_m − 1)/(n−1) */
    vm_dots(rows, n, D, sum, out);
    for (int64_t j = 0; j < n; j++) /* no other key, or a zero key: cos 0 */
        out[j] = n < 2 || norms[j] == 0 ? 0 : -(out[j] / norms[j] - 1.0) / (double)(n - 1);
}

void anchor_cos(const float *rows, int64_t n, int64_t D, const double *norms, bool normed, bool pairwise,
                double *mu, double *w, double *out)
{
    if ((normed || pairwise) && n < ANCHOR_MAX_N) {
        anchor_sum(rows, n, D, norms, w, mu);
        anchor_cos_scores(rows, n, D, norms, mu, pairwise, mu, out);
        return;
    }
    vm_weighted_mean(rows, n, D, normed || pairwise ? norms : NULL, mu, w);
    for (int64_t d = 0; d < D; d++) mu[d] *= (double)n; /* the sum, as keydiff's anchor_of gives it */
    anchor_cos_scores(rows, n, D, norms, mu, pairwise, mu, out);
}
