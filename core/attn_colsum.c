#include "attn_colsum.h"

#include <cblas.h>
#include <math.h>

#include "softmax.h"

void attn_colsum_add_rows(const float *q, int64_t i0, int64_t n, const float *k, int64_t D,
                          float scale, double *colsum, float *scratch)
{
    const int64_t cols = i0 + n;
    /* scratch[r][j] = scale * q[r] . k[j], j < cols */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)cols, (int)D, scale, q,
                (int)D, k, (int)D, 0.0f, scratch, (int)cols);
    for (int64_t r = 0; r < n; r++) {
        float *s = scratch + r * cols;
        const int64_t len = i0 + r + 1; /* causal: keys 0 .. i0+r */
        double inv = 1.0 / softmax_row_exp(s, len, softmax_row_max(s, len));
        softmax_accumulate(colsum, s, inv, len);
    }
}

int64_t attn_colsum_scratch_floats(int64_t T)
{
    return (int64_t)ATTN_COLSUM_BLOCK * T;
}

void attn_colsum_row_range(const float *q, const float *k, int64_t r0, int64_t r1, int64_t D,
                           float scale, double *colsum, float *scratch)
{
    for (int64_t i0 = r0; i0 < r1; i0 += ATTN_COLSUM_BLOCK) {
        int64_t n = r1 - i0 < ATTN_COLSUM_BLOCK ? r1 - i0 : ATTN_COLSUM_BLOCK;
        attn_colsum_add_rows(q + i0 * D, i0, n, k, D, scale, colsum, scratch);
    }
}

void attn_colsum_head(const float *q, const float *k, int64_t T, int64_t D, float scale,
                      double *colsum, float *scratch)
{
    for (int64_t j = 0; j < T; j++) colsum[j] = 0.0;
    attn_colsum_row_range(q, k, 0, T, D, scale, colsum, scratch);
}

void attn_colsum_partition(int64_t T, int P, int64_t *bounds)
{
    /* rows [0, r) cost about r^2 / 2: cut where that reaches p / P of the total */
    bounds[0] = 0;
    for (int p = 1; p < P; p++) {
        int64_t r = (int64_t)((double)T * sqrt((double)p / (double)P));
        r = r / ATTN_COLSUM_BLOCK * ATTN_COLSUM_BLOCK; /* whole blocks */
        bounds[p] = r < bounds[p - 1] ? bounds[p - 1] : r > T ? T : r;
    }
    bounds[P] = T;
}
