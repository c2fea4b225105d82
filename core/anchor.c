/* anchor: keydiff's exact anchor sum, from scratch and step by step, and its cosine scores. */
#include "core/anchor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/vecmath.h"
#include "core/vectorize.h"

/* x (|x| ≤ 1) to a multiple of 2^-36, ties to even (+1.5·2^16 keeps 36 fraction bits; no FMA). */
#define ROUND_FRAC(x) (((x) + 98304.0) - 98304.0)

/* The relative costs of a row that joins (norm, rounding, stored), leaves (a subtraction) and is
 * summed from scratch (norm, rounding), measured in kdbench-like runs (docs/policies.md). */
#define COST_JOIN 1.25
#define COST_LEAVE 0.25

KV_VECTOR_CLONES
void anchor_sum(const float *rows, int64_t n, int64_t D, const double *norms, double *inv, double *sum)
{
    for (int64_t j = 0; j < n; j++) inv[j] = norms[j] > 0 ? 1.0 / norms[j] : 0.0;
    memset(sum, 0, sizeof(double) * (size_t)D);
    for (int64_t j = 0; j < n; j++)
        for (int64_t d = 0; d < D; d++) sum[d] += ROUND_FRAC((double)rows[j * D + d] * inv[j]);
}

/* Rows idx[0..cnt) (all n when idx is NULL): each norm (vm_norm's value) into norms[idx[i]], the
 * rows' rounded k̂ summed into sum and, with unit, kept at rows urow[i]. Column blocks of VM_LANES
 * doubles held in registers over the rows (exact in any order); inv: cnt doubles of scratch. */
KV_VECTOR_CLONES
static void unit_rows(const float *rows, const int64_t *idx, int64_t cnt, int64_t D, double *norms, double *unit,
                      const int64_t *urow, double *sum, double *inv)
{
    for (int64_t i = 0; i < cnt; i++) {
        const float *k = rows + (idx ? idx[i] : i) * D;
        const double nrm = sqrt(vm_dot16_ff(k, k, D));
        norms[idx ? idx[i] : i] = nrm, inv[i] = nrm > 0 ? 1.0 / nrm : 0.0;
    }
    for (int64_t d0 = 0; d0 < D; d0 += VM_LANES) {
        const int64_t w = D - d0 < VM_LANES ? D - d0 : VM_LANES;
        double a[VM_LANES] = {0};
        for (int64_t i = 0; i < cnt; i++) {
            const float *k = rows + (idx ? idx[i] : i) * D + d0;
            if (w < VM_LANES) {
                for (int64_t l = 0; l < w; l++) {
                    const double r = ROUND_FRAC((double)k[l] * inv[i]);
                    a[l] += r;
                    if (unit) unit[urow[i] * D + d0 + l] = r;
                }
            } else if (unit) {
                double *u = unit + urow[i] * D + d0;
                for (int l = 0; l < VM_LANES; l++) u[l] = ROUND_FRAC((double)k[l] * inv[i]), a[l] += u[l];
            } else {
                for (int l = 0; l < VM_LANES; l++) a[l] += ROUND_FRAC((double)k[l] * inv[i]);
            }
        }
        for (int64_t l = 0; l < w; l++) sum[d0 + l] += a[l];
    }
}

/* The kept k̂ of rows urow[0..cnt) taken from the sum: exactly what joined. */
KV_VECTOR_CLONES
static void unit_leave(const double *unit, const int64_t *urow, int64_t cnt, int64_t D, double *sum)
{
    for (int64_t d0 = 0; d0 < D; d0 += VM_LANES) {
        const int64_t w = D - d0 < VM_LANES ? D - d0 : VM_LANES;
        double a[VM_LANES] = {0};
        for (int64_t i = 0; i < cnt; i++)
            for (int64_t l = 0; l < w; l++) a[l] += unit[urow[i] * D + d0 + l];
        for (int64_t l = 0; l < w; l++) sum[d0 + l] -= a[l];
    }
}

void anchor_free(anchor_state *a)
{
    free(a->sum), free(a->m), free(a->next), free(a->unit), free(a->free_rows), free(a->idx), free(a->inv);
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
    if (a->D != D) anchor_free(a), a->last_pos = -1;
    bool ok = a->sum || (a->sum = calloc((size_t)D, sizeof(double)));
    a->D = D;
    if (ok && n > a->cap) {
        int64_t cap = a->cap ? a->cap : 64;
        while (cap < n) cap *= 2;
        a->m = grow(a->m, (size_t)cap * sizeof *a->m, &ok), a->next = grow(a->next, (size_t)cap * sizeof *a->m, &ok);
        a->unit = grow(a->unit, (size_t)(cap * D) * sizeof(double), &ok);
        a->free_rows = grow(a->free_rows, (size_t)cap * sizeof(int64_t), &ok);
        a->idx = grow(a->idx, (size_t)(2 * cap) * sizeof(int64_t), &ok);
        a->inv = grow(a->inv, (size_t)cap * sizeof(double), &ok);
        for (int64_t r = a->cap; ok && r < cap; r++) a->free_rows[a->n_free++] = r;
        if (ok) a->cap = cap;
    }
    return ok ? KV_OK : kv_fail(err, KV_EFAIL, "keydiff anchor: out of memory for %lld candidates", (long long)n);
}

/* No members, every row free, the sum zero. */
static void empty(anchor_state *a)
{
    a->n = a->n_free = 0;
    for (int64_t r = 0; r < a->cap; r++) a->free_rows[a->n_free++] = r;
    memset(a->sum, 0, sizeof(double) * (size_t)a->D);
}

/* One merge of the members with the candidates (positions ascending): survivors keep their rows;
 * the members that are not candidates leave (their k̂ off the sum, rows freed); the others join
 * (their norms and k̂ in one pass). idx: the leavers' rows, then the joiners' rows; from cap the
 * joiners' indices. */
static void merge(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, double *norms)
{
    int64_t L = 0, J = 0, i = 0, *jn = a->idx + a->cap;
    for (int64_t j = 0; j < n; j++) {
        for (; i < a->n && a->m[i].pos < pos[j]; i++) a->idx[L++] = a->m[i].row;
        if (i < a->n && a->m[i].pos == pos[j]) a->next[j] = a->m[i++], norms[j] = a->next[j].norm;
        else a->next[j].pos = pos[j], jn[J++] = j;
    }
    for (; i < a->n; i++) a->idx[L++] = a->m[i].row;
    unit_leave(a->unit, a->idx, L, a->D, a->sum);
    for (int64_t r = 0; r < L; r++) a->free_rows[a->n_free++] = a->idx[r];
    for (int64_t r = 0; r < J; r++) a->idx[r] = a->next[jn[r]].row = a->free_rows[--a->n_free];
    unit_rows(rows, jn, J, a->D, norms, a->unit, a->idx, a->sum, a->inv);
    for (int64_t r = 0; r < J; r++) a->next[jn[r]].norm = norms[jn[r]];
    anchor_member *t = a->m;
    a->m = a->next, a->next = t, a->n = n;
}

static bool ascending(const int64_t *pos, int64_t n)
{
    for (int64_t j = 1; j < n; j++)
        if (pos[j] <= pos[j - 1]) return false;
    return true;
}

int anchor_update(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, int64_t D, double *norms,
                  kv_err *err)
{
    int rc = fit(a, n > a->n ? n : a->n, D, err);
    if (rc) return rc;
    if (a->n == 0) memset(a->sum, 0, sizeof(double) * (size_t)D); /* a from-scratch step's sum */
    int64_t fresh = 0; /* the chunk: about as many join and leave at every step */
    while (fresh < n && pos[n - 1 - fresh] > a->last_pos) fresh++;
    a->last_pos = n > 0 ? pos[n - 1] : a->last_pos, a->steps++;
    if ((double)fresh * (COST_JOIN + COST_LEAVE) >= (double)n) { /* cheaper from scratch, no members kept */
        if (a->n > 0) empty(a);
        unit_rows(rows, NULL, n, D, norms, NULL, NULL, a->sum, a->inv);
        a->scratch++;
        return KV_OK;
    }
    if (!ascending(pos, n)) empty(a); /* no engine makes them: rebuilt, the same doubles */
    merge(a, rows, pos, n, norms);
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
