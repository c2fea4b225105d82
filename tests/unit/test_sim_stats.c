/* sim_stats_of and its selection: the p95 by quickselect equals the p95 of a
 * fully sorted copy (closed-form interpolation between order statistics), on
 * random sets with many ties, sorted and reversed input, and hand cases. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "sim/stats.h"

enum { MAXN = 700 };

#define assert_near(got, want, tol) assert_true(fabs((double)(got) - (double)(want)) <= (tol))

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void select_matches_sorting(void **state)
{
    (void)state;
    kv_rng r;
    rng_init(&r, 5, 0, 0, 0);
    static double x[MAXN], sorted[MAXN];
    for (int trial = 0; trial < 400; trial++) {
        int64_t n = 1 + (int64_t)(rng_below(&r, MAXN));
        int kind = trial % 4, levels = 1 + (int)(rng_below(&r, 20));
        for (int64_t i = 0; i < n; i++) {
            double u = rng_uniform(&r);
            x[i] = kind == 0 ? u : kind == 1 ? (double)rng_below(&r, (uint64_t)levels) /* ties */
                 : kind == 2 ? (double)i : (double)(n - i);                            /* sorted, reversed */
        }
        memcpy(sorted, x, sizeof(double) * (size_t)n);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp);
        int64_t k = (int64_t)rng_below(&r, (uint64_t)n);
        assert_true(sim_select_kth(x, n, k) == sorted[k]);
        for (int64_t i = 0; i < k; i++) assert_true(x[i] <= x[k]);
        for (int64_t i = k + 1; i < n; i++) assert_true(x[i] >= x[k]);
    }
}

static void p95_interpolates(void **state)
{
    (void)state;
    /* 0..20: rank 0.95*20 = 19 exactly -> 19; 0..9: rank 8.55 -> 8 + 0.55 */
    double e[21], rec[21];
    int64_t pos[21];
    for (int i = 0; i < 21; i++) e[i] = (double)(20 - i), rec[i] = 1.0 - i / 100.0, pos[i] = i;
    sim_stats s;
    sim_stats_of(e, rec, pos, 21, 0, PHASE_ALL, &s);
    assert_int_equal(s.n, 21);
    assert_near(s.err_p95, 19.0, 1e-12);
    assert_near(s.err_mean, 10.0, 1e-12);
    assert_near(s.recall_min, 0.8, 1e-12);
    for (int i = 0; i < 10; i++) e[i] = (double)((i * 7) % 10); /* a permutation of 0..9 */
    sim_stats_of(e, rec, pos, 10, 0, PHASE_ALL, &s);
    assert_near(s.err_p95, 8.55, 1e-12);
    /* phases: positions below prompt_len are prefill */
    for (int i = 0; i < 10; i++) e[i] = (double)i;
    sim_stats_of(e, rec, pos, 10, 4, PHASE_DECODE, &s);
    assert_int_equal(s.n, 6);
    assert_near(s.err_mean, 6.5, 1e-12);
    assert_near(s.err_p95, 4 + 0.95 * 5, 1e-12);
    sim_stats_of(e, rec, pos, 0, 4, PHASE_ALL, &s); /* nothing evaluated: undefined, NaN (not 0 and 1) */
    assert_int_equal(s.n, 0);
    assert_true(isnan(s.err_mean) && isnan(s.err_p95) && isnan(s.recall_mean) && isnan(s.recall_min));
    sim_stats_of(e, rec, pos, 4, 4, PHASE_DECODE, &s); /* a phase without queries (all four are prefill) */
    assert_int_equal(s.n, 0);
    assert_true(isnan(s.err_mean) && isnan(s.recall_min));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(select_matches_sorting),
        cmocka_unit_test(p95_interpolates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
