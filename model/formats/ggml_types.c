/* ggml_types: ggml's tensor types as GGUF files use them: name, block size,
 * bytes per block, and a converter to float32 where kvtrace reads the type
 * (F32, F16, BF16; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and
 * Q6_K dequantised, bit for bit as the gguf package's gguf.quants.dequantize:
 * tests/real/test_quants.py). Each converter computes its float32 products
 * and sums in gguf-py's order, one rounding each (the build has
 * -ffp-contract=off: no FMA). Every product of an F16 scale and small
 * integers is exact in float32 (24 significant bits at most), so the one
 * rounding that matters is the final sum with the minimum. Not converted:
 * Q8_1, Q8_K, the IQ*, TQ* and MXFP4 types, F64 and the integer types. */
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

/* Q4_0: blocks of 32 values, each an F16 scale d and 16 bytes of 4-bit codes
 * (value j in the low nibble of byte j, value j + 16 in its high nibble):
 * x = d * (q - 8). */
static void q4_0_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = src + 18 * b;
        const float d = half_le_at(blk);
        float *y = dst + 32 * b;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((blk[2 + j] & 0x0F) - 8);
            y[j + 16] = d * (float)((blk[2 + j] >> 4) - 8);
        }
    }
}

/* Q5_0: blocks of 32 values, each an F16 scale d, a little-endian uint32 qh
 * (bit j: the fifth bit of value j) and 16 bytes of low nibbles laid out as
 * Q4_0's: x = d * (q - 16). */
static void q5_0_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = src + 22 * b;
        const float d = half_le_at(blk);
        const uint32_t qh = (uint32_t)blk[2] | (uint32_t)blk[3] << 8 | (uint32_t)blk[4] << 16 |
                            (uint32_t)blk[5] << 24;
        const uint8_t *qs = blk + 6;
        float *y = dst + 32 * b;
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
            const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = d * (float)(lo - 16);
            y[j + 16] = d * (float)(hi - 16);
        }
    }
}

/* Q5_1: blocks of 32 values, each an F16 scale d, an F16 minimum m, qh and
 * qs as Q5_0's: x = d * q + m, the product rounded before the sum. */
static void q5_1_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = src + 24 * b;
        const float d = half_le_at(blk), m = half_le_at(blk + 2);
        const uint32_t qh = (uint32_t)blk[4] | (uint32_t)blk[5] << 8 | (uint32_t)blk[6] << 16 |
                            (uint32_t)blk[7] << 24;
        const uint8_t *qs = blk + 8;
        float *y = dst + 32 * b;
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
            const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            const float plo = d * (float)lo, phi = d * (float)hi;
            y[j] = plo + m;
            y[j + 16] = phi + m;
        }
    }
}

/* Q2_K: blocks of 256 values in 16 groups of 16: scales[16] (group g: scale
 * in the low nibble of scales[g], minimum in its high nibble), qs[64] (2-bit
 * codes: value 128 h + 32 s + l, l < 32, in bits 2 s of qs[32 h + l]), then
 * F16 d and F16 dmin: x = (d * sc) * q - (dmin * m), each product rounded. */
static void q2_k_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk = src + 84 * b, *sc = blk, *qs = blk + 16;
        const float d = half_le_at(blk + 80), dmin = half_le_at(blk + 82);
        float *y = dst + 256 * b;
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)(sc[g] & 0x0F), ml = dmin * (float)(sc[g] >> 4);
            const uint8_t *q = qs + 32 * (g / 8) + 16 * (g % 2);
            const int shift = 2 * ((g % 8) / 2);
            for (int l = 0; l < 16; l++) {
                const float p = dl * (float)((q[l] >> shift) & 3);
                y[16 * g + l] = p - ml;
            }
        }
    }
}

/* Q3_K: blocks of 256 values in 16 groups of 16: hmask[32] (bit i of
 * hmask[l]: the high bit of value 32 i + l), qs[64] (low 2 bits, laid out as
 * Q2_K's), scales[12] (6-bit scales: group g's low 4 bits in nibble g / 8 of
 * scales[g % 8], its high 2 bits in bits 2 (g / 4) of scales[8 + g % 4]),
 * F16 d: x = (d * (sc - 32)) * (q2 - (high bit ? 0 : 4)). */
static void q3_k_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk = src + 110 * b, *hm = blk, *qs = blk + 32, *sc = blk + 96;
        const float d = half_le_at(blk + 108);
        float *y = dst + 256 * b;
        for (int g = 0; g < 16; g++) {
            const int s = ((sc[g % 8] >> (4 * (g / 8))) & 0x0F) | ((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4;
            const float dl = d * (float)(s - 32);
            const uint8_t *q = qs + 32 * (g / 8) + 16 * (g % 2);
            const int shift = 2 * ((g % 8) / 2), l0 = 16 * (g % 2), bit = g / 2;
            for (int l = 0; l < 16; l++) {
                const int v = ((q[l] >> shift) & 3) - (((hm[l0 + l] >> bit) & 1) ? 0 : 4);
                y[16 * g + l] = dl * (float)v;
            }
        }
    }
}

/* The 6-bit scale and minimum of group j (of 8) in Q4_K's and Q5_K's
 * scales[12] (ggml's get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* Q4_K and Q5_K: blocks of `size` bytes holding 256 values in 8 groups of 32: F16 d, F16 dmin,
 * scales[12] (scale_min_k4), then (Q5_K: qh_at >= 0) qh[32] giving each value's fifth bit, then
 * qs[128]: x = (d * sc) * q - (dmin * m), each product rounded. */
static void k_groups_to_f32(const uint8_t *src, uint32_t size, int qh_at, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk = src + (uint64_t)size * b, *scales = blk + 4;
        const uint8_t *qh = qh_at >= 0 ? blk + qh_at : NULL, *qs = blk + (qh ? 48 : 16);
        const float d = half_le_at(blk), dmin = half_le_at(blk + 2);
        float *y = dst + 256 * b;
        for (int g = 0; g < 8; g++) {
            int sc, m;
            scale_min_k4(g, scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = qs + 32 * (g / 2);
            const int shift = 4 * (g % 2);
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0x0F) | (qh ? ((qh[l] >> g) & 1) << 4 : 0);
                const float p = d1 * (float)v;
                y[32 * g + l] = p - m1;
            }
        }
    }
}

/* Q4_K: blocks of 256 values in 8 groups of 32: F16 d, F16 dmin, scales[12]
 * (6-bit scale sc and minimum m per group, scale_min_k4), qs[128] (group g's
 * value l in nibble g % 2 of qs[32 (g / 2) + l]):
 * x = (d * sc) * q - (dmin * m), each product rounded. */
static void q4_k_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    k_groups_to_f32(src, 144, -1, dst, n);
}

/* Q5_K: blocks of 256 values in 8 groups of 32: F16 d, F16 dmin, scales[12]
 * as Q4_K's, qh[32] (bit g of qh[l]: the fifth bit of group g's value l),
 * qs[128] as Q4_K's: x = (d * sc) * q - (dmin * m), each product rounded. */
static void q5_k_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    k_groups_to_f32(src, 176, 16, dst, n);
}

/* Q6_K: blocks of 256 values in 16 groups of 16: ql[128] (low 4 bits: value
 * 128 h + 64 s + l, l < 64, in nibble s of ql[64 h + l]), qh[64] (high 2
 * bits: value 128 h + 32 t + l, l < 32, in bits 2 t of qh[32 h + l]), int8
 * scales[16] (one per group), F16 d: x = (d * sc) * (q - 32). */
static void q6_k_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t b = 0; b < n / 256; b++) {
        const uint8_t *blk = src + 210 * b, *ql = blk, *qh = blk + 128;
        const int8_t *sc = (const int8_t *)(blk + 192);
        const float d = half_le_at(blk + 208);
        float *y = dst + 256 * b;
        for (int g = 0; g < 16; g++) {
            const int h = g / 8, t = (g % 8) / 2, l0 = 16 * (g % 2);
            const float dl = d * (float)sc[g];
            const uint8_t *lo = ql + 64 * h + 32 * (t % 2) + l0, *hi = qh + 32 * h + l0;
            const int lshift = 4 * (t / 2), hshift = 2 * t;
            for (int l = 0; l < 16; l++) {
                const int v = (((lo[l] >> lshift) & 0x0F) | ((hi[l] >> hshift) & 3) << 4) - 32;
                y[16 * g + l] = dl * (float)v;
            }
        }
    }
}

/* ggml's types: block size in elements, bytes per block, and a converter
 * where kvtrace reads the type. Unnamed ids are ones ggml removed. */
static const ggml_type_info GGML_TYPES[] = {
    [0] = {"F32", 1, 4, f32_to_f32},
    [1] = {"F16", 1, 2, half_le_bytes_to_float},
    [2] = {"Q4_0", 32, 18, q4_0_to_f32},        [3] = {"Q4_1", 32, 20, q4_1_to_f32},
    [6] = {"Q5_0", 32, 22, q5_0_to_f32},        [7] = {"Q5_1", 32, 24, q5_1_to_f32},
    [8] = {"Q8_0", 32, 34, q8_0_to_f32},
    [9] = {"Q8_1", 32, 36, NULL},
    [10] = {"Q2_K", 256, 84, q2_k_to_f32},      [11] = {"Q3_K", 256, 110, q3_k_to_f32},
    [12] = {"Q4_K", 256, 144, q4_k_to_f32},     [13] = {"Q5_K", 256, 176, q5_k_to_f32},
    [14] = {"Q6_K", 256, 210, q6_k_to_f32},     [15] = {"Q8_K", 256, 292, NULL},
    [16] = {"IQ2_XXS", 256, 66, NULL},          [17] = {"IQ2_XS", 256, 74, NULL},
    [18] = {"IQ3_XXS", 256, 98, NULL},          [19] = {"IQ1_S", 256, 50, NULL},
    [20] = {"IQ4_NL", 32, 18, NULL},            [21] = {"IQ3_S", 256, 110, NULL},
    [22] = {"IQ2_S", 256, 82, NULL},            [23] = {"IQ4_XS", 256, 136, NULL},
    [24] = {"I8", 1, 1, NULL},                  [25] = {"I16", 1, 2, NULL},
    [26] = {"I32", 1, 4, NULL},                 [27] = {"I64", 1, 8, NULL},
    [28] = {"F64", 1, 8, NULL},                 [29] = {"IQ1_M", 256, 56, NULL},
    [30] = {"BF16", 1, 2, bf16_le_bytes_to_float},
    [34] = {"TQ1_0", 256, 54, NULL},
    [35] = {"TQ2_0", 256, 66, NULL},            [39] = {"MXFP4", 32, 17, NULL},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

const ggml_type_info *ggml_type_get(uint32_t t)
{
    return t < N_GGML_TYPES && GGML_TYPES[t].name ? &GGML_TYPES[t] : NULL;
}

/* "F32, F16, Q4_0, ..., Q6_K and BF16": the types with a converter, in id order. */
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
