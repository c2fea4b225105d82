/* IEEE binary16 conversions against the compiler's _Float16 (independent). */
#include "testutil.h"

#include <math.h>

#include "core/half.h"

static kv_half ref_from_float(float f)
{
    _Float16 h = (_Float16)f;
    kv_half bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}

static float ref_to_float(kv_half bits)
{
    _Float16 h;
    memcpy(&h, &bits, sizeof h);
    return (float)h;
}

static void every_half_to_float(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        float got = half_to_float((kv_half)b), ref = ref_to_float((kv_half)b);
        if (isnan(ref)) {
            assert_true(isnan(got));
            continue;
        }
        assert_memory_equal(&got, &ref, sizeof got);
        /* every half is exact in float: the round trip gives the same bits */
        assert_int_equal(half_from_float(got), b);
    }
}

/* The vectorised array conversion gives half_to_float's bits for every input, NaN payloads included, at
 * every offset of the array (the vector loop's body and its remainder). */
static void array_matches_scalar(void **state)
{
    (void)state;
    kv_half *h = malloc(sizeof(kv_half) * 65536);
    float *got = malloc(sizeof(float) * 65536);
    assert_non_null(h);
    assert_non_null(got);
    for (uint32_t b = 0; b < 65536; b++) h[b] = (kv_half)b;
    for (size_t off = 0; off < 17; off++) {
        half_to_float_array(h + off, got, 65536 - off);
        for (size_t i = 0; i < 65536 - off; i++) {
            const float want = half_to_float(h[off + i]);
            assert_memory_equal(&got[i], &want, sizeof want);
        }
    }
    free(h), free(got);
}

static void float_to_half_rounding(void **state)
{
    (void)state;
    /* midpoints between neighbouring halves exercise ties-to-even */
    for (uint32_t b = 0; b < 0x7c00; b++) {
        double lo = half_to_float((kv_half)b), hi = half_to_float((kv_half)(b + 1));
        float mids[3] = {(float)((lo + hi) / 2), nextafterf((float)((lo + hi) / 2), 0.0f),
                         nextafterf((float)((lo + hi) / 2), INFINITY)};
        for (int i = 0; i < 3; i++) {
            assert_int_equal(half_from_float(mids[i]), ref_from_float(mids[i]));
            assert_int_equal(half_from_float(-mids[i]), ref_from_float(-mids[i]));
        }
    }
    /* random float bit patterns over the whole range */
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 2000000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t u = (uint32_t)x;
        float f;
        memcpy(&f, &u, sizeof f);
        if (isnan(f)) {
            assert_int_equal(half_from_float(f) & 0x7c00, 0x7c00);
            assert_true(half_from_float(f) & 0x3ff);
            continue;
        }
        assert_int_equal(half_from_float(f), ref_from_float(f));
    }
}

static void special_values(void **state)
{
    (void)state;
    assert_int_equal(half_from_float(0.0f), 0x0000);
    assert_int_equal(half_from_float(-0.0f), 0x8000);
    assert_int_equal(half_from_float(INFINITY), 0x7c00);
    assert_int_equal(half_from_float(-INFINITY), 0xfc00);
    assert_int_equal(half_from_float(65504.0f), 0x7bff);
    assert_int_equal(half_from_float(65519.99f), 0x7bff);
    assert_int_equal(half_from_float(65520.0f), 0x7c00);   /* ties to even: overflow */
    assert_int_equal(half_from_float(0x1p-24f), 0x0001);   /* smallest subnormal */
    assert_int_equal(half_from_float(0x1p-25f), 0x0000);   /* tie: to even (zero) */
    assert_int_equal(half_from_float(0x1.8p-25f), 0x0001);
    assert_int_equal(half_from_float(0x1p-14f), 0x0400);   /* smallest normal */
    assert_true(isnan(half_to_float(half_from_float(NAN))));
    float arr[4] = {1.0f, -2.5f, 1e-3f, 3e4f}, back[4];
    kv_half h[4];
    half_from_float_array(arr, h, 4);
    half_to_float_array(h, back, 4);
    for (int i = 0; i < 4; i++) assert_true(fabsf(back[i] - arr[i]) <= fabsf(arr[i]) * 0x1p-11f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_half_to_float),
        cmocka_unit_test(array_matches_scalar),
        cmocka_unit_test(float_to_half_rounding),
        cmocka_unit_test(special_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
