/* vecmath: shared double-precision vector helpers for the policies. */
#include "core/vecmath.h"

#include <math.h>
#include <stdlib.h>

#include "core/kv_error.h"
#include "core/vectorize.h"

#if defined(__x86_64__) && defined(__GNUC__) /* GCC and Clang */
#include <immintrin.h>
/* Four rows' dot products at once (x[r]·y[r], y rows of YT) with VM_DOT16's arithmetic, so the same
 * doubles, in AVX-512 (chosen at run time): the rows' chains interleave and each 8 floats widen in
 * one instruction (the generic vectors' widening takes four in GCC 12). */
#define VM_LOAD_double(P) _mm512_loadu_pd(P)
#define VM_LOAD_float(P) _mm512_cvtps_pd(_mm256_loadu_ps(P))
#define VM_DOTS4_512(NAME, YT)                                                                      \
    __attribute__((target("avx512f"))) static void NAME(const float *const *x, const YT *const *y, \
                                                        int64_t D, double *out)                    \
    {                                                                                               \
        __m512d lo[4], hi[4];                                                                       \
        for (int r = 0; r < 4; r++) lo[r] = hi[r] = _mm512_setzero_pd();                            \
        int64_t d = 0;                                                                              \
        for (; d + VM_LANES <= D; d += VM_LANES)                                                    \
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                                   \
                lo[r] = _mm512_add_pd(lo[r], _mm512_mul_pd(VM_LOAD_float(x[r] + d), VM_LOAD_##YT(y[r] + d))); \
                hi[r] = _mm512_add_pd(hi[r], _mm512_mul_pd(VM_LOAD_float(x[r] + d + 8), VM_LOAD_##YT(y[r] + d + 8))); \
            }                                                                                       \
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) { /* vm_lanes_sum's halving order */   \
            const __m512d s = _mm512_add_pd(lo[r], hi[r]);                                          \
            const __m256d t = _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1)); \
            const __m128d u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));   \
            out[r] = _mm_cvtsd_f64(_mm_add_sd(u, _mm_unpackhi_pd(u, u)));                           \
            for (int64_t e = d; e < D; e++) out[r] += (double)x[r][e] * y[r][e];                    \
        }                                                                                           \
    }
VM_DOTS4_512(dots4_fd, double)
VM_DOTS4_512(dots4_ff, float)
#define VM_HAVE_512() __builtin_cpu_supports("avx512f")
#else
#define VM_HAVE_512() 0
#define dots4_fd(x, y, D, out) ((void)(x), (void)(y))
#define dots4_ff(x, y, D, out) ((void)(x), (void)(y))
#endif

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

/* The single-row forms share the batch passes' reductions. */
double vm_dot(const float *x, const double *y, int64_t D) { return vm_dot16_fd(x, y, D); }
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
    const double *yy[4] = {y, y, y, y};
    int64_t j = 0;
    for (; VM_HAVE_512() && j + 4 <= n; j += 4) {
        const float *x[4] = {rows + j * D, rows + (j + 1) * D, rows + (j + 2) * D, rows + (j + 3) * D};
        dots4_fd(x, yy, D, out + j);
    }
    for (; j < n; j++) out[j] = vm_dot16_fd(rows + j * D, y, D);
}

KV_VECTOR_CLONES
void vm_norms_of(const float *rows, const int64_t *idx, int64_t cnt, int64_t D, double *norms)
{
    int64_t i = 0;
    for (; VM_HAVE_512() && i + 4 <= cnt; i += 4) {
        const float *x[4];
        double nn[4];
        for (int r = 0; r < 4; r++) x[r] = rows + (idx ? idx[i + r] : i + r) * D;
        dots4_ff(x, x, D, nn);
        for (int r = 0; r < 4; r++) norms[idx ? idx[i + r] : i + r] = sqrt(nn[r]);
    }
    for (; i < cnt; i++) norms[idx ? idx[i] : i] = vm_norm(rows + (idx ? idx[i] : i) * D, D);
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
