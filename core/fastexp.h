/* fastexp: expf that compilers vectorise (plain arithmetic, no libm call).
 *
 * exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln2/2, exp(r) by its
 * degree-6 Taylor polynomial: relative error below 3e-7 (a few ulp) over
 * the whole range; inputs below -87.3 return 0 (exp underflows there anyway),
 * inputs above 88 are clamped to exp(88), NaN returns NaN (the clamp sends it
 * to the low end first, so the exponent arithmetic never converts a NaN to an
 * integer: that is undefined behaviour). Used for softmax weights, where inputs are
 * scores minus the row maximum (<= 0). tests/unit/test_fastexp.c checks the
 * bound against exp() in double. */
#ifndef KV_FASTEXP_H
#define KV_FASTEXP_H

#include <stdint.h>
#include <string.h>

static inline float kv_expf(float x)
{
    const float hi = 88.0f, lo = -87.3f, x0 = x;
    float underflow = x < lo ? 0.0f : 1.0f;
    x = x > hi ? hi : x >= lo ? x : lo; /* NaN fails both tests: lo */
    /* round to nearest with the 1.5*2^23 trick: vectorises, unlike rintf */
    const float shifter = 12582912.0f;
    float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = x - n * 0.693145751953125f;   /* ln2 split in a high part exact in float */
    r = r - n * 1.42860682030941723212e-6f; /* and the low remainder */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    float y = p * scale * underflow;
    return x0 == x0 ? y : x0; /* NaN in, NaN out */
}

#endif
