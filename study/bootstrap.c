/* bootstrap: the mean over traces and its 95% percentile bootstrap
 * interval (docs/study.md). */
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "study/study.h"

int32_t *study_resamples(int n, kv_err *err)
{
    int32_t *idx = kv_calloc((size_t)STUDY_BOOT_RESAMPLES * (size_t)(n > 0 ? n : 1), sizeof *idx, "bootstrap", err);
    if (!idx) return NULL;
    kv_rng r;
    rng_init(&r, STUDY_BOOT_SEED, (uint64_t)n, 0, 0);
    for (size_t i = 0; i < (size_t)STUDY_BOOT_RESAMPLES * (size_t)n; i++) idx[i] = (int32_t)rng_below(&r, (uint64_t)n);
    return idx;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted x[0..n), linear interpolation (numpy's default). */
static double quantile(const double *x, int n, double q)
{
    const double pos = q * (double)(n - 1);
    const int lo = (int)floor(pos);
    const double frac = pos - lo;
    return lo + 1 < n ? x[lo] + frac * (x[lo + 1] - x[lo]) : x[lo];
}

void study_mean_ci_measured(double *x, int n, const int32_t *idx, double *mean, double *lo, double *hi)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i])) x[m++] = x[i];
    if (m == n) {
        study_mean_ci(x, m, idx, mean, lo, hi);
        return;
    }
    kv_err ignore = {0};
    int32_t *own = m ? study_resamples(m, &ignore) : NULL;
    if (own) study_mean_ci(x, m, own, mean, lo, hi);
    else *mean = *lo = *hi = NAN;
    free(own);
}

void study_mean_ci(const double *x, int n, const int32_t *idx, double *mean, double *lo, double *hi)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    *lo = *hi = *mean;
    if (isnan(*mean) || n < 2) return;
    double *means = malloc(sizeof *means * STUDY_BOOT_RESAMPLES);
    if (!means) { /* no interval without memory: say so with NaN rather than fail the run */
        *lo = *hi = NAN;
        return;
    }
    for (int b = 0; b < STUDY_BOOT_RESAMPLES; b++) {
        double m = 0.0;
        for (int i = 0; i < n; i++) m += x[idx[(size_t)b * (size_t)n + (size_t)i]];
        means[b] = m / n;
    }
    qsort(means, STUDY_BOOT_RESAMPLES, sizeof *means, cmp_double);
    *lo = quantile(means, STUDY_BOOT_RESAMPLES, (1 - STUDY_BOOT_LEVEL) / 2);
    *hi = quantile(means, STUDY_BOOT_RESAMPLES, (1 + STUDY_BOOT_LEVEL) / 2);
    free(means);
}
