#include "spearman.h"

#include <math.h>

static double row_norm(const float *k, int64_t D)
{
    double ss = 0.0;
    for (int64_t d = 0; d < D; d++) ss += (double)k[d] * k[d];
    return sqrt(ss);
}

/* Σ_{m≠j} k̂_j·k̂_m = k̂_j·S − k̂_j·k̂_j with S = Σ_m k̂_m: two passes over the
 * keys, O(T·D), all in double. The computed self-term is subtracted, not an
 * assumed 1 (a zero key has k̂ = 0: its x is 0 and it adds nothing to S). */
void spearman_x_pairwise(const float *keys, int64_t T, int64_t D, double *sum, double *x)
{
    for (int64_t d = 0; d < D; d++) sum[d] = 0.0;
    for (int64_t j = 0; j < T; j++) { /* x[j] holds 1/‖k_j‖ until the second pass */
        const float *k = keys + j * D;
        const double n = row_norm(k, D);
        const double inv = n > 0 ? 1.0 / n : 0.0;
        x[j] = inv;
        for (int64_t d = 0; d < D; d++) sum[d] += (double)k[d] * inv;
    }
    for (int64_t j = 0; j < T; j++) {
        const float *k = keys + j * D;
        const double inv = x[j];
        double dot = 0.0, self = 0.0;
        for (int64_t d = 0; d < D; d++) {
            const double e = (double)k[d] * inv;
            dot += e * sum[d], self += e * e;
        }
        x[j] = T > 1 ? -(dot - self) / (double)(T - 1) : 0.0;
    }
}

void spearman_x_anchor(const float *keys, int64_t T, int64_t D, bool normalised, double *mu, double *x)
{
    for (int64_t d = 0; d < D; d++) mu[d] = 0.0;
    for (int64_t j = 0; j < T; j++) {
        const float *k = keys + j * D;
        const double n = normalised ? row_norm(k, D) : 1.0;
        const double w = n > 0 ? 1.0 / n : 0.0;
        for (int64_t d = 0; d < D; d++) mu[d] += k[d] * w;
    }
    for (int64_t d = 0; d < D; d++) mu[d] /= (double)T;
    double mn = 0.0;
    for (int64_t d = 0; d < D; d++) mn += mu[d] * mu[d];
    mn = sqrt(mn);
    for (int64_t j = 0; j < T; j++) {
        const float *k = keys + j * D;
        const double kn = row_norm(k, D);
        double dot = 0.0;
        for (int64_t d = 0; d < D; d++) dot += k[d] * mu[d];
        x[j] = kn > 0 && mn > 0 ? -dot / (kn * mn) : 0.0;
    }
}

void spearman_y(const float *colsum, int64_t T, double *y)
{
    for (int64_t j = 0; j < T; j++) y[j] = (double)colsum[j] / (double)(T - j);
}

/* Heap sort of idx [n] by v[idx] ascending (ties in any order: they share a rank). */
static void sift_down(const double *v, int64_t *idx, int64_t root, int64_t n)
{
    for (;;) {
        int64_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && v[idx[c + 1]] > v[idx[c]]) c++;
        if (!(v[idx[c]] > v[idx[root]])) return;
        int64_t t = idx[c];
        idx[c] = idx[root], idx[root] = t;
        root = c;
    }
}

static void sort_indices(const double *v, int64_t n, int64_t *idx)
{
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(v, idx, i, n);
    for (int64_t end = n - 1; end > 0; end--) {
        int64_t t = idx[0];
        idx[0] = idx[end], idx[end] = t;
        sift_down(v, idx, 0, end);
    }
}

void spearman_ranks(const double *v, int64_t n, double *rank, int64_t *idx)
{
    sort_indices(v, n, idx);
    for (int64_t a = 0; a < n;) {
        int64_t b = a + 1;
        while (b < n && v[idx[b]] == v[idx[a]]) b++;
        const double r = 0.5 * (double)(a + 1 + b); /* mean of the 1-based ranks a+1 .. b */
        for (int64_t i = a; i < b; i++) rank[idx[i]] = r;
        a = b;
    }
}

/* Pearson correlation of a [n] and b [n] in double; NaN if either is constant. */
static double spearman_pearson(const double *a, const double *b, int64_t n)
{
    if (n < 2) return NAN;
    double ma = 0.0, mb = 0.0;
    for (int64_t i = 0; i < n; i++) ma += a[i], mb += b[i];
    ma /= (double)n, mb /= (double)n;
    double sab = 0.0, saa = 0.0, sbb = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double da = a[i] - ma, db = b[i] - mb;
        sab += da * db, saa += da * da, sbb += db * db;
    }
    if (!(saa > 0) || !(sbb > 0)) return NAN;
    double r = sab / sqrt(saa * sbb);
    return r > 1.0 ? 1.0 : r < -1.0 ? -1.0 : r;
}

double spearman_rho(const double *x, const double *y, int64_t n, double *scratch, int64_t *idx)
{
    double *rx = scratch, *ry = scratch + n;
    spearman_ranks(x, n, rx, idx);
    spearman_ranks(y, n, ry, idx);
    return spearman_pearson(rx, ry, n);
}
