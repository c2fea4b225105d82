#include "attn_causal.h"

#include <cblas.h>
#include <math.h>

#include "softmax.h"

/* The one block every entry point runs: rows r of q (stride ldq) at positions
 * pos0 + r % n, weights with stride ldp >= pos0 + n (zero from each row's
 * position + 1 to ldp), outputs with stride ldo. */
static void causal_rows(const float *q, int64_t ldq, int64_t groups, const float *k, const float *v, int64_t pos0,
                        int64_t n, int64_t D, float *p, int64_t ldp, float *out, int64_t ldo, double *lse, float *mx)
{
    const int64_t cols = pos0 + n, rows = groups * n;
    const float scale = (float)(1.0 / sqrt((double)D));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)D, scale, q, (int)ldq, k, (int)D,
                0.0f, p, (int)ldp);
    for (int64_t r = 0; r < rows; r++) {
        double l = softmax_row(p + r * ldp, pos0 + r % n + 1, ldp, mx ? mx + r : NULL); /* keys 0 .. its position */
        if (lse) lse[r] = l;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)D, (int)cols, 1.0f, p, (int)ldp, v,
                (int)D, 0.0f, out, (int)ldo);
}

void attn_causal_group_rows(const float *q, int64_t groups, const float *k, const float *v, int64_t pos0,
                            int64_t n, int64_t D, float *p, float *out, double *lse, float *mx)
{
    causal_rows(q, D, groups, k, v, pos0, n, D, p, pos0 + n, out, D, lse, mx);
}

void attn_causal_rows(const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0, int64_t n,
                      int64_t D, float *p, float *out, int64_t ldo, double *lse, float *mx)
{
    causal_rows(q, ldq, 1, k, v, pos0, n, D, p, pos0 + n, out, ldo, lse, mx);
}

void attn_causal_row_block(const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0, int64_t n,
                           int64_t r0, int64_t rows, int64_t D, float *p, float *out, int64_t ldo, double *lse,
                           float *mx)
{
    causal_rows(q + r0 * ldq, ldq, 1, k, v, pos0 + r0, rows, D, p + r0 * (pos0 + n), pos0 + n, out + r0 * ldo, ldo,
                lse ? lse + r0 : NULL, mx ? mx + r0 : NULL);
}
