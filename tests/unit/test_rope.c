/* RoPE: table and direct forms agree, norms are kept, q.k depends on i - j only. */
#include "testutil.h"

#include <math.h>

#include "core/rope.h"

enum { D = 16, T = 64 };

static void fill(float *x, float seed)
{
    for (int d = 0; d < D; d++) x[d] = sinf(seed + 0.7f * (float)d);
}

static double dotf(const float *a, const float *b)
{
    double s = 0;
    for (int d = 0; d < D; d++) s += (double)a[d] * b[d];
    return s;
}

static void table_matches_direct(void **state)
{
    (void)state;
    static float tab[T * D];
    rope_table_fill(tab, T, D, 10000.0);
    for (int style = 0; style < 2; style++)
        for (int t = 0; t < T; t += 7) {
            float a[D], b[D];
            fill(a, (float)t), fill(b, (float)t);
            rope_apply(a, D, t, 10000.0, (rope_style)style);
            rope_table_apply(b, D, (rope_style)style, tab, t);
            for (int d = 0; d < D; d++) assert_true(fabsf(a[d] - b[d]) <= 1e-6f);
            float c[D];
            fill(c, (float)t);
            assert_true(fabs(dotf(a, a) - dotf(c, c)) <= 1e-5 * dotf(c, c)); /* a rotation */
        }
}

static void relative_positions_only(void **state)
{
    (void)state;
    for (int style = 0; style < 2; style++) {
        float q0[D], k0[D];
        fill(q0, 1.0f), fill(k0, 2.0f);
        double first = 0;
        for (int shift = 0; shift < 40; shift += 13) {
            float q[D], k[D];
            memcpy(q, q0, sizeof q), memcpy(k, k0, sizeof k);
            rope_apply(q, D, 9 + shift, 10000.0, (rope_style)style);
            rope_apply(k, D, 4 + shift, 10000.0, (rope_style)style);
            if (shift == 0) first = dotf(q, k);
            assert_true(fabs(dotf(q, k) - first) <= 1e-5);
        }
    }
}

static void pair_layouts(void **state)
{
    (void)state;
    int64_t a, b;
    rope_pair_dims(ROPE_INTERLEAVED, D, 3, &a, &b);
    assert_true(a == 6 && b == 7);
    rope_pair_dims(ROPE_NEOX, D, 3, &a, &b);
    assert_true(a == 3 && b == 3 + D / 2);
    rope_style s;
    assert_true(rope_style_parse("neox", &s) && s == ROPE_NEOX);
    assert_false(rope_style_parse("Neox", &s));
}

/* The double helpers: rope_rotate_d is rope_apply's rotation, -pos undoes it
 * (frequency factors too), and the mean rotation equals the direct average. */
static void inverse_and_mean_rotation(void **state)
{
    (void)state;
    const double div[D / 2] = {1, 2, 4, 8, 1, 3, 1, 1};
    for (int style = 0; style < 2; style++)
        for (int scaled = 0; scaled < 2; scaled++) {
            const rope_spec r = {.theta = 500.0, .style = (rope_style)style, .div = scaled ? div : NULL};
            float a[D];
            double x[D], y[D];
            fill(a, 1.5f);
            for (int d = 0; d < D; d++) x[d] = y[d] = a[d];
            rope_rotate_d(&r, x, D, 37.0);
            if (!scaled) {
                rope_apply(a, D, 37, 500.0, (rope_style)style);
                for (int d = 0; d < D; d++) assert_true(fabs(x[d] - a[d]) < 1e-5);
            }
            rope_rotate_d(&r, x, D, -37.0);
            for (int d = 0; d < D; d++) assert_true(fabs(x[d] - y[d]) < 1e-12);
            double cs[D], direct[D] = {0};
            rope_mean_rotation(&r, D, 100, 257, cs);
            for (int t = 100; t < 357; t++)
                for (int p = 0; p < D / 2; p++) {
                    const double f = rope_freq(&r, D, p);
                    direct[2 * p] += cos(t * f) / 257, direct[2 * p + 1] += sin(t * f) / 257;
                }
            for (int d = 0; d < D; d++) assert_true(fabs(cs[d] - direct[d]) < 1e-12);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(inverse_and_mean_rotation),
        cmocka_unit_test(table_matches_direct),
        cmocka_unit_test(relative_positions_only),
        cmocka_unit_test(pair_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
