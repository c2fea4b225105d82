/* finite: where a float array first holds a non-finite value (inf or NaN), for
 * the checks that stop a run whose finite inputs overflowed float32 (the model
 * walk once per chunk and layer, the replay once per layer and head:
 * docs/reliability.md#numbers-that-overflow-finite-inputs-non-finite-arithmetic).
 * The test is on the exponent bits, an integer OR that compilers vectorise, so
 * the common case (all finite) costs one pass. */
#ifndef KV_FINITE_H
#define KV_FINITE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Index of the first inf or NaN of a[0..n), or -1 when every value is finite. */
static inline int64_t kv_first_nonfinite(const float *a, int64_t n)
{
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, a + i, sizeof u);
        any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    if (!any) return -1;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, a + i, sizeof u);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return -1;
}

#endif
