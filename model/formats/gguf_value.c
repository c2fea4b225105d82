/* gguf_value: GGUF's value types (gguf.h): their names and sizes, and how
 * the bytes of a scalar decode. Below both the parser (gguf.c), which sizes
 * values while it walks the file and reads general.alignment, and the typed
 * getters (gguf_meta.c). */
#include "model/formats/gguf.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    uint32_t size; /* bytes of one scalar; 0: string/array */
} VALUE_TYPES[GGUF_N_VALUE_TYPES] = {
    {"uint8", 1}, {"int8", 1},    {"uint16", 2}, {"int16", 2},   {"uint32", 4},
    {"int32", 4}, {"float32", 4}, {"bool", 1},   {"string", 0},  {"array", 0},
    {"uint64", 8}, {"int64", 8},  {"float64", 8},
};

const char *gguf_type_name(uint32_t t)
{
    return t < GGUF_N_VALUE_TYPES ? VALUE_TYPES[t].name : "?";
}

uint32_t gguf_value_size(uint32_t t)
{
    return t < GGUF_N_VALUE_TYPES ? VALUE_TYPES[t].size : 0;
}

uint64_t gguf_read_le(const uint8_t *p, uint32_t n)
{
    uint64_t v = 0;
    for (uint32_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

bool gguf_value_int(const uint8_t *p, uint32_t t, bool *neg, uint64_t *mag)
{
    bool is_signed = t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
    if (!is_signed && t != GGUF_UINT8 && t != GGUF_UINT16 && t != GGUF_UINT32 && t != GGUF_UINT64)
        return false;
    uint32_t n = gguf_value_size(t);
    uint64_t u = gguf_read_le(p, n);
    if (is_signed && n < 8 && ((u >> (8 * n - 1)) & 1)) u |= ~0ull << (8 * n);
    *neg = is_signed && (u >> 63);
    *mag = *neg ? ~u + 1 : u;
    return true;
}

bool gguf_value_float(const uint8_t *p, uint32_t t, float *out)
{
    double d;
    if (t == GGUF_FLOAT32) {
        uint32_t b = (uint32_t)gguf_read_le(p, 4);
        float f;
        memcpy(&f, &b, sizeof f);
        d = f;
    } else if (t == GGUF_FLOAT64) {
        uint64_t b = gguf_read_le(p, 8);
        memcpy(&d, &b, sizeof d);
    } else {
        bool neg;
        uint64_t mag;
        if (!gguf_value_int(p, t, &neg, &mag)) return false;
        d = neg ? -(double)mag : (double)mag;
    }
    if (!isfinite(d) || fabs(d) > FLT_MAX) return false;
    *out = (float)d;
    return true;
}
