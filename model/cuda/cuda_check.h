/* cudaCheck / cublasCheck: every CUDA and cuBLAS call of the backend goes
 * through these, which turn a failure into a kv_err naming the call, CUDA's
 * error string and the source line, and return its code from the enclosing
 * function (the library never exits). Kernel launches are followed by
 * launchCheck(), which reports a bad configuration at once. */
#ifndef KV_CUDA_CHECK_H
#define KV_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "model/cuda/kvcuda.h"

int kvcuda_fail_cuda(kv_err *err, cudaError_t e, const char *call, const char *file, int line);
int kvcuda_fail_cublas(kv_err *err, cublasStatus_t s, const char *call, const char *file, int line);

#define cudaCheck(call, err)                                                              \
    do {                                                                                  \
        cudaError_t kv_e_ = (call);                                                       \
        if (kv_e_ != cudaSuccess) return kvcuda_fail_cuda((err), kv_e_, #call, __FILE__, __LINE__); \
    } while (0)

#define cublasCheck(call, err)                                                            \
    do {                                                                                  \
        cublasStatus_t kv_s_ = (call);                                                    \
        if (kv_s_ != CUBLAS_STATUS_SUCCESS)                                               \
            return kvcuda_fail_cublas((err), kv_s_, #call, __FILE__, __LINE__);           \
    } while (0)

#define launchCheck(name, err) cudaCheck(cudaGetLastError(), err)

/* The context: one device, a compute stream, a copy stream for downloads,
 * a cuBLAS handle, and the bookkeeping of the bytes it allocated. */
struct kvcuda_ctx {
    int device;
    cudaStream_t stream;      /* kernels, in order */
    cudaStream_t copy;        /* asynchronous downloads */
    cudaEvent_t compute_mark; /* the copy stream waits on this */
    cublasHandle_t blas;
    void *convert;            /* scratch: activations rounded to f16/bf16 for matmul */
    size_t convert_bytes;
    size_t used, peak;        /* bytes of our own device allocations */
};

struct kvcuda_fence {
    cudaEvent_t ev;
};

/* launch geometry helpers */
static inline unsigned kvcuda_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 32 ? 65535 * 32 : b);
}

/* The kernel entry points (one file each: gemm.cu, elementwise.cu, attention.cu). */
int kvcuda_matmul(kvcuda_ctx *c, const float *x, const void *w, kvcuda_dtype wt, float *y, int64_t n,
                  int64_t in, int64_t out, kv_err *err);
int kvcuda_convert(kvcuda_ctx *c, void *dst, kvcuda_dtype dt, const float *src, size_t n, kv_err *err);
int kvcuda_rmsnorm(kvcuda_ctx *c, float *out, const float *x, const float *w, int64_t n, int64_t dim,
                   double eps, kv_err *err);
int kvcuda_rope(kvcuda_ctx *c, float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0,
                const float *table, int style, kv_err *err);
int kvcuda_add_bias(kvcuda_ctx *c, float *y, const float *b, int64_t n, int64_t m, kv_err *err);
int kvcuda_swiglu(kvcuda_ctx *c, float *gate, const float *up, int64_t n, kv_err *err);
int kvcuda_add(kvcuda_ctx *c, float *x, const float *y, int64_t n, kv_err *err);
int kvcuda_embed(kvcuda_ctx *c, float *x, const void *table, kvcuda_dtype dt, const int32_t *tokens,
                 int64_t n, int64_t dim, kv_err *err);
int kvcuda_gather_rows(kvcuda_ctx *c, float *cache, int64_t heads, int64_t cap, int64_t D,
                       const int32_t *keep, int64_t n_keep, kv_err *err);
int kvcuda_attend(kvcuda_ctx *c, const float *q, const float *k, const float *v, int64_t cap, int64_t H,
                  int64_t K, int64_t D, int64_t pos0, const int32_t *n_cached, int64_t n, float *out,
                  float *row_max, float *row_sum, kv_err *err);
int kvcuda_colsum(kvcuda_ctx *c, const float *q, const float *k, int64_t cap, int64_t H, int64_t K,
                  int64_t D, int64_t pos0, int64_t n, const float *row_max, const float *row_sum,
                  double *colsum, int64_t ldc, kv_err *err);

#endif
