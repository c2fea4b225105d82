/* fidelity's per-position comparison (fidelity/kl.c): KL(p || q) is 0 for
 * identical distributions (and for logits that differ by a constant) and
 * equals a brute-force sum over a small vocabulary computed here from the
 * probabilities themselves; greedy tokens (ties: lowest id) and next-token
 * log-probabilities; p95 against sorting; Spearman on known rankings. */
#include "testutil.h"

#include <math.h>

#include "core/rng.h"
#include "fidelity/kl.h"

static void kl_zero_for_identical(void **state)
{
    (void)state;
    kv_rng r;
    rng_init(&r, 7, 0, 0, 0);
    for (int64_t V = 1; V <= 700; V = V * 3 + 1) {
        float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
        assert_non_null(a);
        assert_non_null(b);
        for (int64_t i = 0; i < V; i++) a[i] = (float)(8.0 * rng_normal(&r)), b[i] = a[i] + 3.0f;
        fid_row row;
        fid_row_compare(a, a, V, (int32_t)(V - 1), &row);
        assert_true(row.kl == 0.0);
        assert_int_equal(row.argmax_p, row.argmax_q);
        fid_row_compare(a, b, V, 0, &row); /* softmax is shift invariant */
        assert_true(row.kl >= 0.0 && row.kl < 1e-6);
        free(a), free(b);
    }
}

/* Σ p_i log(p_i / q_i) from explicitly normalised probabilities, in long double. */
static double brute_kl(const float *lp, const float *lq, int V)
{
    long double zp = 0, zq = 0, kl = 0;
    for (int i = 0; i < V; i++) zp += expl((long double)lp[i]), zq += expl((long double)lq[i]);
    for (int i = 0; i < V; i++) {
        long double p = expl((long double)lp[i]) / zp, q = expl((long double)lq[i]) / zq;
        kl += p * logl(p / q);
    }
    return (double)kl;
}

static void kl_matches_brute_force(void **state)
{
    (void)state;
    const float lp[5] = {1.0f, 2.0f, -0.5f, 0.25f, 3.0f}, lq[5] = {0.5f, 2.5f, -1.0f, 1.0f, 2.0f};
    fid_row row;
    fid_row_compare(lp, lq, 5, 2, &row);
    const double want = brute_kl(lp, lq, 5);
    printf("# KL %.17g brute force %.17g\n", row.kl, want);
    assert_true(fabs(row.kl - want) <= 1e-12 + 1e-10 * want);
    assert_true(want > 0.1); /* non-degenerate */
    assert_int_equal(row.argmax_p, 4);
    assert_int_equal(row.argmax_q, 1);
    long double z = 0;
    for (int i = 0; i < 5; i++) z += expl((long double)lp[i]);
    assert_true(fabs(row.logp_p - (double)((long double)lp[2] - logl(z))) < 1e-12);
    /* random rows of a small vocabulary, including near-zero probabilities */
    kv_rng r;
    rng_init(&r, 11, 0, 0, 0);
    for (int trial = 0; trial < 200; trial++) {
        float a[7], b[7];
        for (int i = 0; i < 7; i++) a[i] = (float)(6.0 * rng_normal(&r)), b[i] = (float)(6.0 * rng_normal(&r));
        fid_row_compare(a, b, 7, -1, &row);
        const double w = brute_kl(a, b, 7);
        assert_true(fabs(row.kl - w) <= 1e-10 + 1e-9 * w);
        assert_true(row.logp_p == 0.0 && row.logp_q == 0.0); /* no next token */
    }
}

static void argmax_ties_lowest(void **state)
{
    (void)state;
    const float l[4] = {1.0f, 3.0f, 3.0f, 2.0f};
    assert_int_equal(fid_argmax(l, 4), 1);
}

static void p95_and_spearman(void **state)
{
    (void)state;
    double x[21];
    for (int i = 0; i < 21; i++) x[i] = (double)((i * 8) % 21); /* a permutation of 0..20 */
    assert_true(fabs(fid_p95(x, 21) - 19.0) < 1e-12);       /* rank 0.95*20 = 19 */
    double y[4] = {4, 1, 3, 2};
    assert_true(fabs(fid_p95(y, 4) - 3.85) < 1e-12);        /* 3 + 0.85 * (4 - 3) */
    assert_true(fid_p95(y, 0) == 0.0);
    const double a[5] = {0.1, 0.5, 0.2, 0.9, 0.3}, b[5] = {1, 50, 2, 900, 3}, c[5] = {5, 1, 4, 0, 3};
    assert_true(fabs(fid_spearman(a, b, 5) - 1.0) < 1e-12);
    assert_true(fabs(fid_spearman(a, c, 5) + 1.0) < 1e-12);
    assert_true(isnan(fid_spearman(a, b, 1)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kl_zero_for_identical),
        cmocka_unit_test(kl_matches_brute_force),
        cmocka_unit_test(argmax_ties_lowest),
        cmocka_unit_test(p95_and_spearman),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
