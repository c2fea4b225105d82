/* anchor: keydiff's exact anchor sum, from scratch and step by step, and its cosine scores. */
#include "policies/anchor.h"

#include <stdlib.h>
#include <string.h>

#include "core/vectorize.h"
#include "core/vecmath.h"

/* x (|x| ≤ 1) to a multiple of 2^-36, ties to even (+1.5·2^16 keeps 36 fraction bits; no FMA). */
#define ROUND_FRAC(x) (((x) + 98304.0) - 98304.0)

KV_VECTOR_CLONES
void anchor_sum(const float *rows, int64_t n, int64_t D, const double *norms, double *inv, double *sum)
{
    for (int64_t j = 0; j < n; j++) inv[j] = norms[j] > 0 ? 1.0 / norms[j] : 0.0;
    memset(sum, 0, sizeof(double) * (size_t)D);
    for (int64_t j = 0; j < n; j++)
        for (int64_t d = 0; d < D; d++) sum[d] += ROUND_FRAC((double)rows[j * D + d] * inv[j]);
}

/* One key's rounded row added to the sum (sign 1) or taken from it (−1): the same rounding, so
 * what leaves is exactly what joined. */
KV_VECTOR_CLONES
static void add_row(const float *k, int64_t D, double norm, double sign, double *sum)
{
    const double inv = norm > 0 ? 1.0 / norm : 0.0;
    for (int64_t d = 0; d < D; d++) sum[d] += sign * ROUND_FRAC((double)k[d] * inv);
}

void anchor_free(anchor_state *a)
{
    free(a->sum), free(a->m), free(a->next), free(a->keys), free(a->free_rows);
    memset(a, 0, sizeof *a);
}

static void *grow(void *p, size_t size, bool *ok)
{
    void *q = *ok ? realloc(p, size) : NULL;
    *ok = q != NULL;
    return q ? q : p;
}

/* Room for n members of D dims (a new D starts over); new rows go on the free list. */
static int fit(anchor_state *a, int64_t n, int64_t D, kv_err *err)
{
    if (a->D != D) anchor_free(a);
    bool ok = a->sum || (a->sum = calloc((size_t)D, sizeof(double)));
    a->D = D;
    if (ok && n > a->cap) {
        int64_t cap = a->cap ? a->cap : 64;
        while (cap < n) cap *= 2;
        a->m = grow(a->m, (size_t)cap * sizeof *a->m, &ok), a->next = grow(a->next, (size_t)cap * sizeof *a->m, &ok);
        a->keys = grow(a->keys, (size_t)(cap * D) * sizeof(float), &ok);
        a->free_rows = grow(a->free_rows, (size_t)cap * sizeof(int64_t), &ok);
        for (int64_t r = a->cap; ok && r < cap; r++) a->free_rows[a->n_free++] = r;
        if (ok) a->cap = cap;
    }
    return ok ? KV_OK : kv_fail(err, KV_EFAIL, "keydiff anchor: out of memory for %lld candidates", (long long)n);
}

static void drop(anchor_state *a, const anchor_member *m)
{
    add_row(a->keys + m->row * a->D, a->D, m->norm, -1.0, a->sum), a->free_rows[a->n_free++] = m->row;
}

/* Members that are not candidates leave first (the sum never holds more than max(old, new)
 * members); false, with the sum rebuilt empty, when the positions do not ascend. */
static bool leave(anchor_state *a, const int64_t *pos, int64_t n)
{
    int64_t i = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j > 0 && pos[j] <= pos[j - 1]) {
            a->n = a->n_free = 0;
            for (int64_t r = 0; r < a->cap; r++) a->free_rows[a->n_free++] = r;
            memset(a->sum, 0, sizeof(double) * (size_t)a->D);
            return false;
        }
        for (; i < a->n && a->m[i].pos < pos[j]; i++) drop(a, &a->m[i]);
        i += i < a->n && a->m[i].pos == pos[j];
    }
    for (; i < a->n; i++) drop(a, &a->m[i]);
    return true;
}

/* The candidates become the members: survivors keep their rows, the others join. */
static void join(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, double *norms)
{
    const int64_t D = a->D;
    for (int64_t j = 0, i = 0; j < n; j++) {
        while (i < a->n && a->m[i].pos < pos[j]) i++; /* left in leave() */
        anchor_member *x = &a->next[j];
        if (i < a->n && a->m[i].pos == pos[j]) {
            *x = a->m[i++];
        } else {
            x->pos = pos[j], x->row = a->free_rows[--a->n_free];
            vm_norms_cached(NULL, rows + j * D, NULL, 1, D, &x->norm, NULL);
            memcpy(a->keys + x->row * D, rows + j * D, sizeof(float) * (size_t)D);
            add_row(rows + j * D, D, x->norm, 1.0, a->sum);
        }
        norms[j] = x->norm;
    }
    anchor_member *t = a->m;
    a->m = a->next, a->next = t, a->n = n;
}

int anchor_update(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, int64_t D, double *norms,
                  kv_err *err)
{
    int rc = fit(a, n > a->n ? n : a->n, D, err);
    if (!rc && !leave(a, pos, n)) a->n = 0;
    if (!rc) join(a, rows, pos, n, norms);
    return rc;
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
