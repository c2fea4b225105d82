/* kvcuda: the ABI between kvtrace and its CUDA backend, build/libkvtrace_cuda.so.
 *
 * The shared object is opened with dlopen only for `--device cuda`
 * (model/cuda_lib.c), so a CPU run never maps cudart or cuBLAS. It exports
 * one symbol, kvcuda_get_api(KVCUDA_ABI), which returns this table of plain
 * C functions; the header uses no CUDA type, so it is included by both sides.
 *
 * Conventions (one set of names: L layers, H query heads, K kv heads, D head
 * dim, T tokens, B chunk rows):
 *   - every pointer named d* or documented "device" is device memory from
 *     `alloc`; kernels are enqueued on the context's compute stream, in
 *     order, and return when enqueued (launch errors are reported at once,
 *     execution errors at the next `sync` / download);
 *   - every function returns KV_OK or a kv_err code and fills *err with one
 *     line naming the CUDA/cuBLAS call, its error string and the source line;
 *   - activations are float32; weights float32, float16 or bfloat16 (matrix
 *     products accumulate in float32 whatever the weight type).
 * Layouts are the CPU walk's (model/forward.h), so a validation test can
 * run both on the same arrays. */
#ifndef KV_CUDA_API_H
#define KV_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define _Noreturn [[noreturn]] /* core/kv_error.h is C11 */
extern "C" {
#endif

#include "core/kv_error.h"

enum { KVCUDA_ABI = 1 };

/* largest head dimension the attention kernels take */
enum { KVCUDA_MAX_HEAD_DIM = 256 };

typedef enum { KVCUDA_F32 = 0, KVCUDA_F16 = 1, KVCUDA_BF16 = 2 } kvcuda_dtype;

typedef struct kvcuda_ctx kvcuda_ctx;
typedef struct kvcuda_fence kvcuda_fence;

typedef struct {
    char name[256];          /* "NVIDIA H200" */
    int device, cc_major, cc_minor, sm_count;
    size_t total_bytes, free_bytes;
    int runtime_version, driver_version;
} kvcuda_info;

typedef struct {
    int abi;     /* KVCUDA_ABI */
    size_t size; /* sizeof(kvcuda_api) the library was built with */

    /* ---- device, memory, transfers ---------------------------------- */
    /* Opens device `device` (a stream, a copy stream, a cuBLAS handle).
     * No device or no driver: KV_EFAIL with CUDA's own reason. */
    int (*open)(int device, kvcuda_ctx **ctx, kvcuda_info *info, kv_err *err);
    void (*close)(kvcuda_ctx *ctx);
    /* free/total now, and the peak of this context's own allocations */
    int (*mem_info)(kvcuda_ctx *ctx, size_t *free_b, size_t *total_b, size_t *peak_b, kv_err *err);
    int (*alloc)(kvcuda_ctx *ctx, void **d, size_t bytes, const char *what, kv_err *err);
    void (*release)(kvcuda_ctx *ctx, void *d);
    /* d[0..bytes) = 0, enqueued */
    int (*zero)(kvcuda_ctx *ctx, void *d, size_t bytes, kv_err *err);
    /* page-locked host memory, for asynchronous downloads */
    int (*host_alloc)(kvcuda_ctx *ctx, void **h, size_t bytes, const char *what, kv_err *err);
    void (*host_release)(kvcuda_ctx *ctx, void *h);
    /* host -> device, complete when it returns */
    int (*upload)(kvcuda_ctx *ctx, void *d, const void *h, size_t bytes, kv_err *err);
    /* float32 host -> n elements of dtype on the device (weights) */
    int (*upload_convert)(kvcuda_ctx *ctx, void *d, const float *h, size_t n, kvcuda_dtype dt, kv_err *err);
    /* device -> host after all enqueued work, complete when it returns */
    int (*download)(kvcuda_ctx *ctx, void *h, const void *d, size_t bytes, kv_err *err);
    /* device -> pinned host on the copy stream, after the compute stream's
     * work so far; the compute stream runs on. `fence` then marks it. */
    int (*download_async)(kvcuda_ctx *ctx, void *h, const void *d, size_t bytes, kv_err *err);
    /* d2d strided copy: height rows of width bytes (pitches in bytes) */
    int (*copy2d)(kvcuda_ctx *ctx, void *d, size_t dpitch, const void *s, size_t spitch, size_t width,
                  size_t height, kv_err *err);
    /* an event after the copy stream's work so far; wait blocks the caller */
    int (*fence)(kvcuda_ctx *ctx, kvcuda_fence **f, kv_err *err);
    int (*fence_wait)(kvcuda_fence *f, kv_err *err);
    void (*fence_free)(kvcuda_fence *f);
    /* waits for the kernels enqueued so far (not the copy stream: fences
     * do that); reports execution errors */
    int (*sync)(kvcuda_ctx *ctx, kv_err *err);

    /* ---- kernels (the CPU references are model/backend_cpu.c and
     * core/attn_causal.c, core/attn_colsum.c) ----------------------------- */
    /* y[n][out] = x[n][in] . W[out][in]^T, W of type wt (f16/bf16: x is
     * rounded to wt for the product, accumulation float32) */
    int (*matmul)(kvcuda_ctx *ctx, const float *x, const void *w, kvcuda_dtype wt, float *y, int64_t n,
                  int64_t in, int64_t out, kv_err *err);
    /* out[n][dim] = x / rms(x) * w (sum of squares in double); in place allowed */
    int (*rmsnorm)(kvcuda_ctx *ctx, float *out, const float *x, const float *w, int64_t n, int64_t dim,
                   double eps, kv_err *err);
    /* rotates x[n][heads][D] at positions pos0.. with table [cap][D] (cos, sin
     * per pair, core/rope.h); style 0 interleaved, 1 neox */
    int (*rope)(kvcuda_ctx *ctx, float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0,
                const float *table, int style, kv_err *err);
    /* y[n][m] += b[m] */
    int (*add_bias)(kvcuda_ctx *ctx, float *y, const float *b, int64_t n, int64_t m, kv_err *err);
    /* gate[i] = silu(gate[i]) * up[i] */
    int (*swiglu)(kvcuda_ctx *ctx, float *gate, const float *up, int64_t n, kv_err *err);
    /* x[i] += y[i] (residual stream) */
    int (*add)(kvcuda_ctx *ctx, float *x, const float *y, int64_t n, kv_err *err);
    /* x[r][dim] = table[tokens[r]][dim] (tokens: device int32 [n]) */
    int (*embed)(kvcuda_ctx *ctx, float *x, const void *table, kvcuda_dtype dt, const int32_t *tokens,
                 int64_t n, int64_t dim, kv_err *err);
    /* Causal GQA attention of one layer, tiled with an online softmax (no
     * [n][T] matrix): q [n][H*D]; k, v caches [K][cap][D]; query row r of
     * head h sees cache rows 0 .. c+r of kv head g = h / (H/K), where c =
     * n_cached[g] (device int32 [K]) or, when n_cached is NULL, pos0. Writes
     * out [n][H*D] and each row's softmax normalisers: row_max [H][n] (scaled
     * score maximum) and row_sum [H][n] (Σ exp(s - max)). */
    int (*attend)(kvcuda_ctx *ctx, const float *q, const float *k, const float *v, int64_t cap,
                  int64_t H, int64_t K, int64_t D, int64_t pos0, const int32_t *n_cached, int64_t n,
                  float *out, float *row_max, float *row_sum, kv_err *err);
    /* Exact column sums: colsum[h][j] (double, row stride ldc) += Σ_r
     * exp(s_rj - row_max) / row_sum over the chunk's rows r that see key j
     * (j <= pos0 + r), a second Q.K^T pass with attend's normalisers. */
    int (*colsum)(kvcuda_ctx *ctx, const float *q, const float *k, int64_t cap, int64_t H, int64_t K,
                  int64_t D, int64_t pos0, int64_t n, const float *row_max, const float *row_sum,
                  double *colsum, int64_t ldc, kv_err *err);
    /* Cache compaction (eviction): for each of `heads` caches [cap][D]
     * starting at cache + hd*cap*D, rows keep[hd][0..n_keep) (device int32,
     * ascending) move to rows 0..n_keep. */
    int (*gather_rows)(kvcuda_ctx *ctx, float *cache, int64_t heads, int64_t cap, int64_t D,
                       const int32_t *keep, int64_t n_keep, kv_err *err);
} kvcuda_api;

/* The one exported symbol; NULL if `abi` is not the library's. */
typedef const kvcuda_api *(*kvcuda_get_api_fn)(int abi);
const kvcuda_api *kvcuda_get_api(int abi);

#ifdef __cplusplus
}
#endif

#endif
