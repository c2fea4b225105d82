/* head_importance: the share of attention outside sinks + recent window and
 * the concentration of a kv head's query heads (head_importance.h). */
#include "analysis/head_importance.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>

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

/* Query i's outside mass and top weight from its recorded lse and row max m:
 * its scaled scores on the sinks sk [ns] (keys 0 .. ns − 1) and on the keys
 * win [i − lo + 1] (keys lo .. i, lo <= i − W + 1 or 0; the sinks >= lo among
 * them). False when one of the scores it needs overflowed float.
 *
 * Accuracy: each term exp(s_ij − lse_i) carries the relative error of its
 * exponent, ε = |Δs_ij| + |Δlse_i| (float scores and a float32 lse: roughly
 * (|s| + |lse|)·2^-24, plus the recording's own, ~3e-7 for capture's float
 * exp), so the inside sum (at most S + W terms, at most 1 in all) is off by at
 * most Σ_j p_ij·ε <= max ε absolute (so within the looser (S + W)·max ε), and
 * the subtraction 1 − inside passes on that absolute error: an outside mass near 0 may come out as a tiny
 * negative number or a tiny positive one where the exact pass gives 1e-9
 * (clamped to 0). max p = exp(m − lse) is off by (|Δm| + |Δlse|) relative. */
static bool row_stats_recorded(const float *sk, int64_t ns, const float *win, int64_t lo, int64_t i, int64_t sinks,
                               int64_t recent, double lse, double mx, double *outside, double *top)
{
    double in = 0.0;
    bool finite = true;
    for (int64_t j = 0; j < ns; j++) {
        finite &= isfinite(sk[j]);
        in += exp((double)sk[j] - lse);
    }
    for (int64_t j = lo; j <= i; j++) /* inside: a sink at or past lo, or one of the W recent */
        if (j < sinks || j > i - recent) {
            finite &= isfinite(win[j - lo]);
            in += exp((double)win[j - lo] - lse);
        }
    const double o = 1.0 - in, t = exp(mx - lse);
    *outside = i - recent < sinks ? 0.0 : o > 0.0 ? o : 0.0; /* O(i) empty: 0 exactly, as the exact pass */
    *top = t < 1.0 ? t : 1.0; /* a recorded lse below the row max is not a softmax's: at most 1 */
    return finite;
}

void head_importance_kv_recorded(const float *q, int64_t G, const float *k, const float *lse, const float *mx,
                                 int64_t T, int64_t D, int64_t sinks, int64_t recent, float *scratch,
                                 head_importance *out)
{
    const int64_t q0 = sinks + recent < T ? sinks + recent : 0;
    const float scale = (float)(1.0 / sqrt((double)D));
    double score = 0.0, conc = 0.0;
    for (int64_t h = 0; h < G; h++)
        for (int64_t i0 = q0; i0 < T; i0 += HEAD_IMP_BLOCK) {
            const int64_t n = T - i0 < HEAD_IMP_BLOCK ? T - i0 : HEAD_IMP_BLOCK, w = i0 + n;
            /* keys lo .. w − 1 hold every row's window; the sinks below lo apart:
             * n·(ns + w − lo) <= n·w floats, within head_importance_scratch */
            const int64_t lo = i0 - recent + 1 > 0 ? i0 - recent + 1 : 0, ns = sinks < lo ? sinks : lo;
            float *win = scratch, *sk = scratch + n * (w - lo);
            const float *qb = q + (h * T + i0) * D;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)(w - lo), (int)D, scale, qb, (int)D,
                        k + lo * D, (int)D, 0.0f, win, (int)(w - lo));
            if (ns > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)ns, (int)D, scale, qb, (int)D, k,
                            (int)D, 0.0f, sk, (int)ns);
            for (int64_t r = 0; r < n; r++) {
                const int64_t i = i0 + r;
                double o, t;
                if (!row_stats_recorded(sk + r * ns, ns, win + r * (w - lo), lo, i, sinks, recent, lse[h * T + i],
                                        mx[h * T + i], &o, &t))
                    row_stats_exact(qb + r * D, k, i, D, sinks, recent, &o, &t);
                score += o, conc += t;
            }
        }
    const double n_q = (double)(G * (T - q0));
    out->score = score / n_q;
    out->concentration = conc / n_q;
}
