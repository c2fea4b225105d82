/* ggml_types: the tensor types of ggml (GGUF's tensor data), one table. */
#ifndef KV_GGML_TYPES_H
#define KV_GGML_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* src holds n / blck blocks of `size` bytes; dst[n] (n a multiple of blck). */
typedef void (*ggml_to_f32_fn)(const uint8_t *src, float *dst, uint64_t n);

typedef struct {
    const char *name;       /* "F32", "Q4_K", ... */
    uint32_t blck, size;    /* elements and bytes per block */
    ggml_to_f32_fn to_f32;  /* NULL: kvtrace does not convert the type */
} ggml_type_info;

/* The type with id t, or NULL when ggml has none. */
const ggml_type_info *ggml_type_get(uint32_t t);

/* "F32, F16, Q4_0, Q4_1, ..., Q6_K and BF16": the types with a converter, in
 * id order, into buf. */
const char *ggml_readable_types(char *buf, size_t cap);

#endif
