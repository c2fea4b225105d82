/* Spearman ρ (analysis/spearman.c) against closed forms: monotone and
 * reversed orderings, a hand-worked example with ties, constant inputs; the
 * blocked-sgemm pairwise x against a brute-force double computation; and
 * the identity of docs/analyze.md#spearmancsv--layerq_headkv_headrho_pairwiserho_anchor:
 * with the normalised mean as anchor, −cos(k_j, μ) ranks
 * the keys exactly as −mean_{m≠j} cos(k_j, k_m). */
#include "testutil.h"

#include <math.h>

#include "analysis/spearman.h"
#include "core/rng.h"

static double rho_of(const double *x, const double *y, int64_t n)
{
    double scratch[64];
    int64_t idx[32];
    assert_true(n <= 32);
    return spearman_rho(x, y, n, scratch, idx);
}

static void monotone_orderings_give_plus_and_minus_one(void **state)
{
    (void)state;
    const double x[6] = {0.3, -1.0, 2.5, 7.0, 0.0, 1.0};
    double up[6], down[6];
    for (int i = 0; i < 6; i++) up[i] = exp(x[i]), down[i] = -x[i] * x[i] * x[i];
    assert_true(rho_of(x, up, 6) == 1.0);
    assert_true(rho_of(x, down, 6) == -1.0);
}

/* x = [1, 2, 2, 3], y = [1, 3, 2, 4]:
 *   ranks(x) = [1, 2.5, 2.5, 4]  (the tied 2s share ranks 2 and 3)
 *   ranks(y) = [1, 3, 2, 4];      both means 2.5
 *   deviations x: [-1.5, 0, 0, 1.5],  y: [-1.5, 0.5, -0.5, 1.5]
 *   Σdx·dy = 2.25 + 0 + 0 + 2.25 = 4.5,  Σdx² = 4.5,  Σdy² = 2.25+0.25+0.25+2.25 = 5
 *   ρ = 4.5 / sqrt(4.5 · 5) = sqrt(0.9) = 0.9486832980505138 */
static void ties_share_average_ranks(void **state)
{
    (void)state;
    const double x[4] = {1, 2, 2, 3}, y[4] = {1, 3, 2, 4};
    assert_true(fabs(rho_of(x, y, 4) - sqrt(0.9)) < 1e-15);
    /* x = [3, 1, 3, 3, 2]: 1 → rank 1, 2 → rank 2, the three 3s share ranks 3, 4, 5 → 4 */
    const double v[5] = {3, 1, 3, 3, 2}, want[5] = {4, 1, 4, 4, 2};
    double r[5];
    int64_t idx[5];
    spearman_ranks(v, 5, r, idx);
    for (int i = 0; i < 5; i++) assert_true(r[i] == want[i]);
}

static void constant_input_gives_nan(void **state)
{
    (void)state;
    const double c[5] = {2, 2, 2, 2, 2}, y[5] = {1, 2, 3, 4, 5};
    assert_true(isnan(rho_of(c, y, 5)));
    assert_true(isnan(rho_of(y, c, 5)));
    assert_true(isnan(rho_of(y, y, 1)));
}

static void y_is_mean_weight_per_visible_query(void **state)
{
    (void)state;
    const float colsum[4] = {4.0f, 1.5f, 1.0f, 0.25f};
    double y[4];
    spearman_y(colsum, 4, y);
    assert_true(y[0] == 1.0 && y[1] == 0.5 && y[2] == 0.5 && y[3] == 0.25);
}

/* Keys around a shared mean direction (as real keys are), T not a multiple of the block. */
static float *random_keys(int64_t T, int64_t D, uint64_t seed)
{
    kv_rng r;
    rng_init(&r, seed, 7, 0, 0);
    float *k = malloc(sizeof(float) * (size_t)(T * D));
    double mean[64];
    assert_non_null(k);
    for (int64_t d = 0; d < D; d++) mean[d] = rng_normal(&r);
    for (int64_t i = 0; i < T * D; i++) k[i] = (float)(mean[i % D] + 1.2 * rng_normal(&r));
    return k;
}

/* The O(T·D) identity against the T² cosines in double, with a zero key
 * (cosine 0 with every key) among them: equal to 1e-12 absolute (x is a
 * mean of cosines, |x| ≤ 1; the identity's rounding is about T·1e-16). */
static void pairwise_x_equals_brute_force(void **state)
{
    (void)state;
    const int64_t T = 300, D = 16;
    float *k = random_keys(T, D, 1);
    for (int64_t d = 0; d < D; d++) k[5 * D + d] = 0.0f;
    double scratch[16], worst = 0.0;
    double *x = malloc(sizeof(double) * (size_t)T);
    assert_non_null(x);
    spearman_x_pairwise(k, T, D, scratch, x);
    for (int64_t j = 0; j < T; j++) {
        double s = 0.0, nj = 0.0;
        for (int64_t d = 0; d < D; d++) nj += (double)k[j * D + d] * k[j * D + d];
        for (int64_t m = 0; m < T; m++) {
            double dot = 0.0, nm = 0.0;
            for (int64_t d = 0; d < D; d++) dot += (double)k[j * D + d] * k[m * D + d], nm += (double)k[m * D + d] * k[m * D + d];
            if (m != j && nj > 0 && nm > 0) s += dot / sqrt(nj * nm);
        }
        const double e = fabs(x[j] - -s / (double)(T - 1));
        if (e > worst) worst = e;
    }
    printf("# x_pairwise: largest |identity - brute force| = %.3g\n", worst);
    assert_true(worst <= 1e-12);
    assert_true(x[5] == 0.0);
    free(k), free(x);
}

static void normalised_anchor_ranks_as_pairwise(void **state)
{
    (void)state;
    const int64_t T = 300, D = 16;
    float *k = random_keys(T, D, 2);
    double scratch[16];
    double *xp = malloc(sizeof(double) * (size_t)T), *xa = malloc(sizeof(double) * (size_t)T);
    double *xr = malloc(sizeof(double) * (size_t)T), *y = malloc(sizeof(double) * (size_t)T);
    double *ranks = malloc(sizeof(double) * (size_t)(2 * T)), mu[16];
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)T);
    assert_true(xp && xa && xr && y && ranks && idx);
    kv_rng r;
    rng_init(&r, 3, 0, 0, 0);
    for (int64_t j = 0; j < T; j++) y[j] = rng_uniform(&r);
    spearman_x_pairwise(k, T, D, scratch, xp);
    spearman_x_anchor(k, T, D, true, mu, xa);
    spearman_x_anchor(k, T, D, false, mu, xr);
    const double rp = spearman_rho(xp, y, T, ranks, idx), ra = spearman_rho(xa, y, T, ranks, idx);
    const double rr = spearman_rho(xr, y, T, ranks, idx);
    printf("# rho pairwise %.15f, normalised anchor %.15f, raw anchor %.15f\n", rp, ra, rr);
    assert_true(fabs(rp - ra) < 1e-12);
    /* the ranks themselves agree, not just ρ */
    spearman_ranks(xp, T, ranks, idx);
    spearman_ranks(xa, T, ranks + T, idx);
    for (int64_t j = 0; j < T; j++) assert_true(ranks[j] == ranks[T + j]);
    assert_true(isfinite(rr) && fabs(rr) <= 1.0);
    free(k), free(xp), free(xa), free(xr), free(y), free(ranks), free(idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(monotone_orderings_give_plus_and_minus_one),
        cmocka_unit_test(ties_share_average_ranks),
        cmocka_unit_test(constant_input_gives_nan),
        cmocka_unit_test(y_is_mean_weight_per_visible_query),
        cmocka_unit_test(pairwise_x_equals_brute_force),
        cmocka_unit_test(normalised_anchor_ranks_as_pairwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
