/* vecmath: the double-precision vector pieces the key/value policies share
 * (policies/ and expr/). Inputs are the stored float rows; every sum is
 * accumulated in double (docs/sim.md#the-eviction-step-step-by-step). Shapes:
 * rows [n][D]. Nothing here allocates but the norm cache, which reports out of
 * memory in err. */
#ifndef KV_CORE_VECMATH_H
#define KV_CORE_VECMATH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"

/* x·y in double over VM_LANES lanes combined in a fixed order: four vector registers of doubles
 * (AVX2), so that the additions of a row of D = 64..128 are four short chains instead of one
 * long one. Inline, so that a cloned loop (vectorize.h) fuses it and gets vm_norm's values. */
enum { VM_LANES = 16 };

static inline double vm_lanes_sum(const double *a)
{
    double s[VM_LANES / 2];
    for (int l = 0; l < VM_LANES / 2; l++) s[l] = a[l] + a[l + VM_LANES / 2];
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* x·y for float x and y of type YT (float or double), as NAME. */
#define VM_DOT16(NAME, YT)                                                                          \
    static inline double NAME(const float *x, const YT *y, int64_t D)                              \
    {                                                                                               \
        double a[VM_LANES] = {0};                                                                   \
        int64_t d = 0;                                                                              \
        for (; d + VM_LANES <= D; d += VM_LANES)                                                    \
            for (int l = 0; l < VM_LANES; l++) a[l] += (double)x[d + l] * y[d + l];                \
        double s = vm_lanes_sum(a);                                                                 \
        for (; d < D; d++) s += (double)x[d] * y[d];                                                \
        return s;                                                                                   \
    }
VM_DOT16(vm_dot16_ff, float)
VM_DOT16(vm_dot16_fd, double)

/* Vectors of 8 doubles (GCC/Clang): a cloned loop (vectorize.h) written in them runs in registers of
 * the clone's width; VM_CVT8 widens the 8 floats at P. */
#if defined(__GNUC__)
typedef double vm_double8 __attribute__((vector_size(64)));
typedef float vm_float8u __attribute__((vector_size(32), aligned(4), may_alias));
#define VM_CVT8(P) __builtin_convertvector(*(const vm_float8u *)(P), vm_double8)
#endif

/* Every dot product and norm here sums in 16 double lanes combined in a
 * fixed order; the single-row and batch forms give the same values. */
double vm_norm(const float *x, int64_t D);
double vm_dot(const float *x, const double *y, int64_t D);
double vm_dot_ff(const float *x, const float *y, int64_t D);

/* Batch forms, vectorised. vm_norms_of: norms[idx[i]] (norms[i] when idx is NULL) = vm_norm of row
 * idx[i], i < cnt. vm_weighted_mean: mean[D] of the rows, each
 * divided by its norm (norms[j] = vm_norm of row j; zero rows count as zero)
 * or, with norms NULL, as they are; w: n doubles of the caller's scratch.
 * vm_dots: out[j] = x_j · y. */
void vm_weighted_mean(const float *rows, int64_t n, int64_t D, const double *norms, double *mean, double *w);
void vm_dots(const float *rows, int64_t n, int64_t D, const double *y, double *out);
void vm_norms_of(const float *rows, const int64_t *idx, int64_t cnt, int64_t D, double *norms);

/* dots[j] becomes −vm_cos(dots[j], norms[j], ny), for a whole row of candidates. */
void vm_cos_scores(double *dots, const double *norms, double ny, int64_t n);

/* Key norms by position, computed once per position while it stays a
 * candidate: a key is a candidate at every step it survives, its norm never
 * changes. A direct-mapped table of at least 2n slots (n the candidates), so
 * its size follows the cache, not the sequence (in-model eviction keeps
 * memory flat in T); a slot taken by another position is recomputed, which
 * gives the same value. A zeroed struct starts it empty; c NULL computes
 * every norm. */
typedef struct {
    int64_t *pos;   /* [cap] position held by each slot, -1: none */
    double *norm;   /* [cap] */
    int64_t cap;    /* a power of two */
} vm_norm_cache;

int vm_norms_cached(vm_norm_cache *c, const float *rows, const int64_t *pos, int64_t n, int64_t D,
                    double *norms, kv_err *err);
void vm_norm_cache_free(vm_norm_cache *c);

/* cos(x, y) from x·y and the norms; 0 when either norm is 0. */
double vm_cos(double dot, double nx, double ny);

double vm_norm_d(const double *y, int64_t D);

#endif
