#include "logdet.h"

#include <lapacke.h>
#include <math.h>
#include <string.h>

double logdet_keys(const float *keys, int64_t n, int64_t D, double *m)
{
    memset(m, 0, sizeof(double) * (size_t)(D * D));
    for (int64_t i = 0; i < n; i++) {
        const float *k = keys + i * D;
        double ss = 0.0;
        for (int64_t d = 0; d < D; d++) ss += (double)k[d] * k[d];
        double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
        /* lower triangle of the Gram matrix of the normalised row */
        for (int64_t a = 0; a < D; a++) {
            double ka = k[a] * inv;
            for (int64_t b = 0; b <= a; b++) m[a * D + b] += ka * (double)k[b] * inv;
        }
    }
    for (int64_t a = 0; a < D; a++) {
        for (int64_t b = 0; b <= a; b++) m[a * D + b] /= (double)n;
        m[a * D + a] += 1e-6;
    }
    if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)D, m, (lapack_int)D) != 0) return NAN;
    double ld = 0.0;
    for (int64_t a = 0; a < D; a++) ld += 2.0 * log(m[a * D + a]);
    return ld;
}
