/* int8 products (model/int8_product.h) against independent computations: the
 * quantisation's bound |x - d q| <= d / 2 and its codes, and the product of
 * Q8_0, Q4_0 and Q4_1 blocks against (a) the exact product of the dequantised
 * weights and rows, summed in double, within the rounding of the float32 sum
 * over blocks, and (b) the documented float32 order, written out here from
 * the blocks' bytes: equal bit for bit, whichever kernel runs. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

#include "core/half.h"
#include "core/rng.h"
#include "model/int8_product.h"

enum { Q4_0 = 2, Q4_1 = 3, Q8_0 = 8 };

static size_t block_bytes(uint32_t t)
{
    return t == Q8_0 ? 34 : t == Q4_1 ? 20 : 18;
}

/* Random blocks of type t for `out` rows of `in` values; d and m random F16 words of moderate size. */
static uint8_t *random_blocks(kv_rng *r, uint32_t t, int64_t out, int64_t in)
{
    const size_t bb = block_bytes(t), n = (size_t)(out * in / 32);
    uint8_t *w = malloc(n * bb);
    for (size_t b = 0; b < n; b++) {
        uint8_t *p = w + b * bb;
        const kv_half d = half_from_float((float)(0.001 + 0.05 * rng_uniform(r)));
        const kv_half m = half_from_float((float)(0.2 * (rng_uniform(r) - 0.5)));
        p[0] = (uint8_t)(d & 0xFF), p[1] = (uint8_t)(d >> 8);
        if (t == Q4_1) p[2] = (uint8_t)(m & 0xFF), p[3] = (uint8_t)(m >> 8);
        for (size_t k = t == Q4_1 ? 4 : 2; k < bb; k++) p[k] = (uint8_t)rng_u64(r);
        if (t == Q8_0 && b % 7 == 0) p[2] = 0x81; /* -127, the extreme code */
    }
    return w;
}

static float f16(const uint8_t *p)
{
    return half_to_float((kv_half)(p[0] | (p[1] << 8)));
}

/* Weight code k of row o (as the formats define them) and the row's block scale and minimum. */
static int code(const uint8_t *w, uint32_t t, int64_t in, int64_t o, int64_t k, float *d, float *m)
{
    const uint8_t *p = w + (size_t)(o * (in / 32) + k / 32) * block_bytes(t);
    *d = f16(p), *m = t == Q4_1 ? f16(p + 2) : 0.0f;
    const int j = (int)(k % 32);
    if (t == Q8_0) return (int8_t)p[2 + j];
    const uint8_t byte = p[(t == Q4_1 ? 4 : 2) + j % 16];
    const int q = j < 16 ? byte & 0x0F : byte >> 4;
    return t == Q4_1 ? q : q - 8;
}

/* Quantisation: every value within half a step of d q, the block's largest magnitude at ±127, a zero
 * block all zero, and the codes' sum. */
static void quantise_bound(void **state)
{
    (void)state;
    kv_rng r;
    rng_init(&r, 7, 1, 2, 3);
    const int64_t n = 5, in = 96, nb = in / 32;
    float *x = malloc(sizeof(float) * (size_t)(n * in));
    for (int64_t i = 0; i < n * in; i++) x[i] = (float)(rng_normal(&r) * (i % 5 == 0 ? 30.0 : 0.3));
    for (int64_t k = 0; k < 32; k++) x[2 * in + 32 + k] = 0.0f; /* row 2, block 1: zeros */
    x[3 * in + 5] = 1e30f;                                       /* one huge value */
    int8_rows q = {0};
    kv_err err = {0};
    assert_int_equal(int8_rows_reserve(&q, n, in, &err), KV_OK);
    int8_quantise(&q, x, n, in);
    assert_int_equal(q.n_pad, 16);
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < nb; b++) {
            const float d = q.d[i * nb + b];
            double amax = 0;
            int32_t sum = 0, qmax = 0;
            for (int64_t k = 0; k < 32; k++) {
                const float v = x[i * in + b * 32 + k];
                const int c = int8_code_at(&q, i, b * 32 + k);
                amax = fmax(amax, fabs(v));
                sum += c, qmax = abs(c) > qmax ? abs(c) : qmax;
                assert_true(fabs((double)v - (double)d * c) <= 0.5 * (double)d * (1 + 1e-5) + 1e-30);
            }
            assert_int_equal(q.s[i * nb + b], sum);
            assert_true(fabs(d - amax / 127.0) <= amax / 127.0 * 1e-6);
            assert_int_equal(qmax, amax > 0 ? 127 : 0);
        }
    for (int64_t i = n; i < q.n_pad; i++) /* the padding rows */
        for (int64_t b = 0; b < nb; b++) assert_true(q.d[i * nb + b] == 0.0f && q.s[i * nb + b] == 0);
    /* a block of subnormal values so small that a / 127 rounds to 0 (1 / d is then infinite): d = 0, and
     * every code 127 with the value's sign (0 for 0), so that the products are 0 as the values nearly are */
    for (int64_t k = 0; k < 32; k++) x[k] = k % 3 == 0 ? 0.0f : k % 3 == 1 ? 1e-44f : -1e-44f;
    int8_quantise(&q, x, 1, in);
    assert_true(q.d[0] == 0.0f);
    for (int64_t k = 0; k < 32; k++) assert_int_equal(int8_code_at(&q, 0, k), k % 3 == 0 ? 0 : k % 3 == 1 ? 127 : -127);
    /* a block holding inf or NaN: its scale is not finite and every code 0 (the product is NaN) */
    x[40] = INFINITY, x[70] = NAN;
    int8_quantise(&q, x, 1, in);
    for (int64_t b = 1; b < 3; b++) {
        assert_false(isfinite(q.d[b]));
        for (int64_t k = 0; k < 32; k++) assert_int_equal(int8_code_at(&q, 0, b * 32 + k), 0);
    }
    int8_rows_free(&q);
    free(x);
}

static void product_case(kv_rng *r, uint32_t t, int64_t n, int64_t in, int64_t out, int64_t o0, int64_t rows,
                         bool amx)
{
    const int64_t nb = in / 32;
    uint8_t *w = random_blocks(r, t, out, in);
    float *x = malloc(sizeof(float) * (size_t)(n * in));
    float *y = malloc(sizeof(float) * (size_t)(n * out));
    for (int64_t i = 0; i < n * in; i++) x[i] = (float)rng_normal(r);
    for (int64_t i = 0; i < n * out; i++) y[i] = NAN; /* columns outside [o0, o0 + rows) stay NaN */
    int8_rows q = {0};
    kv_err err = {0};
    assert_int_equal(int8_rows_reserve(&q, n + 3, in, &err), KV_OK);
    int8_quantise(&q, x, n, in);
    void *scratch = aligned_alloc(64, (int8_scratch_bytes() + 63) / 64 * 64);
    const weights_ggml g = {.data = w, .type = t};
    int8_matrix pw;
    assert_int_equal(int8_matrix_reserve(&pw, &g, in, out, &err), KV_OK);
    int8_matrix_pack(&pw, 0, pw.groups / 2, amx); /* in two parts, as threads would */
    int8_matrix_pack(&pw, pw.groups / 2, pw.groups, amx);
    int8_product(&q, &pw, o0, rows, y + o0, out, scratch, amx);
    int8_matrix_free(&pw);
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            if (o < o0 || o >= o0 + rows) {
                assert_true(isnan(y[i * out + o]));
                continue;
            }
            double exact = 0, mag = 0;
            float ordered = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const float dx = q.d[i * nb + b];
                float dw = 0, mw = 0;
                int32_t isum = 0, qsum = 0;
                for (int64_t k = b * 32; k < b * 32 + 32; k++) {
                    const int c = code(w, t, in, o, k, &dw, &mw), a = int8_code_at(&q, i, k);
                    isum += c * a, qsum += a;
                    const double term = ((double)dw * c + mw) * ((double)dx * a);
                    exact += term, mag += fabs(term);
                }
                const float s = dw * dx;
                ordered = ordered + s * (float)isum;
                if (t == Q4_1) {
                    const float u = mw * dx;
                    ordered = ordered + u * (float)qsum;
                }
            }
            const float got = y[i * out + o];
            assert_true(fabs(got - exact) <= (double)(nb + 3) * 0x1p-23 * mag + 1e-30);
            assert_memory_equal(&got, &ordered, sizeof got);
        }
    free(scratch), free(w), free(x), free(y);
    int8_rows_free(&q);
}

/* Each type over shapes that are and are not whole tiles of 16 rows and columns, odd and even numbers
 * of blocks, a column range that starts inside the matrix and ranges of several panels, on the portable kernel and (where the CPU has them) AMX tiles: both
 * equal to the documented order, so to each other. */
static void products(void **state)
{
    (void)state;
    const bool amx = int8_amx();
    print_message("# int8 kernels: portable%s\n", amx ? " and amx" : " (no AMX here: the amx kernel is not run)");
    const uint32_t types[] = {Q8_0, Q4_0, Q4_1};
    for (int k = 0; k < 1 + amx; k++) {
        kv_rng r;
        rng_init(&r, 11, 4, 5, 6);
        for (size_t i = 0; i < 3; i++) {
            product_case(&r, types[i], 1, 32, 1, 0, 1, k == 1);
            product_case(&r, types[i], 5, 96, 23, 0, 23, k == 1);
            product_case(&r, types[i], 17, 64, 40, 16, 24, k == 1);
            product_case(&r, types[i], 33, 160, 16, 0, 16, k == 1);
            /* inputs so wide that a call's rows take several panels (int8_panel_rows): 48 rows and 2;
             * 16, 16 and 8; 48 rows and 3 from row 32 */
            product_case(&r, types[i], 2, 8192, 50, 0, 50, k == 1);
            product_case(&r, types[i], 2, 8192, 83, 32, 51, k == 1);
            product_case(&r, types[i], 3, 16384, 40, 0, 40, k == 1);
        }
    }
    assert_true(int8_supports(Q8_0) && int8_supports(Q4_0) && int8_supports(Q4_1));
    assert_false(int8_supports(0) || int8_supports(1) || int8_supports(12) || int8_supports(14));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(quantise_bound),
        cmocka_unit_test(products),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
