/* ggml_types: ggml's tensor types as GGUF files use them: name, block size,
 * bytes per block, and a converter to float32 where kvtrace reads the type
 * (F32, F16, BF16; Q8_0 and Q4_1 dequantised, bit for bit as the gguf
 * package's gguf.quants.dequantize: tests/real/test_quants.py). */
#include "model/formats/ggml_types.h"

#include <stdio.h>
#include <string.h>

#include "core/half.h"

static void f32_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    memcpy(dst, src, n * sizeof(float));
}


/* Q8_0: blocks of 32 values, each an F16 scale d and 32 int8 q: x = d * q. */
static void q8_0_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = src + 34 * b;
        float d = half_to_float((kv_half)(blk[0] | (blk[1] << 8)));
        for (int i = 0; i < 32; i++) dst[32 * b + (uint64_t)i] = d * (float)(int8_t)blk[2 + i];
    }
}

/* Q4_1: blocks of 32 values, each an F16 scale d, an F16 minimum m and 16
 * bytes of 4-bit codes (value j in the low nibble of byte j, value j + 16
 * in its high nibble): x = d * q + m, the product rounded before the sum. */
static void q4_1_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = src + 20 * b;
        const float d = half_to_float((kv_half)(blk[0] | (blk[1] << 8)));
        const float m = half_to_float((kv_half)(blk[2] | (blk[3] << 8)));
        float *y = dst + 32 * b;
        for (int j = 0; j < 16; j++) {
            const float lo = d * (float)(blk[4 + j] & 0x0F), hi = d * (float)(blk[4 + j] >> 4);
            y[j] = lo + m;
            y[j + 16] = hi + m;
        }
    }
}

/* ggml's types: block size in elements, bytes per block, and a converter
 * where kvtrace reads the type. Unnamed ids are ones ggml removed. */
static const ggml_type_info GGML_TYPES[] = {
    [0] = {"F32", 1, 4, f32_to_f32},
    [1] = {"F16", 1, 2, half_le_bytes_to_float},
    [2] = {"Q4_0", 32, 18, NULL},      [3] = {"Q4_1", 32, 20, q4_1_to_f32},
    [6] = {"Q5_0", 32, 22, NULL},      [7] = {"Q5_1", 32, 24, NULL},
    [8] = {"Q8_0", 32, 34, q8_0_to_f32},
    [9] = {"Q8_1", 32, 36, NULL},
    [10] = {"Q2_K", 256, 84, NULL},    [11] = {"Q3_K", 256, 110, NULL},
    [12] = {"Q4_K", 256, 144, NULL},   [13] = {"Q5_K", 256, 176, NULL},
    [14] = {"Q6_K", 256, 210, NULL},   [15] = {"Q8_K", 256, 292, NULL},
    [16] = {"IQ2_XXS", 256, 66, NULL}, [17] = {"IQ2_XS", 256, 74, NULL},
    [18] = {"IQ3_XXS", 256, 98, NULL}, [19] = {"IQ1_S", 256, 50, NULL},
    [20] = {"IQ4_NL", 32, 18, NULL},   [21] = {"IQ3_S", 256, 110, NULL},
    [22] = {"IQ2_S", 256, 82, NULL},   [23] = {"IQ4_XS", 256, 136, NULL},
    [24] = {"I8", 1, 1, NULL},         [25] = {"I16", 1, 2, NULL},
    [26] = {"I32", 1, 4, NULL},        [27] = {"I64", 1, 8, NULL},
    [28] = {"F64", 1, 8, NULL},        [29] = {"IQ1_M", 256, 56, NULL},
    [30] = {"BF16", 1, 2, bf16_le_bytes_to_float},
    [34] = {"TQ1_0", 256, 54, NULL},
    [35] = {"TQ2_0", 256, 66, NULL},   [39] = {"MXFP4", 32, 17, NULL},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

const ggml_type_info *ggml_type_get(uint32_t t)
{
    return t < N_GGML_TYPES && GGML_TYPES[t].name ? &GGML_TYPES[t] : NULL;
}

/* "F32, F16, Q8_0 and BF16": the types with a converter. */
const char *ggml_readable_types(char *buf, size_t cap)
{
    size_t n = 0, k = 0, total = 0;
    for (size_t t = 0; t < N_GGML_TYPES; t++) total += GGML_TYPES[t].to_f32 != NULL;
    buf[0] = '\0';
    for (size_t t = 0; t < N_GGML_TYPES && n < cap; t++) {
        if (!GGML_TYPES[t].to_f32) continue;
        const char *sep = k == 0 ? "" : k + 1 == total ? " and " : ", ";
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", sep, GGML_TYPES[t].name);
        k++;
    }
    return buf;
}
