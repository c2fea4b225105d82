/* cuda_lib: opening the CUDA library build/libkvtrace_cuda.so (its ABI:
 * model/cuda/kvcuda.h) with dlopen, only for `--device cuda`, so a CPU run
 * never maps cudart or cuBLAS and kvtrace starts where CUDA is absent.
 * Opening it turns every way of not having a usable GPU (library missing,
 * its dependencies missing, no driver or "insufficient driver", no device)
 * into one error line, code 1. The CUDA backend (backend_cuda.c) runs on
 * what it opens; the GPU test programs (tests/gpu) call the table directly. */
#ifndef KV_CUDA_LIB_H
#define KV_CUDA_LIB_H

#include <stdbool.h>
#include <stdint.h>

#include "model/cuda/kvcuda.h"

typedef struct {
    void *dl;               /* dlopen handle */
    const kvcuda_api *api;
    kvcuda_ctx *ctx;
    kvcuda_info info;
    char path[4096];        /* the library that was opened */
} cuda_lib;

/* Name of the library beside kvtrace, and the variable that overrides it. */
#define CUDA_LIB_NAME "libkvtrace_cuda.so"
#define CUDA_LIB_ENV "KVTRACE_CUDA_LIB"

/* Opens the library (path: a file; NULL: $KVTRACE_CUDA_LIB, else beside the
 * running executable, else the loader's search path) and device `device`.
 * KV_EFAIL with one line saying why there is no usable GPU. */
int cuda_lib_open(cuda_lib *l, const char *path, int device, kv_err *err);

/* Only loads the library and its table (no device needed). */
int cuda_lib_load(cuda_lib *l, const char *path, kv_err *err);

void cuda_lib_close(cuda_lib *l);

/* Bytes per element of a weight type. */
int cuda_lib_dtype_size(kvcuda_dtype dt);

#endif
