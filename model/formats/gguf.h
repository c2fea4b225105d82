/* gguf: a bounds-checked reader for GGUF v2/v3 files (llama.cpp's format).
 *
 * Layout (little-endian): "GGUF", uint32 version, uint64 tensor_count,
 * uint64 kv_count; kv_count KVs (string key, uint32 value type, value);
 * tensor_count tensor infos (string name, uint32 n_dims, uint64 ne[n_dims]
 * with ne[0] the contiguous dimension, uint32 ggml type, uint64 offset into
 * the data section); the data section starts at the next multiple of
 * general.alignment (default 32) after the header. A string is a uint64
 * length and that many bytes; an array a uint32 element type, a uint64
 * count and the elements.
 *
 * The parser never trusts a length: every count, length, offset and size is
 * checked against the bytes that remain before it is used, and nothing is
 * allocated from a count the file could not hold. Every error is KV_EINPUT
 * (KV_EFAIL for I/O and memory) with one line that starts with the file name.
 *
 * Tensor data is read through gguf_tensor_read_f32, which converts the types
 * in the type table that have a converter (F32, F16, BF16, and Q8_0, which
 * is dequantised) and names the others. */
#ifndef KV_GGUF_H
#define KV_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"

enum gguf_value_type {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_N_VALUE_TYPES
};

/* The ggml tensor types kvtrace converts (the table in gguf.c names the rest). */
enum { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q8_0 = 8, GGML_TYPE_BF16 = 30 };

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_file gguf_file;  /* opaque */
typedef struct gguf_kv gguf_kv;      /* opaque: one metadata entry */

typedef struct {
    const char *name;              /* NUL-terminated */
    uint32_t n_dims;               /* 1..GGUF_MAX_DIMS */
    uint64_t ne[GGUF_MAX_DIMS];    /* ne[0] contiguous; dims past n_dims are 1 */
    uint32_t type;                 /* ggml type */
    uint64_t n_elems;              /* product of ne */
    uint64_t offset;               /* of the data, from the start of the file */
    uint64_t nbytes;               /* size of the data */
    const uint8_t *data;           /* [nbytes] inside the file image (any alignment) */
} gguf_tensor;

/* Maps `path` read-only and parses it. */
int gguf_open(const char *path, gguf_file **out, kv_err *err);

/* Parses `size` bytes at `data` (borrowed: they must outlive the gguf_file).
 * `where` names the source in messages. */
int gguf_parse_buffer(const uint8_t *data, size_t size, const char *where, gguf_file **out,
                      kv_err *err);

void gguf_close(gguf_file *g);

const char *gguf_where(const gguf_file *g);
uint32_t gguf_version(const gguf_file *g);

/* ---- metadata ------------------------------------------------------- */

int64_t gguf_kv_count(const gguf_file *g);
const gguf_kv *gguf_kv_at(const gguf_file *g, int64_t i);   /* file order */
const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key);  /* NULL if absent */
const char *gguf_kv_key(const gguf_kv *kv);
uint32_t gguf_kv_type(const gguf_kv *kv);
uint32_t gguf_kv_elem_type(const gguf_kv *kv);   /* arrays: element type; else = type */
uint64_t gguf_kv_count_elems(const gguf_kv *kv); /* arrays: count; scalars: 1 */

/* The raw bytes of a scalar value, or of an array's first element (a string
 * array's elements: gguf_array_str). Checked to lie inside the file. */
const uint8_t *gguf_kv_data(const gguf_kv *kv);
/* A string value: a NUL-terminated copy and its length (which counts any NUL inside). */
const char *gguf_kv_str(const gguf_kv *kv, size_t *len);

/* The integer of a scalar entry in [lo, hi] (lo 0 or negative) as its sign
 * and magnitude; KV_EINPUT when it is no integer or "out of range for
 * `range`". */
int gguf_kv_int(const gguf_file *g, const gguf_kv *kv, int64_t lo, uint64_t hi, const char *range,
                bool *neg, uint64_t *mag, kv_err *err);
/* KV_EINPUT: "FILE: key 'KEY' is TYPE, expected `expected`". */
int gguf_kv_type_error(const gguf_file *g, const gguf_kv *kv, const char *expected, kv_err *err);

/* ---- values (gguf_value.c) ------------------------------------------- */

/* "uint32", "string", ... ("?" for an unknown code). */
const char *gguf_type_name(uint32_t value_type);
/* Bytes of one scalar of that type (0 for string, array and unknown codes). */
uint32_t gguf_value_size(uint32_t value_type);
/* The little-endian unsigned integer of `nbytes` (<= 8) bytes at p. */
uint64_t gguf_read_le(const uint8_t *p, uint32_t nbytes);
/* The integer at p of value type t as sign and magnitude; false if t is no integer type. */
bool gguf_value_int(const uint8_t *p, uint32_t t, bool *neg, uint64_t *mag);
/* The number at p of value type t (float or integer) as a finite float32; false if not one. */
bool gguf_value_float(const uint8_t *p, uint32_t t, float *out);

/* ---- typed getters (gguf_meta.c) ------------------------------------- */

/* Typed getters. With `required` false, an absent key returns KV_OK and
 * leaves *out alone (set the default first). Integer getters accept any
 * integer type whose value fits; gguf_get_f32 accepts float32 and float64
 * (and finite values only). Errors name the file, the key and the problem. */
int gguf_get_u32(const gguf_file *g, const char *key, bool required, uint32_t *out, kv_err *err);
int gguf_get_i32(const gguf_file *g, const char *key, bool required, int32_t *out, kv_err *err);
int gguf_get_u64(const gguf_file *g, const char *key, bool required, uint64_t *out, kv_err *err);
int gguf_get_f32(const gguf_file *g, const char *key, bool required, float *out, kv_err *err);
int gguf_get_bool(const gguf_file *g, const char *key, bool required, bool *out, kv_err *err);
/* *out points into the gguf_file (NUL-terminated; a string holding a NUL is an error). */
int gguf_get_str(const gguf_file *g, const char *key, bool required, const char **out,
                 kv_err *err);

/* Array `key`: *kv (NULL when absent and not required) and its length.
 * `elem_type` GGUF_N_VALUE_TYPES accepts any element type. */
int gguf_get_array(const gguf_file *g, const char *key, bool required, uint32_t elem_type,
                   const gguf_kv **kv, uint64_t *n, kv_err *err);

/* The `n` elements of a numeric array (n must equal its count), converted:
 * floats from any numeric type; int32s from integer types with a range check. */
int gguf_array_f32(const gguf_file *g, const gguf_kv *kv, float *dst, uint64_t n, kv_err *err);
int gguf_array_i32(const gguf_file *g, const gguf_kv *kv, int32_t *dst, uint64_t n, kv_err *err);

/* Element i of a string array: its bytes (not NUL-terminated) and length. */
const char *gguf_array_str(const gguf_file *g, const gguf_kv *kv, uint64_t i, size_t *len);

/* ---- tensors -------------------------------------------------------- */

int64_t gguf_tensor_count(const gguf_file *g);
const gguf_tensor *gguf_tensor_at(const gguf_file *g, int64_t i);  /* file order */
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);  /* NULL if absent */

/* "F32", "Q4_K", ... ("?" for an unknown code). */
const char *gguf_ggml_type_name(uint32_t ggml_type);

/* KV_OK if gguf_tensor_read_f32 converts t's type; else KV_EINPUT naming it. */
int gguf_tensor_readable(const gguf_file *g, const gguf_tensor *t, kv_err *err);

/* Converts the whole tensor into dst[n] float32 (n must equal n_elems).
 * KV_EINPUT naming the tensor for a type kvtrace cannot convert, and for a
 * value that is NaN or infinite. */
int gguf_tensor_read_f32(const gguf_file *g, const gguf_tensor *t, float *dst, uint64_t n,
                         kv_err *err);

#endif
