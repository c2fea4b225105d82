/* kl: per-position comparison of two next-token distributions (see kl.h). */
#include "fidelity/kl.h"

#include <math.h>
#include <stdlib.h>

#include "analysis/spearman.h"
#include "sim/stats.h"

int32_t fid_argmax(const float *logits, int64_t V)
{
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

/* log Σ exp(x_i) in double, shifted by the max. */
static double log_sum_exp(const float *x, int64_t V, double mx)
{
    double s = 0.0;
    for (int64_t i = 0; i < V; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

void fid_row_compare(const float *lp, const float *lq, int64_t V, int32_t next, fid_row *out)
{
    out->argmax_p = fid_argmax(lp, V), out->argmax_q = fid_argmax(lq, V);
    const double zp = log_sum_exp(lp, V, lp[out->argmax_p]), zq = log_sum_exp(lq, V, lq[out->argmax_q]);
    double kl = 0.0;
    for (int64_t i = 0; i < V; i++) {
        const double a = (double)lp[i] - zp, b = (double)lq[i] - zq; /* log p_i, log q_i */
        const double p = exp(a);
        if (p > 0) kl += p * (a - b);
    }
    out->kl = kl > 0 ? kl : 0.0; /* rounding can leave -1e-17 for equal rows */
    out->logp_p = next >= 0 ? (double)lp[next] - zp : 0.0;
    out->logp_q = next >= 0 ? (double)lq[next] - zq : 0.0;
}

double fid_p95(double *x, int64_t n)
{
    if (n <= 0) return 0.0;
    const double r = 0.95 * (double)(n - 1);
    const int64_t lo = (int64_t)floor(r);
    const double a = sim_select_kth(x, n, lo);
    if (lo + 1 >= n) return a;
    double b = x[lo + 1]; /* the smallest of x[lo+1..n) is the next order statistic */
    for (int64_t i = lo + 2; i < n; i++) b = x[i] < b ? x[i] : b;
    return a + (r - (double)lo) * (b - a);
}

double fid_spearman(const double *a, const double *b, int64_t n)
{
    if (n < 2) return NAN;
    double *scratch = malloc(sizeof(double) * (size_t)(2 * n));
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
    double rho = NAN;
    if (scratch && idx) rho = spearman_rho(a, b, n, scratch, idx);
    free(scratch), free(idx);
    return rho;
}
