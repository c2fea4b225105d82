/* IEEE 754 binary16 ("half") storage type and conversions.
 *
 * HDF5 1.10 has no predefined half type, so traces store f16 through a type
 * we define (see h5util_half_type) and we convert in our own code here:
 * round-to-nearest-even, subnormals, infinities and NaN all handled.
 */
#ifndef KV_HALF_H
#define KV_HALF_H

#include <stddef.h>
#include <stdint.h>

typedef uint16_t kv_half;  /* raw bits: 1 sign, 5 exponent (bias 15), 10 mantissa */

float half_to_float(kv_half h);
kv_half half_from_float(float f);

/* bfloat16 (the top 16 bits of a float32): exact to float, rounded to
 * nearest even from float (NaN stays NaN). */
float bf16_to_float(uint16_t b);
uint16_t bf16_from_float(float f);

/* n little-endian half / bfloat16 values at src (any alignment) into dst[n]
 * (the converter signature of the GGUF and safetensors type tables). */
void half_le_bytes_to_float(const uint8_t *src, float *dst, uint64_t n);
void bf16_le_bytes_to_float(const uint8_t *src, float *dst, uint64_t n);

/* The one little-endian half at p (a ggml block's scale). */
static inline float half_le_at(const uint8_t *p)
{
    return half_to_float((kv_half)(p[0] | (p[1] << 8)));
}

void half_to_float_array(const kv_half *src, float *dst, size_t n);
void half_from_float_array(const float *src, kv_half *dst, size_t n);

#endif
