#include "attn_causal.h"

#include <cblas.h>
#include <math.h>

#include "softmax.h"

void attn_causal_group_rows(const float *q, int64_t groups, const float *k, const float *v, int64_t pos0,
                            int64_t n, int64_t D, float *p, float *out, double *lse)
{
    const int64_t cols = pos0 + n, rows = groups * n;
    const float scale = (float)(1.0 / sqrt((double)D));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)D, scale, q, (int)D, k, (int)D,
                0.0f, p, (int)cols);
    for (int64_t r = 0; r < rows; r++) {
        double l = softmax_row(p + r * cols, pos0 + r % n + 1, cols); /* causal: keys 0 .. its position */
        if (lse) lse[r] = l;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)D, (int)cols, 1.0f, p, (int)cols, v,
                (int)D, 0.0f, out, (int)D);
}

void attn_causal_rows(const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0, int64_t n,
                      int64_t D, float *p, float *out, int64_t ldo, double *lse)
{
    const int64_t cols = pos0 + n;
    const float scale = (float)(1.0 / sqrt((double)D));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)cols, (int)D, scale, q, (int)ldq, k, (int)D,
                0.0f, p, (int)cols);
    for (int64_t r = 0; r < n; r++) {
        double l = softmax_row(p + r * cols, pos0 + r + 1, cols); /* causal: keys 0 .. pos0+r */
        if (lse) lse[r] = l;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)D, (int)cols, 1.0f, p, (int)cols, v, (int)D,
                0.0f, out, (int)ldo);
}
