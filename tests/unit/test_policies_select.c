/* policy_select, the engine's selection rule
 * (docs/sim.md#the-eviction-step-step-by-step): the budget highest
 * scores, ties towards the later position, +INFINITY protected (the newest N
 * when more than N are), NaN treated as -INFINITY; output in position order.
 * Checked on hand cases and against a brute-force O(n²) reference. */
#include "testutil.h"

#include <math.h>

#include "core/rng.h"
#include "policies/select.h"

enum { MAXN = 600 };

static int64_t keep[MAXN], scratch[MAXN];

static int64_t sel(const double *s, const int64_t *pos, int64_t n, int64_t budget)
{
    return policy_select(s, pos, n, budget, keep, scratch);
}

static void expect(int64_t got, const int64_t *want, int64_t n_want)
{
    assert_int_equal(got, n_want);
    for (int64_t i = 0; i < n_want; i++) {
        if (keep[i] != want[i]) printf("# keep[%lld] = %lld, want %lld\n", (long long)i, (long long)keep[i], (long long)want[i]);
        assert_int_equal(keep[i], want[i]);
    }
}

static const int64_t POS[8] = {0, 1, 2, 3, 4, 5, 6, 7};

static void ties_keep_the_later_position(void **state)
{
    (void)state;
    expect(sel((const double[]){1, 1, 1, 1, 1, 1}, POS, 6, 3), (int64_t[]){3, 4, 5}, 3);
    expect(sel((const double[]){5, 1, 1, 1, 0}, POS, 5, 3), (int64_t[]){0, 2, 3}, 3);
    expect(sel((const double[]){-0.0, 0.0, -1}, POS, 3, 1), (int64_t[]){1}, 1);   /* -0 == 0 */
    /* positions, not indices, decide (a cache after evictions) */
    const int64_t gaps[4] = {3, 10, 11, 40};
    expect(sel((const double[]){2, 2, 7, 2}, gaps, 4, 2), (int64_t[]){2, 3}, 2);
}

static void protected_overflow_keeps_the_newest(void **state)
{
    (void)state;
    const double s[6] = {INFINITY, INFINITY, 1, INFINITY, INFINITY, 0};
    expect(sel(s, POS, 6, 2), (int64_t[]){3, 4}, 2);
    expect(sel(s, POS, 6, 5), (int64_t[]){0, 1, 2, 3, 4}, 5);
    expect(sel((const double[]){INFINITY, 1e300, 1e308}, POS, 3, 1), (int64_t[]){0}, 1);
}

static void nan_is_lowest(void **state)
{
    (void)state;
    expect(sel((const double[]){NAN, -1e300, 2, NAN}, POS, 4, 2), (int64_t[]){1, 2}, 2);
    /* NaN counts as -INFINITY, so the tie rule applies between them */
    expect(sel((const double[]){-INFINITY, NAN, 0}, POS, 3, 2), (int64_t[]){1, 2}, 2);
    expect(sel((const double[]){NAN, -INFINITY, 0}, POS, 3, 2), (int64_t[]){1, 2}, 2);
}

static void small_sets_keep_everything(void **state)
{
    (void)state;
    expect(sel((const double[]){3, NAN, -INFINITY}, POS, 3, 3), (int64_t[]){0, 1, 2}, 3);
    expect(sel((const double[]){3, 1}, POS, 2, 10), (int64_t[]){0, 1}, 2);
    assert_int_equal(sel(NULL, POS, 0, 4), 0);
    assert_int_equal(sel((const double[]){1, 2}, POS, 2, 0), 0);
}

/* i is kept iff fewer than `budget` candidates beat it. */
static bool ref_kept(const double *s, const int64_t *pos, int64_t n, int64_t budget, int64_t i)
{
    int64_t better = 0;
    double si = isnan(s[i]) ? -INFINITY : s[i];
    for (int64_t j = 0; j < n; j++) {
        double sj = isnan(s[j]) ? -INFINITY : s[j];
        better += sj > si || (sj == si && pos[j] > pos[i]);
    }
    return better < budget;
}

static void matches_brute_force(void **state)
{
    (void)state;
    static double s[MAXN];
    static int64_t pos[MAXN];
    kv_rng r;
    rng_init(&r, 5, 0, 0, 0);
    for (int trial = 0; trial < 300; trial++) {
        int64_t n = 1 + (int64_t)rng_below(&r, trial < 250 ? 40 : MAXN);
        int64_t budget = (int64_t)rng_below(&r, (uint64_t)n + 3);
        int64_t p = 0;
        for (int64_t j = 0; j < n; j++) {
            pos[j] = p += 1 + (int64_t)rng_below(&r, 4);
            uint64_t kind = rng_below(&r, 10);   /* many ties, some protected and NaN */
            s[j] = kind == 0 ? INFINITY : kind == 1 ? NAN : kind == 2 ? -INFINITY : (double)rng_below(&r, 5);
        }
        int64_t k = sel(s, pos, n, budget), at = 0;
        assert_int_equal(k, n < budget ? n : budget);
        for (int64_t i = 0; i < n; i++) {
            if (!ref_kept(s, pos, n, budget, i)) continue;
            assert_true(at < k);
            assert_int_equal(keep[at++], i);   /* ascending, the same set */
        }
        assert_int_equal(at, k);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ties_keep_the_later_position),
        cmocka_unit_test(protected_overflow_keeps_the_newest),
        cmocka_unit_test(nan_is_lowest),
        cmocka_unit_test(small_sets_keep_everything),
        cmocka_unit_test(matches_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
