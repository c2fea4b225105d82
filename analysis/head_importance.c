/* head_importance: the share of attention outside sinks + recent window and
 * the concentration of a kv head's query heads (head_importance.h). */
#include "analysis/head_importance.h"

#include <cblas.h>
#include <math.h>

int64_t head_importance_scratch(int64_t T)
{
    return (int64_t)HEAD_IMP_BLOCK * T;
}

/* Query i's scaled scores s [i+1] → (outside mass, max weight), in double. */
static void row_stats(const float *s, int64_t i, int64_t sinks, int64_t recent, double *outside, double *top)
{
    double mx = -INFINITY, sum = 0.0, out = 0.0;
    for (int64_t j = 0; j <= i; j++)
        if (s[j] > mx) mx = s[j];
    const int64_t last = i - recent;   /* O(i) = [sinks, i - recent] */
    for (int64_t j = 0; j <= i; j++) {
        const double e = exp((double)s[j] - mx);
        sum += e;
        if (j >= sinks && j <= last) out += e;
    }
    *outside = out / sum;
    *top = 1.0 / sum;   /* the largest term is exp(0) = 1 */
}

/* The same from the query and keys in double, for a row whose float scores
 * overflowed (keys or queries near the float range: the trace is valid, the
 * float product is not). Two passes over the keys, no scratch. */
static void row_stats_exact(const float *q, const float *k, int64_t i, int64_t D, int64_t sinks, int64_t recent,
                            double *outside, double *top)
{
    const double scale = 1.0 / sqrt((double)D);
    double mx = -INFINITY, sum = 0.0, out = 0.0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t j = 0; j <= i; j++) {
            double s = 0.0;
            for (int64_t d = 0; d < D; d++) s += (double)q[d] * k[j * D + d];
            s *= scale;
            if (pass == 0) {
                if (s > mx) mx = s;
                continue;
            }
            const double e = exp(s - mx);
            sum += e;
            if (j >= sinks && j <= i - recent) out += e;
        }
    *outside = out / sum;
    *top = 1.0 / sum;
}

void head_importance_kv(const float *q, int64_t G, const float *k, int64_t T, int64_t D, int64_t sinks,
                        int64_t recent, float *scratch, head_importance *out)
{
    const int64_t q0 = sinks + recent < T ? sinks + recent : 0;
    const float scale = (float)(1.0 / sqrt((double)D));
    double score = 0.0, conc = 0.0;
    for (int64_t h = 0; h < G; h++)
        for (int64_t i0 = q0; i0 < T; i0 += HEAD_IMP_BLOCK) {
            const int64_t n = T - i0 < HEAD_IMP_BLOCK ? T - i0 : HEAD_IMP_BLOCK, w = i0 + n;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)w, (int)D, scale,
                        q + (h * T + i0) * D, (int)D, k, (int)D, 0.0f, scratch, (int)w);
            for (int64_t r = 0; r < n; r++) {
                double o, t;
                row_stats(scratch + r * w, i0 + r, sinks, recent, &o, &t);
                if (!isfinite(o) || !isfinite(t))
                    row_stats_exact(q + (h * T + i0 + r) * D, k, i0 + r, D, sinks, recent, &o, &t);
                score += o, conc += t;
            }
        }
    const double n_q = (double)(G * (T - q0));
    out->score = score / n_q;
    out->concentration = conc / n_q;
}
