/* vecmath: shared double-precision vector helpers for the policies. */
#include "policies/vecmath.h"

#include <math.h>
#include <stdlib.h>

#include "core/kv_error.h"

double *vm_alloc(int64_t n)
{
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    KV_ASSERT(p != NULL);
    return p;
}

/* Reductions in double keep four partial sums (combined in a fixed order):
 * a single running sum is bound by the latency of each addition. */
double vm_norm(const float *x, int64_t D)
{
    return sqrt(vm_dot_ff(x, x, D));
}

double vm_norm_d(const double *y, int64_t D)
{
    double s = 0;
    for (int64_t d = 0; d < D; d++) s += y[d] * y[d];
    return sqrt(s);
}

double vm_dot(const float *x, const double *y, int64_t D)
{
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t d = 0;
    for (; d + 4 <= D; d += 4) {
        a0 += (double)x[d] * y[d];
        a1 += (double)x[d + 1] * y[d + 1];
        a2 += (double)x[d + 2] * y[d + 2];
        a3 += (double)x[d + 3] * y[d + 3];
    }
    double s = (a0 + a1) + (a2 + a3);
    for (; d < D; d++) s += (double)x[d] * y[d];
    return s;
}

double vm_dot_ff(const float *x, const float *y, int64_t D)
{
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t d = 0;
    for (; d + 4 <= D; d += 4) {
        a0 += (double)x[d] * y[d];
        a1 += (double)x[d + 1] * y[d + 1];
        a2 += (double)x[d + 2] * y[d + 2];
        a3 += (double)x[d + 3] * y[d + 3];
    }
    double s = (a0 + a1) + (a2 + a3);
    for (; d < D; d++) s += (double)x[d] * y[d];
    return s;
}
void vm_mean(const float *rows, int64_t n, int64_t D, bool normalize, double *mean)
{
    for (int64_t d = 0; d < D; d++) mean[d] = 0;
    for (int64_t j = 0; j < n; j++) {
        const float *x = rows + j * D;
        double w = 1;
        if (normalize) {
            double nx = vm_norm(x, D);
            if (nx == 0) continue;
            w = 1 / nx;
        }
        for (int64_t d = 0; d < D; d++) mean[d] += w * x[d];
    }
    if (n > 0)
        for (int64_t d = 0; d < D; d++) mean[d] /= (double)n;
}

double vm_cos(double dot, double nx, double ny)
{
    if (nx == 0 || ny == 0) return 0;
    double c = dot / (nx * ny);
    return c > 1 ? 1 : c < -1 ? -1 : c;
}
