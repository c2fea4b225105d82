#include "half.h"

#include <string.h>

#include "core/vectorize.h"

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float half_to_float(kv_half h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;

    if (exp == 0x1f) /* inf or NaN: keep the payload */
        return bits_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float mag = (float)man * (1.0f / 16777216.0f);
        return sign ? -mag : mag;
    }
    return bits_float(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

kv_half half_from_float(float f)
{
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;

    if (abs >= 0x7f800000u) { /* inf or NaN (quiet it, keep the top payload bits) */
        uint32_t man = abs > 0x7f800000u ? (0x200u | ((abs >> 13) & 0x3ffu)) : 0;
        return (kv_half)(sign | 0x7c00u | man);
    }
    if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (kv_half)(sign | 0x7c00u);
    if (abs < 0x38800000u) {
        /* result is subnormal or zero: value / 2^-24, rounded to nearest even */
        if (abs < 0x33000000u) /* below half of the smallest subnormal: +-0 */
            return (kv_half)sign;
        uint32_t e = abs >> 23;            /* biased float exponent, 102..112 */
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;          /* 14..24: bring to units of 2^-24 */
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1u))) q++;
        return (kv_half)(sign | q);
    }
    /* normal: rebias exponent, round the 13 dropped mantissa bits to nearest even */
    uint32_t r = abs - 0x38000000u;        /* exponent 127 -> 15 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++; /* carry may bump exponent: correct */
    return (kv_half)(sign | q);
}

/* half_to_float without branches, so that the loop vectorises (a 16-bit matrix's tiles are widened by
 * it in every product: docs/capture.md): the same bits for every input (tests/unit/test_half.c checks
 * all 65,536). The exponent and mantissa move to float32's position; a normal number rebiases its
 * exponent, inf and NaN take float32's all-ones exponent (the payload kept), a subnormal or zero is
 * man·2^-24, exact in float32. */
KV_VECTOR_CLONES
void half_to_float_array(const kv_half *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t h = src[i], em = (h & 0x7fffu) << 13, e = em & 0x0f800000u;
        const uint32_t sub = float_bits((float)(h & 0x3ffu) * (1.0f / 16777216.0f));
        const uint32_t mag = e == 0x0f800000u ? em | 0x7f800000u : e == 0 ? sub : em + ((127u - 15u) << 23);
        dst[i] = bits_float(mag | (h & 0x8000u) << 16);
    }
}

void half_from_float_array(const float *src, kv_half *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = half_from_float(src[i]);
}

float bf16_to_float(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

uint16_t bf16_from_float(float f)
{
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                 /* nearest even */
}

void half_le_bytes_to_float(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) dst[i] = half_to_float((kv_half)(src[2 * i] | (src[2 * i + 1] << 8)));
}

void bf16_le_bytes_to_float(const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) dst[i] = bf16_to_float((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
}
