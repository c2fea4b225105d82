#include "sim/stats.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

static void swap(double *x, int64_t a, int64_t b)
{
    double t = x[a];
    x[a] = x[b], x[b] = t;
}

/* Median of x[a], x[b], x[c] moved to x[a] (the pivot). */
static void median_to_front(double *x, int64_t a, int64_t b, int64_t c)
{
    if (x[b] < x[a]) swap(x, a, b);
    if (x[c] < x[b]) swap(x, b, c);
    if (x[b] < x[a]) swap(x, a, b);
    swap(x, a, b);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sim_select_kth(double *x, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1, budget = 64; /* rounds before falling back to sorting */
    while (hi > lo) {
        if (budget-- == 0) { /* adversarial pivots: sort what is left, O(n log n) at worst */
            qsort(x + lo, (size_t)(hi - lo + 1), sizeof *x, cmp_double);
            break;
        }
        median_to_front(x, lo, lo + (hi - lo) / 2, hi);
        const double p = x[lo];
        /* Hoare partition around p = x[lo] */
        int64_t i = lo, j = hi + 1;
        for (;;) {
            do i++; while (i <= hi && x[i] < p);
            do j--; while (x[j] > p);
            if (i >= j) break;
            swap(x, i, j);
        }
        swap(x, lo, j); /* p at its final place j */
        if (j == k) break;
        if (k < j) hi = j - 1;
        else lo = j + 1;
    }
    return x[k];
}

void sim_stats_of(double *errs, const double *recalls, const int64_t *pos, int64_t n, int64_t prompt_len,
                  int phase, sim_stats *s)
{
    int64_t m = 0;
    double rsum = 0.0, rmin = 1.0, esum = 0.0;
    for (int64_t e = 0; e < n; e++) {
        bool in = phase == PHASE_ALL || (phase == PHASE_PREFILL) == (pos[e] < prompt_len);
        if (!in) continue;
        errs[m] = errs[e]; /* compacted in place */
        esum += errs[e], rsum += recalls[e], rmin = recalls[e] < rmin ? recalls[e] : rmin;
        m++;
    }
    s->n = m;
    if (m == 0) {   /* nothing measured: undefined, not a perfect score (docs/sim.md#metrics) */
        s->err_mean = s->err_p95 = s->recall_mean = s->recall_min = NAN;
        return;
    }
    const double rank = 0.95 * (double)(m - 1);
    const int64_t lo = (int64_t)rank;
    const double at = sim_select_kth(errs, m, lo);
    double next = at; /* the (lo+1)-th smallest: the least of what selection left above lo */
    for (int64_t e = lo + 1; e < m; e++) next = e == lo + 1 || errs[e] < next ? errs[e] : next;
    s->err_mean = esum / (double)m;
    s->err_p95 = at + (rank - (double)lo) * (next - at);
    s->recall_mean = rsum / (double)m;
    s->recall_min = rmin;
}
