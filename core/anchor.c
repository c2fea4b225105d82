/* anchor: keydiff's exact anchor sum (from scratch, and the joins and leaves of a step) and its cosine
 * scores. */
#include "core/anchor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/vecmath.h"
#include "core/vectorize.h"

#if defined(__x86_64__) && defined(__GNUC__) /* GCC and Clang */
#include <immintrin.h>
/* unit_rows for D a multiple of 16 in AVX-512 (chosen at run time; the same doubles: the sums are
 * exact): 32 columns of the sum in registers over the rows, each 8 floats widened in one step. */
__attribute__((target("avx512f"))) static void rows_512(const float *rows, const int64_t *idx, int64_t cnt,
                                                        int64_t D, const double *inv, double *unit,
                                                        const int64_t *urow, double *sum)
{
    const __m512d c = _mm512_set1_pd(98304.0);
    for (int64_t d0 = 0; d0 < D; d0 += 32) {
        const int nb = D - d0 >= 32 ? 4 : 2;
        __m512d a[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
        for (int64_t i = 0; i < cnt; i++) {
            const float *k = rows ? rows + (idx ? idx[i] : i) * D + d0 : NULL;
            double *u = unit ? unit + urow[i] * D + d0 : NULL;
            const __m512d iv = _mm512_set1_pd(k ? inv[i] : 0.0);
            _Pragma("GCC unroll 4") for (int b = 0; b < 4; b++) {
                if (b >= nb) break;
                __m512d v = k ? _mm512_cvtps_pd(_mm256_loadu_ps(k + 8 * b)) : _mm512_loadu_pd(u + 8 * b);
                if (k) v = _mm512_sub_pd(_mm512_add_pd(_mm512_mul_pd(v, iv), c), c); /* ROUND_FRAC */
                if (k && u) _mm512_storeu_pd(u + 8 * b, v);
                a[b] = _mm512_add_pd(a[b], v);
            }
        }
        for (int b = 0; b < nb; b++) {
            const __m512d s = _mm512_loadu_pd(sum + d0 + 8 * b);
            _mm512_storeu_pd(sum + d0 + 8 * b, rows ? _mm512_add_pd(s, a[b]) : _mm512_sub_pd(s, a[b]));
        }
    }
}
#define HAVE_512(D) ((D) % 16 == 0 && __builtin_cpu_supports("avx512f"))
#else
#define HAVE_512(D) 0
#define rows_512(rows, idx, cnt, D, inv, unit, urow, sum) (void)0
#endif

/* x (|x| ≤ 1) to a multiple of 2^-36, ties to even (+1.5·2^16 keeps 36 fraction bits; no FMA). */
#define ROUND_FRAC(x) (((x) + 98304.0) - 98304.0)

/* The norms of rows idx[0..cnt) (all when NULL) into norms[idx[i]], their inverses (0 for a zero
 * row) into inv[i]. */
static void unit_norms(const float *rows, const int64_t *idx, int64_t cnt, int64_t D, double *norms, double *inv)
{
    vm_norms_of(rows, idx, cnt, D, norms);
    for (int64_t i = 0; i < cnt; i++) inv[i] = norms[idx ? idx[i] : i] > 0 ? 1.0 / norms[idx ? idx[i] : i] : 0.0;
}

/* Rows idx[0..cnt) (all when NULL; inv[i] = 1/‖k‖): their rounded k̂ added to sum and, with unit,
 * kept at rows urow[i]; or, with rows NULL, the kept rows urow[i] taken off the sum (exactly what
 * joined). Columns in chunks of 4 vectors of 8 doubles held in registers over the rows; the sums
 * are exact, so in any order. */
KV_VECTOR_CLONES
static void unit_rows(const float *rows, const int64_t *idx, int64_t cnt, int64_t D, const double *inv,
                      double *unit, const int64_t *urow, double *sum)
{
    int64_t d0 = 0;
#if defined(__GNUC__)
    for (const int64_t full = D / 8 * 8; d0 < full; d0 += 32) {
        const int nb = full - d0 < 32 ? (int)(full - d0) / 8 : 4;
        vm_double8 a[4] = {{0}}, v;
        for (int64_t i = 0; i < cnt; i++) {
            const float *k = rows ? rows + (idx ? idx[i] : i) * D + d0 : NULL;
            double *u = unit ? unit + urow[i] * D + d0 : NULL;
            _Pragma("GCC unroll 4") for (int b = 0; b < 4; b++) {
                if (b >= nb) break;
                if (!k) memcpy(&v, u + 8 * b, sizeof v);
                else v = (VM_CVT8(k + 8 * b) * inv[i] + 98304.0) - 98304.0;
                if (k && u) memcpy(u + 8 * b, &v, sizeof v);
                a[b] += v;
            }
        }
        for (int b = 0; b < nb; b++)
            for (int l = 0; l < 8; l++) sum[d0 + 8 * b + l] += rows ? a[b][l] : -a[b][l];
    }
    d0 = D / 8 * 8;
#endif
    for (int64_t i = 0; d0 < D && i < cnt; i++) /* the columns left, row by row */
        for (int64_t d = d0; d < D; d++) {
            double *u = unit ? unit + urow[i] * D + d : NULL;
            const double v = rows ? ROUND_FRAC((double)rows[(idx ? idx[i] : i) * D + d] * inv[i]) : *u;
            sum[d] += rows ? v : -v;
            if (rows && u) *u = v;
        }
}

void anchor_sum(const float *rows, int64_t n, int64_t D, const double *norms, double *inv, double *sum)
{
    for (int64_t j = 0; j < n; j++) inv[j] = norms[j] > 0 ? 1.0 / norms[j] : 0.0;
    memset(sum, 0, sizeof(double) * (size_t)D);
    unit_rows(rows, NULL, n, D, inv, NULL, NULL, sum);
}

void anchor_join(const float *rows, const int64_t *idx, int64_t cnt, int64_t D, double *norms, double *unit,
                 const int64_t *urow, double *sum, double *inv)
{
    unit_norms(rows, idx, cnt, D, norms, inv);
    if (HAVE_512(D)) rows_512(rows, idx, cnt, D, inv, unit, urow, sum);
    else unit_rows(rows, idx, cnt, D, inv, unit, urow, sum);
}

void anchor_leave(const double *unit, const int64_t *urow, int64_t cnt, int64_t D, double *sum)
{
    if (HAVE_512(D)) rows_512(NULL, NULL, cnt, D, NULL, (double *)unit, urow, sum);
    else unit_rows(NULL, NULL, cnt, D, NULL, (double *)unit, urow, sum);
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
