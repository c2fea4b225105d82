#include "pca.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <string.h>

int64_t pca_scratch(int64_t T, int64_t D)
{
    return T * D + D * D + 2 * D + D;
}

void pca_fix_sign(double *v, int64_t D)
{
    int64_t best = 0;
    for (int64_t d = 1; d < D; d++)
        if (fabs(v[d]) > fabs(v[best])) best = d;
    if (v[best] < 0)
        for (int64_t d = 0; d < D; d++) v[d] = -v[d];
}

/* keys [T][D] → xc [T][D] centred, mean [D]. */
static void centre(const float *keys, int64_t T, int64_t D, double *xc, double *mean)
{
    memset(mean, 0, sizeof(double) * (size_t)D);
    for (int64_t j = 0; j < T; j++)
        for (int64_t d = 0; d < D; d++) mean[d] += keys[j * D + d];
    for (int64_t d = 0; d < D; d++) mean[d] /= (double)T;
    for (int64_t j = 0; j < T; j++)
        for (int64_t d = 0; d < D; d++) xc[j * D + d] = keys[j * D + d] - mean[d];
}

int pca_keys(const float *keys, int64_t T, int64_t D, double *scratch, pca_summary *out, double *pc,
             double *axes)
{
    double *xc = scratch;            /* [T][D] */
    double *cov = xc + T * D;        /* [D][D], upper triangle */
    double *z = cov + D * D;         /* [D][2] eigenvectors as columns, ascending */
    double *mean = z + 2 * D;        /* [D] */
    centre(keys, T, D, xc, mean);
    const double scale = 1.0 / (double)(T > 1 ? T - 1 : 1);
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)D, (int)T, scale, xc, (int)D, 0.0, cov, (int)D);
    out->var_total = 0.0;
    for (int64_t d = 0; d < D; d++) out->var_total += cov[d * D + d];

    const int64_t nc = D < 2 ? D : 2;
    lapack_int m = 0, isuppz[4];
    double w[2] = {0.0, 0.0};
    lapack_int info = LAPACKE_dsyevr(LAPACK_ROW_MAJOR, 'V', 'I', 'U', (lapack_int)D, cov, (lapack_int)D, 0.0, 0.0,
                                     (lapack_int)(D - nc + 1), (lapack_int)D, 0.0, &m, w, z, 2, isuppz);
    if (info != 0 || m != nc) return info != 0 ? (int)info : -1;
    /* ascending order from the solver: column nc-1 is the largest */
    out->var[0] = w[nc - 1], out->var[1] = nc == 2 ? w[0] : 0.0;
    for (int a = 0; a < 2; a++) {
        double *dst = axes ? axes + a * D : NULL;
        const int64_t col = a == 0 ? nc - 1 : 0;
        if (a >= nc) {
            for (int64_t j = 0; j < T; j++) pc[j * 2 + a] = 0.0;
            if (dst) memset(dst, 0, sizeof(double) * (size_t)D);
            continue;
        }
        /* the mean is no longer needed: its slot holds the axis being projected on */
        for (int64_t d = 0; d < D; d++) mean[d] = z[d * 2 + col];
        pca_fix_sign(mean, D);
        for (int64_t j = 0; j < T; j++) {
            double s = 0.0;
            for (int64_t d = 0; d < D; d++) s += xc[j * D + d] * mean[d];
            pc[j * 2 + a] = s;
        }
        if (dst) memcpy(dst, mean, sizeof(double) * (size_t)D);
    }
    return 0;
}
