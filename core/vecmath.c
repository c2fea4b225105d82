/* vecmath: shared double-precision vector helpers for the policies. */
#include "core/vecmath.h"

#include <math.h>
#include <stdlib.h>

#include "core/kv_error.h"
#include "core/vectorize.h"

double vm_norm_d(const double *y, int64_t D)
{
    double s = 0;
    for (int64_t d = 0; d < D; d++) s += y[d] * y[d];
    return sqrt(s);
}

double vm_cos(double dot, double nx, double ny)
{
    if (nx == 0 || ny == 0) return 0;
    double c = dot / (nx * ny);
    return c > 1 ? 1 : c < -1 ? -1 : c;
}

VM_DOT16(dot16, double)

/* The single-row forms share the batch passes' reductions. */
double vm_dot(const float *x, const double *y, int64_t D) { return dot16(x, y, D); }
double vm_dot_ff(const float *x, const float *y, int64_t D) { return vm_dot16_ff(x, y, D); }
double vm_norm(const float *x, int64_t D) { return sqrt(vm_dot16_ff(x, x, D)); }

/* Column blocks of VM_LANES doubles: each block's sums stay in registers over all
 * rows (no store-to-load chain through mean[] from one row to the next); the
 * weights are divided out first, in their own loop. */
KV_VECTOR_CLONES
void vm_weighted_mean(const float *rows, int64_t n, int64_t D, const double *norms, double *mean, double *w)
{
    for (int64_t j = 0; j < n; j++) w[j] = !norms ? 1.0 : norms[j] > 0 ? 1.0 / norms[j] : 0.0;
    int64_t d0 = 0;
    for (; d0 + VM_LANES <= D; d0 += VM_LANES) {
        double a[VM_LANES] = {0};
        for (int64_t j = 0; j < n; j++)
            for (int l = 0; l < VM_LANES; l++) a[l] += w[j] * rows[j * D + d0 + l];
        for (int l = 0; l < VM_LANES; l++) mean[d0 + l] = a[l];
    }
    for (int64_t d = d0; d < D; d++) {
        double a = 0;
        for (int64_t j = 0; j < n; j++) a += w[j] * rows[j * D + d];
        mean[d] = a;
    }
    if (n > 0)
        for (int64_t d = 0; d < D; d++) mean[d] /= (double)n;
}

KV_VECTOR_CLONES
void vm_dots(const float *rows, int64_t n, int64_t D, const double *y, double *out)
{
    for (int64_t j = 0; j < n; j++) out[j] = dot16(rows + j * D, y, D);
}

void vm_norm_cache_free(vm_norm_cache *c)
{
    if (c) free(c->pos), free(c->norm);
}

/* At least 2n slots (a power of two), emptied when it grows. On failure
 * the table keeps its old slots (realloc leaves what it could not grow). */
static int norm_cache_fit(vm_norm_cache *c, int64_t n, kv_err *err)
{
    if (2 * n <= c->cap) return KV_OK;
    int64_t cap = c->cap ? c->cap : 64;
    while (cap < 2 * n) cap *= 2;
    int64_t *pos = realloc(c->pos, sizeof(int64_t) * (size_t)cap);
    if (pos) c->pos = pos;
    double *norm = pos ? realloc(c->norm, sizeof(double) * (size_t)cap) : NULL;
    if (!norm)
        return kv_fail(err, KV_EFAIL, "key norm cache: out of memory for %lld candidates", (long long)n);
    for (int64_t i = 0; i < cap; i++) pos[i] = -1;
    c->norm = norm, c->cap = cap;
    return KV_OK;
}

KV_VECTOR_CLONES
int vm_norms_cached(vm_norm_cache *c, const float *rows, const int64_t *pos, int64_t n, int64_t D,
                    double *norms, kv_err *err)
{
    if (!c) {
        for (int64_t j = 0; j < n; j++) norms[j] = vm_norm(rows + j * D, D);
        return KV_OK;
    }
    int rc = norm_cache_fit(c, n, err);
    if (rc) return rc;
    const int64_t mask = c->cap - 1;
    for (int64_t j = 0; j < n; j++) {
        const int64_t slot = pos[j] & mask;
        if (c->pos[slot] != pos[j]) c->pos[slot] = pos[j], c->norm[slot] = vm_norm(rows + j * D, D);
        norms[j] = c->norm[slot];
    }
    return KV_OK;
}

KV_VECTOR_CLONES
void vm_cos_scores(double *dots, const double *norms, double ny, int64_t n)
{
    for (int64_t j = 0; j < n; j++) dots[j] = -vm_cos(dots[j], norms[j], ny);
}
