/* kv_expf against exp() in double: the documented 3e-7 relative bound. */
#include "testutil.h"

#include <math.h>

#include "core/fastexp.h"

static void relative_error_bound(void **state)
{
    (void)state;
    double worst = 0.0, worst_x = 0.0;
    for (double x = -87.0; x <= 87.9; x += 1.0 / 4096.0 + 1e-7) {
        float xf = (float)x;
        double ref = exp((double)xf);
        double rel = fabs((double)kv_expf(xf) - ref) / ref;
        if (rel > worst) worst = rel, worst_x = xf;
    }
    printf("# kv_expf: max relative error %.3g at x = %.6g\n", worst, worst_x);
    assert_true(worst < 3e-7);
}

static void edges(void **state)
{
    (void)state;
    assert_true(kv_expf(0.0f) == 1.0f);
    assert_true(kv_expf(-100.0f) == 0.0f);
    assert_true(kv_expf(-INFINITY) == 0.0f);
    assert_true(isfinite(kv_expf(100.0f)));
    assert_true(kv_expf(-87.0f) > 0.0f);
    assert_true(isfinite(kv_expf(INFINITY)));
}

/* NaN in, NaN out, with no integer conversion of a NaN on the way (UBSan
 * flags that as a shift of a negative value on the sanitizer build). */
static void nan_propagates(void **state)
{
    (void)state;
    assert_true(isnan(kv_expf(NAN)));
    assert_true(isnan(kv_expf(-NAN)));
    volatile float inf = INFINITY;
    assert_true(isnan(kv_expf(inf - inf)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(relative_error_bound),
        cmocka_unit_test(edges),
        cmocka_unit_test(nan_propagates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
