/* 16-bit weight matrices (model/weights.h) and the CPU's tiled product
 * (FORWARD_CPU.matmul16) against independent computations: the compiler's
 * _Float16 and bit arithmetic for the conversions, a double-precision loop
 * for the product. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

#include "model/forward.h"
#include "model/backend.h"
#include "model/weights.h"
#include "core/rng.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* every 16-bit word: widened exactly (bf16: the top half of a float; f16:
 * _Float16's value), the finiteness check agrees with isfinite, and a
 * finite value narrows back to the same word */
static void every_word(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        const uint16_t w = (uint16_t)b;
        float bf, hf;
        weights_widen(&w, MODEL_W_BF16, 0, 1, &bf);
        weights_widen(&w, MODEL_W_F16, 0, 1, &hf);
        _Float16 ref;
        memcpy(&ref, &w, sizeof ref);
        const float want_bf = from_bits(b << 16), want_hf = (float)ref;
        assert_true(isnan(want_bf) ? isnan(bf) : memcmp(&bf, &want_bf, 4) == 0);
        assert_true(isnan(want_hf) ? isnan(hf) : memcmp(&hf, &want_hf, 4) == 0);
        assert_int_equal(weights_first_nonfinite(&w, MODEL_W_BF16, 1), isfinite(want_bf) ? -1 : 0);
        assert_int_equal(weights_first_nonfinite(&w, MODEL_W_F16, 1), isfinite(want_hf) ? -1 : 0);
        uint16_t nb, nh;
        weights_narrow(&bf, MODEL_W_BF16, &nb, 1);
        weights_narrow(&hf, MODEL_W_F16, &nh, 1);
        if (isfinite(want_bf)) assert_int_equal(nb, w);
        if (isfinite(want_hf)) assert_int_equal(nh, w);
    }
    assert_int_equal(weights_size(MODEL_W_F32), 4);
    assert_int_equal(weights_size(MODEL_W_BF16), 2);
    assert_string_equal(weights_name(MODEL_W_F16), "f16");
}

/* y = x . W^T with W in 16 bits, its 300 rows as blocks of 100 (FORWARD_WTILE 128), on one thread
 * (no instance) and on an instance of two (the tile in two parts): against a double loop on the
 * widened W, and bit for bit against the float32 kernel on the widened W and against each other */
static void tiled_product(void **state)
{
    (void)state;
    enum { N = 16, IN = 256, OUT = 300 };
    kv_rng r;
    rng_init(&r, 24, 5, 0, 0);
    float *x = malloc(sizeof(float) * N * IN), *wide = malloc(sizeof(float) * OUT * IN);
    float *y = malloc(sizeof(float) * N * OUT), *y2 = malloc(sizeof(float) * N * OUT);
    float *yf = malloc(sizeof(float) * N * OUT), *yf2 = malloc(sizeof(float) * N * OUT);
    float *tile = malloc(sizeof(float) * 2 * FORWARD_WTILE * IN);
    uint16_t *w = malloc(sizeof(uint16_t) * OUT * IN);
    assert_non_null(x), assert_non_null(wide), assert_non_null(y), assert_non_null(y2), assert_non_null(yf);
    assert_non_null(yf2), assert_non_null(tile), assert_non_null(w);
    void *two = NULL;
    kv_err err = {0};
    assert_int_equal(backend_open(&BACKEND_CPU, &(backend_request){.threads = 2}, &two, &err), KV_OK);
    assert_int_equal(FORWARD_CPU.workers(two), 2);
    for (int i = 0; i < N * IN; i++) x[i] = (float)(2 * rng_uniform(&r) - 1);
    for (model_wtype t = MODEL_W_F16; t <= MODEL_W_BF16; t++) {
        for (int i = 0; i < OUT * IN; i++) {
            const float v = (float)(2 * rng_uniform(&r) - 1);
            weights_narrow(&v, t, &w[i], 1);
            weights_widen(w, t, (size_t)i, 1, &wide[i]);
        }
        FORWARD_CPU.matmul16(NULL, x, w, t, y, N, IN, OUT, tile, FORWARD_WTILE * IN);
        FORWARD_CPU.matmul16(two, x, w, t, y2, N, IN, OUT, tile, 2 * FORWARD_WTILE * IN);
        FORWARD_CPU.matmul(NULL, x, wide, yf, N, IN, OUT);
        FORWARD_CPU.matmul(two, x, wide, yf2, N, IN, OUT);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++) {
                double ref = 0, mag = 0;
                for (int i = 0; i < IN; i++) {
                    ref += (double)x[n * IN + i] * (double)wide[o * IN + i];
                    mag += fabs((double)x[n * IN + i] * (double)wide[o * IN + i]);
                }
                assert_true(fabs(y[n * OUT + o] - ref) <= IN * 0x1p-24 * mag + 1e-30);
            }
        assert_memory_equal(y, yf, sizeof(float) * N * OUT);
        assert_memory_equal(y2, yf, sizeof(float) * N * OUT);
        assert_memory_equal(yf2, yf, sizeof(float) * N * OUT);
    }
    backend_close(&BACKEND_CPU, two);
    free(x), free(wide), free(y), free(y2), free(yf), free(yf2), free(tile), free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_word),
        cmocka_unit_test(tiled_product),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
