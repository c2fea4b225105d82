/* safetensors: a bounds-checked reader for Hugging Face's tensor files.
 *
 * Layout: uint64 (little-endian) N, then N bytes of a UTF-8 JSON object,
 * then the data section. The object maps each tensor name to
 * {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}
 * (offsets relative to the data section) and may hold "__metadata__", a map
 * of strings. Arrays are row-major, little-endian: a torch Linear weight is
 * [out][in], model.h's W[out][in].
 *
 * The header is parsed with jansson; every length, shape product, offset
 * and size is checked against the file before it is used (begin <= end <=
 * data size, end - begin = elements x dtype size, no two tensors overlap).
 * Errors are KV_EINPUT (KV_EFAIL for I/O and memory), one line starting
 * with the file name. Data is read through st_tensor_read_f32, which
 * converts F32, F16 and BF16 and names the other dtypes. */
#ifndef KV_SAFETENSORS_H
#define KV_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"

#define ST_MAX_DIMS 8

typedef struct {
    const char *name;             /* NUL-terminated */
    int dtype;                    /* index into the dtype table (st_dtype_name) */
    int n_dims;                   /* 0 (a scalar) .. ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS];   /* shape[n_dims - 1] contiguous */
    uint64_t n_elems;             /* product of shape */
    uint64_t offset;              /* of the data, from the start of the file */
    uint64_t nbytes;
    const uint8_t *data;          /* [nbytes] inside the file image (any alignment) */
} st_tensor;

typedef struct st_file st_file; /* opaque */

/* Maps `path` read-only and parses it. */
int st_open(const char *path, st_file **out, kv_err *err);

/* Parses `size` bytes at `data` (borrowed: they must outlive the st_file);
 * `where` names the source in messages. */
int st_parse_buffer(const uint8_t *data, size_t size, const char *where, st_file **out,
                    kv_err *err);

void st_close(st_file *f);

const char *st_where(const st_file *f);
int64_t st_tensor_count(const st_file *f);
const st_tensor *st_tensor_at(const st_file *f, int64_t i);      /* sorted by name */
const st_tensor *st_find(const st_file *f, const char *name);    /* NULL if absent */

/* "BF16", "I64", ... */
const char *st_dtype_name(int dtype);

/* Bytes of one element of the dtype. */
uint32_t st_dtype_size(int dtype);

/* KV_OK if st_tensor_read_f32 converts t's dtype; else KV_EINPUT naming it. */
int st_tensor_readable(const st_file *f, const st_tensor *t, kv_err *err);

/* The whole tensor as float32 into dst[n] (n must equal n_elems). KV_EINPUT
 * naming the tensor for a dtype kvtrace does not convert, and for a value
 * that is NaN or infinite. */
int st_tensor_read_f32(const st_file *f, const st_tensor *t, float *dst, uint64_t n,
                       kv_err *err);

#endif
