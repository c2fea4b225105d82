/* The float converters against float32 weights: GGUF's F16, BF16 and Q8_0
 * (model/formats/ggml_types.c) and safetensors' F32, F16 and BF16
 * (model/formats/safetensors.c) round trip within each type's precision, with
 * exact values where the type is exact; and the safetensors reader's own
 * checks on a buffer built here. */
#include "testutil.h"

#include <math.h>

#include "model/formats/ggml_types.h"
#include "model/formats/safetensors.h"
#include "core/half.h"
#include "core/rng.h"

enum { N = 256 };

static void weights(float *w, uint64_t seed)
{
    kv_rng r;
    rng_init(&r, seed, 1, 2, 3);
    for (int i = 0; i < N; i++) w[i] = (float)(rng_normal(&r) * (i < 32 ? 1e-3 : 0.7));
    w[40] = 0.0f, w[41] = -0.0f, w[42] = 3.0e4f;
}

static void bf16_round_trip(void **state)
{
    (void)state;
    float w[N], got[N];
    uint8_t b[2 * N];
    weights(w, 1);
    for (int i = 0; i < N; i++) {
        uint16_t h = bf16_from_float(w[i]);
        b[2 * i] = (uint8_t)h, b[2 * i + 1] = (uint8_t)(h >> 8);
    }
    ggml_type_get(30)->to_f32(b, got, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double rel = fabs((double)got[i] - w[i]) / (fabs(w[i]) + 1e-30);
        if (w[i] != 0) worst = fmax(worst, rel);
        assert_true(fabs((double)got[i] - w[i]) <= fabs(w[i]) * 0x1p-8); /* half an ulp of 8 bits */
    }
    printf("# BF16: max relative error %.3g (bound 2^-8 = %.3g)\n", worst, 0x1p-8);
    assert_true(bf16_to_float(bf16_from_float(1.0f)) == 1.0f);
    assert_true(bf16_from_float(1.00390625f) == 0x3f80);  /* a tie: to even */
    assert_true(bf16_from_float(1.01171875f) == 0x3f82);  /* a tie: to even (up) */
    assert_true(isnan(bf16_to_float(bf16_from_float(NAN))));
}

static void f16_round_trip(void **state)
{
    (void)state;
    float w[N], got[N];
    uint8_t b[2 * N];
    weights(w, 2);
    for (int i = 0; i < N; i++) {
        kv_half h = half_from_float(w[i]);
        b[2 * i] = (uint8_t)h, b[2 * i + 1] = (uint8_t)(h >> 8);
    }
    ggml_type_get(1)->to_f32(b, got, N);
    for (int i = 0; i < N; i++) assert_true(fabs((double)got[i] - w[i]) <= fabs(w[i]) * 0x1p-11 + 0x1p-25);
}

/* Q8_0 as ggml quantises it (d = amax / 127, q = round(x / d), d stored as
 * F16): dequantised exactly d16 * q, and within half a step of x. */
static void q8_0_round_trip(void **state)
{
    (void)state;
    float w[N], got[N];
    uint8_t b[N / 32 * 34];
    weights(w, 3);
    double want[N];
    for (int k = 0; k < N / 32; k++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(w[32 * k + i]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        kv_half h = half_from_float(d);
        b[34 * k] = (uint8_t)h, b[34 * k + 1] = (uint8_t)(h >> 8);
        for (int i = 0; i < 32; i++) {
            int8_t q = (int8_t)roundf(w[32 * k + i] * id);
            b[34 * k + 2 + i] = (uint8_t)q;
            want[32 * k + i] = (double)half_to_float(h) * q;
        }
    }
    const ggml_type_info *t = ggml_type_get(8);
    assert_true(t && t->blck == 32 && t->size == 34 && strcmp(t->name, "Q8_0") == 0);
    t->to_f32(b, got, N);
    assert_int_equal(tu_close_array("Q8_0 = d * q", want, got, N, 0, 0), 0);
    double worst = 0;
    for (int k = 0; k < N / 32; k++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(w[32 * k + i]));
        for (int i = 0; i < 32; i++) {
            double e = fabs((double)got[32 * k + i] - w[32 * k + i]);
            worst = fmax(worst, e / (amax + 1e-30));
            assert_true(e <= amax * (0.5 / 127 + 0x1p-10));
        }
    }
    printf("# Q8_0: max error %.3g of the block's amax (step 1/127 = %.3g)\n", worst, 1.0 / 127);
    char buf[128];
    assert_string_equal(ggml_readable_types(buf, sizeof buf), "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and BF16");
}

/* A safetensors buffer with one tensor of each float dtype. */
static void safetensors_dtypes(void **state)
{
    (void)state;
    float w[6] = {1.5f, -2.25f, 3.0e-3f, 65504.0f, -0.0f, 7.0f};
    char head[512];
    int hl = snprintf(head, sizeof head, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[24,36]},"
                      "\"c\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[36,48]},"
                      "\"__metadata__\":{\"format\":\"pt\"}}");
    uint8_t buf[8 + 512 + 48];
    size_t n = 0;
    for (int i = 0; i < 8; i++) buf[n++] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + n, head, (size_t)hl), n += (size_t)hl;
    memcpy(buf + n, w, sizeof w), n += sizeof w;
    for (int i = 0; i < 6; i++) {
        kv_half h = half_from_float(w[i]);
        buf[n++] = (uint8_t)h, buf[n++] = (uint8_t)(h >> 8);
    }
    for (int i = 0; i < 6; i++) {
        uint16_t h = bf16_from_float(w[i]);
        buf[n++] = (uint8_t)h, buf[n++] = (uint8_t)(h >> 8);
    }
    st_file *f;
    kv_err err = {0};
    assert_int_equal(st_parse_buffer(buf, n, "mem.safetensors", &f, &err), KV_OK);
    assert_int_equal(st_tensor_count(f), 3);
    const char *names[3] = {"a", "b", "c"};
    for (int k = 0; k < 3; k++) {
        const st_tensor *t = st_find(f, names[k]);
        assert_non_null(t);
        assert_int_equal(t->n_elems, 6);
        float got[6];
        assert_int_equal(st_tensor_read_f32(f, t, got, 6, &err), KV_OK);
        for (int i = 0; i < 6; i++)
            assert_true(fabs((double)got[i] - w[i]) <= fabs(w[i]) * (k == 2 ? 0x1p-8 : k == 1 ? 0x1p-11 : 0));
    }
    const st_tensor *c = st_find(f, "c");
    assert_true(c->n_dims == 2 && c->shape[0] == 3 && c->shape[1] == 2);
    assert_null(st_find(f, "__metadata__"));
    st_close(f);
    /* the same bytes, one short: the last tensor runs past the end */
    assert_int_equal(st_parse_buffer(buf, n - 1, "mem.safetensors", &f, &err), KV_EINPUT);
    printf("# %s\n", err.msg);
    assert_non_null(strstr(err.msg, "mem.safetensors: tensor c: data_offsets [36, 48] run past"));
}

/* An empty tensor (a 0 in its shape) is valid whatever its other dimensions
 * (found by fuzz_safetensors' oracle: [1000, 0] was refused as larger than
 * the data). */
static void safetensors_empty_shape(void **state)
{
    (void)state;
    const char head[] = "{\"e\":{\"dtype\":\"F32\",\"shape\":[1000,0,7],\"data_offsets\":[0,0]},"
                        "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}";
    uint8_t buf[8 + sizeof head + 4] = {sizeof head - 1};
    memcpy(buf + 8, head, sizeof head - 1);
    const float one = 1.0f;
    memcpy(buf + 8 + sizeof head - 1, &one, 4);
    st_file *f;
    kv_err err = {0};
    assert_int_equal(st_parse_buffer(buf, sizeof buf - 1, "mem.safetensors", &f, &err), KV_OK);
    const st_tensor *e = st_find(f, "e");
    assert_true(e && e->n_elems == 0 && e->nbytes == 0 && e->n_dims == 3 && e->shape[0] == 1000);
    st_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bf16_round_trip),
        cmocka_unit_test(f16_round_trip),
        cmocka_unit_test(q8_0_round_trip),
        cmocka_unit_test(safetensors_dtypes),
        cmocka_unit_test(safetensors_empty_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
