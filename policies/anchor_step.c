/* anchor_step: keydiff's exact anchor sum kept step by step (anchor_step.h). */
#include "policies/anchor_step.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/anchor.h"

/* The relative costs of a row that joins (norm, rounding, stored), leaves (a subtraction) and is
 * summed from scratch (norm, rounding), measured in kdbench-like runs (docs/policies.md). */
#define COST_JOIN 1.25
#define COST_LEAVE 0.25

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
        a->m = grow(a->m, (size_t)(cap + 1) * sizeof *a->m, &ok);
        a->next = grow(a->next, (size_t)(cap + 1) * sizeof *a->m, &ok);
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

/* The survivors when the first ns candidates are members in order (sim and the in-model run only
 * evict): one pass over the members without branches on the data, the leavers' rows into idx (L of
 * them). False when they are not (then merge's general pass). */
static bool survivors(anchor_state *a, const int64_t *pos, int64_t ns, int64_t *L)
{
    int64_t j = 0, l = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const anchor_member m = a->m[i];
        const bool keep = j < ns && m.pos == pos[j < ns ? j : 0];
        a->next[j] = m, a->idx[l] = m.row; /* next[ns] and idx[n_members] are spare slots */
        j += keep, l += !keep;
    }
    *L = l;
    return j == ns;
}

/* One merge of the members with the candidates (positions ascending): survivors keep their rows;
 * the members that are not candidates leave (their k̂ off the sum, rows freed); the others join
 * (their norms and k̂ in one pass). idx: the leavers' rows, then the joiners' rows; from cap the
 * joiners' indices. fresh: the candidates after the last step's (all joiners). */
static void merge(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, int64_t fresh, double *norms)
{
    int64_t L = 0, J = 0, i = 0, *jn = a->idx + a->cap;
    if (survivors(a, pos, n - fresh, &L)) {
        for (int64_t j = 0; j < n - fresh; j++) norms[j] = a->next[j].norm;
        for (int64_t j = n - fresh; j < n; j++) a->next[j].pos = pos[j], jn[J++] = j;
    } else {
        for (int64_t j = L = 0; j < n; j++) {
            for (; i < a->n && a->m[i].pos < pos[j]; i++) a->idx[L++] = a->m[i].row;
            if (i < a->n && a->m[i].pos == pos[j]) a->next[j] = a->m[i++], norms[j] = a->next[j].norm;
            else a->next[j].pos = pos[j], jn[J++] = j;
        }
        for (; i < a->n; i++) a->idx[L++] = a->m[i].row;
    }
    anchor_leave(a->unit, a->idx, L, a->D, a->sum);
    for (int64_t r = 0; r < L; r++) a->free_rows[a->n_free++] = a->idx[r];
    for (int64_t r = 0; r < J; r++) a->idx[r] = a->next[jn[r]].row = a->free_rows[--a->n_free];
    anchor_join(rows, jn, J, a->D, norms, a->unit, a->idx, a->sum, a->inv);
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
        anchor_join(rows, NULL, n, D, norms, NULL, NULL, a->sum, a->inv);
        a->scratch++;
        return KV_OK;
    }
    if (!ascending(pos, n)) empty(a); /* no engine makes them: rebuilt, the same doubles */
    merge(a, rows, pos, n, fresh, norms);
    return KV_OK;
}

