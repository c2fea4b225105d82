/* PCA of keys (analysis/pca.c) on points built with known principal axes and
 * variances: m ± a·u1, m ± b·u2, m ± c·u3 (a > b > c, u orthonormal) have mean
 * m and covariance (2a² u1u1ᵀ + 2b² u2u2ᵀ + 2c² u3u3ᵀ)/(T − 1), T = 6. Axes
 * come back as ±u1, ±u2 with the sign rule (largest-|component| entry
 * positive) applied; projections are (k − m)·axis. */
#include "testutil.h"

#include <math.h>

#include "analysis/pca.h"
#include "orthonormal.h"

enum { D = 8, T = 6 };

static void known_axes_and_variances(void **state)
{
    (void)state;
    double u[3][D], m[D];
    tu_orthonormal(&u[0][0], 3, D, 1);
    for (int d = 0; d < D; d++) m[d] = 0.25 * d - 1.0;
    /* coordinates along u: exactly representable, so the float keys are near-exact */
    const double amp[3] = {4.0, 2.0, 0.5};
    float keys[T * D];
    for (int p = 0; p < T; p++)
        for (int d = 0; d < D; d++) keys[p * D + d] = (float)(m[d] + (p % 2 ? -1 : 1) * amp[p / 2] * u[p / 2][d]);
    double scratch[T * D + D * D + 3 * D], pc[T * 2], axes[2 * D];
    assert_true(pca_scratch(T, D) <= (int64_t)(sizeof scratch / sizeof scratch[0]));
    pca_summary s;
    assert_int_equal(pca_keys(keys, T, D, scratch, &s, pc, axes), 0);
    const double var1 = 2 * 16.0 / 5, var2 = 2 * 4.0 / 5, total = 2 * (16.0 + 4.0 + 0.25) / 5;
    printf("# var %.9f %.9f total %.9f (want %.9f %.9f %.9f)\n", s.var[0], s.var[1], s.var_total, var1, var2, total);
    assert_true(fabs(s.var[0] - var1) < 1e-5 && fabs(s.var[1] - var2) < 1e-5 && fabs(s.var_total - total) < 1e-5);
    for (int a = 0; a < 2; a++) {
        double want[D];
        memcpy(want, u[a], sizeof want);
        pca_fix_sign(want, D);
        for (int d = 0; d < D; d++) assert_true(fabs(axes[a * D + d] - want[d]) < 1e-5);
        /* the sign rule itself: the largest-|component| entry is positive */
        int best = 0;
        for (int d = 1; d < D; d++)
            if (fabs(axes[a * D + d]) > fabs(axes[a * D + best])) best = d;
        assert_true(axes[a * D + best] > 0);
        for (int p = 0; p < T; p++) {
            double proj = 0.0;
            for (int d = 0; d < D; d++) proj += ((double)keys[p * D + d] - m[d]) * want[d];
            assert_true(fabs(pc[p * 2 + a] - proj) < 1e-5);
        }
    }
}

static void sign_rule(void **state)
{
    (void)state;
    double v[3] = {0.1, -0.5, 0.3};
    pca_fix_sign(v, 3);
    assert_true(v[0] == -0.1 && v[1] == 0.5 && v[2] == -0.3);
    double tie[2] = {-0.5, 0.5}; /* equal magnitudes: the first decides */
    pca_fix_sign(tie, 2);
    assert_true(tie[0] == 0.5 && tie[1] == -0.5);
    double keep[2] = {0.5, -0.5};
    pca_fix_sign(keep, 2);
    assert_true(keep[0] == 0.5 && keep[1] == -0.5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_axes_and_variances),
        cmocka_unit_test(sign_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
