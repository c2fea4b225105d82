/* weights: weight matrices as the host holds them: float32 (in the file's
 * mapping where it is aligned), 16 bits, or the file's ggml blocks.
 *
 * A model's matrices (model.h: model_mat) are float32, IEEE half (F16) or
 * bfloat16 (BF16), one type per model (kv_model.wtype), or (MODEL_W_GGML)
 * each in its GGUF file's own ggml type, quantised blocks included
 * (weights_ggml: Q4_K, Q6_K, Q8_0, ... as model/formats/ggml_types.c
 * decodes them). The 16-bit and ggml ones are widened to float32 a tile at
 * a time inside the products (backend_cpu.c), never as a whole: memory
 * holds 2 bytes per weight, or the file's bytes. Rounding float32 to 16 bits is to nearest
 * even (core/half.h). */
#ifndef KV_WEIGHTS_H
#define KV_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "model/model.h"

/* A matrix kept in a ggml type (MODEL_W_GGML): its blocks, row-major, each
 * row a whole number of blocks (GGUF's rule), and the type's ggml id;
 * mapped: the blocks lie in a file's read-only mapping (a GGUF file's), so
 * their pages may be dropped from memory and are read again from the file
 * if touched (kv_filemap_drop); false for blocks in allocated memory. */
typedef struct {
    const uint8_t *data;
    uint32_t type;
    bool mapped;
} weights_ggml;

/* Bytes of one weight of type t (4 or 2; 0 for MODEL_W_GGML, whose bytes
 * are the matrix's own: weights_bytes). */
size_t weights_size(model_wtype t);

/* "f32", "f16", "bf16" (the --weights words), "the file's ggml types". */
const char *weights_name(model_wtype t);

/* Elements [i0, i0 + n) of matrix w (type t) as float32 into dst[n]; for
 * MODEL_W_GGML i0 and n are whole blocks (whole rows are). */
void weights_widen(const model_mat *w, model_wtype t, size_t i0, size_t n, float *dst);

/* src[n] rounded to the 16-bit type t into dst[n]. */
void weights_narrow(const float *src, model_wtype t, uint16_t *dst, size_t n);

/* Index of the first inf or NaN among n weights of type t (not MODEL_W_GGML) at w; -1 if none. */
int64_t weights_first_nonfinite(const void *w, model_wtype t, size_t n);

/* A file's tensor of n values as a matrix of m (type m->wtype, not MODEL_W_GGML), for the loaders: where
 * the file holds it in that type (same_type) at an address aligned to the type's size, the values at
 * `data` in place (*in_place set; the file must then outlive m; its pages are the weights, no second
 * copy), after a check that none is inf or NaN (KV_EINPUT naming `where`, `name` and the element); else
 * read(file, tensor) as float32 into an allocation of m (which read checks), rounded for a 16-bit type. */
typedef int (*weights_read_fn)(const void *file, const void *tensor, float *dst, uint64_t n, kv_err *err);
int weights_from_file(kv_model *m, const char *where, const char *name, const void *data, bool same_type, size_t n,
                      weights_read_fn read, const void *file, const void *tensor, model_mat **out, bool *in_place,
                      kv_err *err);

/* Rounds every float32 matrix of m to the 16-bit type t, one tensor at a
 * time (the float32 copy is released as its 16-bit one is made): for
 * loaders that read float32. Sets m->wtype. */
int weights_narrow_model(kv_model *m, model_wtype t, kv_err *err);

/* Every matrix of a MODEL_W_GGML model widened to float32 (the blocks stay
 * allocated: for models that own them, random:NAME:TYPE). Sets m->wtype. */
int weights_widen_model(kv_model *m, kv_err *err);

/* Bytes of the model's matrices as held (tied output counted once). */
double weights_bytes(const kv_model *m);

/* A GGUF tensor of n values (data, ggml type `type`) as a weights_ggml of
 * m, in place (the file must outlive m): refused (KV_EINPUT naming `where`
 * and `name`) when kvtrace has no decoder for the type, or when a decoded
 * value is not finite (checked once, a tile at a time). */
int weights_ggml_keep(kv_model *m, const char *where, const char *name, const void *data, uint32_t type, size_t n,
                      model_mat **out, kv_err *err);

#endif
