/* backend: where a capture's arithmetic runs. The CPU kernels are linked in
 * (FORWARD_CPU); the CUDA backend is build/libkvtrace_cuda.so, opened with
 * dlopen only for `--device cuda`, so a CPU run never maps cudart or cuBLAS
 * and kvtrace starts where CUDA is absent. Opening it turns every way of
 * not having a usable GPU (library missing, its dependencies missing, no
 * driver or "insufficient driver", no device) into one error line, code 1.
 *
 * The device-memory budget: a capture on the GPU holds the weights (in the
 * weight type), the float32 KV cache, the RoPE table, O(B·T)-free scratch of
 * O(B·(dim + ffn + V)), and with column sums a double [L][H][T] array; it is
 * compared with the device's free memory before any work. */
#ifndef KV_BACKEND_H
#define KV_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "model/cuda/kvcuda.h"
#include "model/model.h"

typedef struct {
    void *dl;               /* dlopen handle */
    const kvcuda_api *api;
    kvcuda_ctx *ctx;
    kvcuda_info info;
    char path[4096];        /* the library that was opened */
} backend_cuda;

/* Name of the library beside kvtrace, and the variable that overrides it. */
#define BACKEND_CUDA_LIB "libkvtrace_cuda.so"
#define BACKEND_CUDA_ENV "KVTRACE_CUDA_LIB"

/* Opens the library (lib: a path; NULL: $KVTRACE_CUDA_LIB, else beside the
 * running executable, else the loader's search path) and device `device`.
 * KV_EFAIL with one line saying why there is no usable GPU. */
int backend_open_cuda(backend_cuda *b, const char *lib, int device, kv_err *err);

/* Only loads the library and its table (no device needed). */
int backend_load_cuda(backend_cuda *b, const char *lib, kv_err *err);

void backend_close_cuda(backend_cuda *b);

/* Bytes of device memory a capture needs. */
typedef struct {
    uint64_t weights;   /* matrices in the weight type, vectors float32 */
    uint64_t kv_cache;  /* 2 L K T D float32 */
    uint64_t scratch;   /* activations, logits, RoPE table, statistics, cuBLAS */
    uint64_t colsum;    /* L H T doubles, when column sums are recorded */
    uint64_t total;
} backend_budget;

/* Bytes per element of a weight type. */
int backend_dtype_size(kvcuda_dtype dt);

void backend_budget_compute(const kv_model *m, int64_t T, int64_t B, kvcuda_dtype wt, bool colsum,
                            backend_budget *out);

/* KV_EFAIL, with every number, when the budget exceeds free_bytes. */
int backend_budget_check(const backend_budget *b, uint64_t free_bytes, uint64_t total_bytes, const char *device,
                         kv_err *err);

#endif
