/* Helpers of the GPU validation programs (tests/gpu/): TAP output, device
 * buffers, and the comparison every kernel test uses: |gpu - ref| <= abs +
 * rel·|ref| elementwise, on a reference asserted to be non-degenerate (not
 * constant, not all zero), printing the first pairs and the largest error. */
#ifndef KV_GPU_CHECK_H
#define KV_GPU_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda_lib.h"
#include "core/rng.h"

typedef struct {
    cuda_lib b;
    int n, failed;
} gpu_t;

static inline void gpu_result(gpu_t *g, int ok, const char *name)
{
    g->n++;
    if (!ok) g->failed++;
    printf("%sok %d - %s\n", ok ? "" : "not ", g->n, name);
    fflush(stdout);
}

/* A device copy of host floats (NULL and a failed test on error). */
static inline void *gpu_upload(gpu_t *g, const void *h, size_t bytes)
{
    void *d = NULL;
    kv_err err = {0};
    if (g->b.api->alloc(g->b.ctx, &d, bytes, "test buffer", &err) ||
        (h && g->b.api->upload(g->b.ctx, d, h, bytes, &err))) {
        printf("# %s\n", err.msg);
        return NULL;
    }
    return d;
}

static inline int gpu_download(gpu_t *g, void *h, const void *d, size_t bytes)
{
    kv_err err = {0};
    int rc = g->b.api->download(g->b.ctx, h, d, bytes, &err);
    if (rc) printf("# %s\n", err.msg);
    return rc;
}

static inline void gpu_free(gpu_t *g, void *d)
{
    g->b.api->release(g->b.ctx, d);
}

/* Compares n values; returns 1 when within abs + rel·|ref| everywhere. */
static inline int gpu_compare(const char *what, const double *ref, const double *got, size_t n, double abs_tol,
                              double rel_tol)
{
    double lo = INFINITY, hi = -INFINITY, worst = 0.0, worst_excess = -INFINITY;
    size_t bad = 0, worst_i = 0;
    for (size_t i = 0; i < n; i++) {
        lo = fmin(lo, ref[i]), hi = fmax(hi, ref[i]);
        double d = fabs(got[i] - ref[i]), excess = d - (abs_tol + rel_tol * fabs(ref[i]));
        if (!(excess <= 0.0)) bad++;
        if (d > worst || isnan(d)) worst = d, worst_i = i;
        if (excess > worst_excess) worst_excess = excess;
    }
    printf("# %s: %zu values, ref in [%.4g, %.4g], max |diff| %.3g at %zu, tolerance %.1g + %.1g|ref|\n", what, n, lo,
           hi, worst, worst_i, abs_tol, rel_tol);
    for (size_t i = 0; i < n && i < 3; i++) printf("#   [%zu] ref %.9g gpu %.9g\n", i, ref[i], got[i]);
    if (!(hi - lo > 1e-3)) {
        printf("#   degenerate reference (constant): the test proves nothing\n");
        return 0;
    }
    if (bad) printf("#   %zu values outside the tolerance\n", bad);
    return bad == 0;
}

static inline int gpu_compare_f(const char *what, const float *ref, const float *got, size_t n, double abs_tol,
                                double rel_tol)
{
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    if (!a || !b) return free(a), free(b), 0;
    for (size_t i = 0; i < n; i++) a[i] = ref[i], b[i] = got[i];
    int ok = gpu_compare(what, a, b, n, abs_tol, rel_tol);
    free(a), free(b);
    return ok;
}

/* For the record only: the largest gap between two arrays, absolute and relative to max |ref|. */
static inline void gpu_gap(const char *what, const float *ref, const float *got, size_t n)
{
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)got[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    printf("# %s: max |diff| %.3g = %.3g of max |ref|\n", what, worst, scale > 0 ? worst / scale : 0.0);
}

static inline float *rand_floats(kv_rng *r, size_t n, double scale, double offset)
{
    float *x = malloc(n * sizeof *x);
    if (!x) abort();
    for (size_t i = 0; i < n; i++) x[i] = (float)(offset + scale * rng_normal(r));
    return x;
}

#endif
