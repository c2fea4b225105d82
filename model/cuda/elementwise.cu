/* Row and element kernels of the walk: RMSNorm (also per head for the q/k
 * norms), RoPE, bias, SwiGLU, residual add, embedding lookup, and the cache
 * compaction of eviction. Each mirrors its CPU reference in
 * model/backend_cpu.c; products that the CPU rounds separately are written
 * with __fmul_rn/__fadd_rn so that nvcc does not fuse them into an FMA (the
 * CPU build uses -ffp-contract=off), and sums the CPU takes in double are
 * taken in double here. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "model/cuda/cuda_check.h"

enum { NORM_THREADS = 256 };

/* out[r][dim] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w; one block per row. */
__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int64_t dim, double eps)
{
    __shared__ double part[NORM_THREADS];
    const float *xr = x + blockIdx.x * dim;
    float *orow = out + blockIdx.x * dim;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    const float scale = (float)(1.0 / sqrt(part[0] / (double)dim + eps));
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

int kvcuda_rmsnorm(kvcuda_ctx *c, float *out, const float *x, const float *w, int64_t n, int64_t dim, double eps,
                   kv_err *err)
{
    if (n < 1) return KV_OK;
    if (n > INT32_MAX) return kv_fail(err, KV_EFAIL, "CUDA rmsnorm: %lld rows", (long long)n);
    rmsnorm_kernel<<<(unsigned)n, NORM_THREADS, 0, c->stream>>>(out, x, w, dim, eps);
    launchCheck("rmsnorm_kernel", err);
    return KV_OK;
}

/* one thread per (row, head, pair) of x[n][heads][D] */
__global__ void rope_kernel(float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0, const float *table,
                            int style)
{
    const int64_t half = D / 2, total = n * heads * half;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t p = i % half, rh = i / half, r = rh / heads;
        float *xh = x + rh * D;
        const float *cs = table + (pos0 + r) * D;
        const int64_t a = style == 0 ? 2 * p : p, b = style == 0 ? 2 * p + 1 : p + half;
        const float cc = cs[2 * p], sn = cs[2 * p + 1], xa = xh[a], xb = xh[b];
        xh[a] = __fsub_rn(__fmul_rn(xa, cc), __fmul_rn(xb, sn));
        xh[b] = __fadd_rn(__fmul_rn(xa, sn), __fmul_rn(xb, cc));
    }
}

int kvcuda_rope(kvcuda_ctx *c, float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0, const float *table,
                int style, kv_err *err)
{
    const int64_t total = n * heads * (D / 2);
    if (total < 1) return KV_OK;
    rope_kernel<<<kvcuda_blocks(total, 256), 256, 0, c->stream>>>(x, n, heads, D, pos0, table, style);
    launchCheck("rope_kernel", err);
    return KV_OK;
}

__global__ void add_bias_kernel(float *y, const float *b, int64_t n, int64_t m)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * m; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], b[i % m]);
}

int kvcuda_add_bias(kvcuda_ctx *c, float *y, const float *b, int64_t n, int64_t m, kv_err *err)
{
    if (n * m < 1) return KV_OK;
    add_bias_kernel<<<kvcuda_blocks(n * m, 256), 256, 0, c->stream>>>(y, b, n, m);
    launchCheck("add_bias_kernel", err);
    return KV_OK;
}

__global__ void swiglu_kernel(float *gate, const float *up, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        gate[i] = __fmul_rn(g / (1.0f + expf(-g)), up[i]);
    }
}

int kvcuda_swiglu(kvcuda_ctx *c, float *gate, const float *up, int64_t n, kv_err *err)
{
    if (n < 1) return KV_OK;
    swiglu_kernel<<<kvcuda_blocks(n, 256), 256, 0, c->stream>>>(gate, up, n);
    launchCheck("swiglu_kernel", err);
    return KV_OK;
}

__global__ void add_kernel(float *x, const float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], y[i]);
}

int kvcuda_add(kvcuda_ctx *c, float *x, const float *y, int64_t n, kv_err *err)
{
    if (n < 1) return KV_OK;
    add_kernel<<<kvcuda_blocks(n, 256), 256, 0, c->stream>>>(x, y, n);
    launchCheck("add_kernel", err);
    return KV_OK;
}

__device__ static float load_as_float(const void *t, int dt, int64_t i)
{
    if (dt == KVCUDA_F16) return __half2float(((const __half *)t)[i]);
    if (dt == KVCUDA_BF16) return __bfloat162float(((const __nv_bfloat16 *)t)[i]);
    return ((const float *)t)[i];
}

__global__ void embed_kernel(float *x, const void *table, int dt, const int32_t *tokens, int64_t n, int64_t dim)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * dim; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = load_as_float(table, dt, (int64_t)tokens[i / dim] * dim + i % dim);
}

int kvcuda_embed(kvcuda_ctx *c, float *x, const void *table, kvcuda_dtype dt, const int32_t *tokens, int64_t n,
                 int64_t dim, kv_err *err)
{
    if (n * dim < 1) return KV_OK;
    embed_kernel<<<kvcuda_blocks(n * dim, 256), 256, 0, c->stream>>>(x, table, (int)dt, tokens, n, dim);
    launchCheck("embed_kernel", err);
    return KV_OK;
}

enum { GATHER_ROWS = 32 };

/* One block per cache [cap][D]: rows keep[0..n_keep) (ascending) move to
 * rows 0..n_keep, in batches staged in shared memory. A batch's sources
 * keep[i..] are >= i, and every earlier write went below i, so reading a
 * whole batch before writing it is safe in place. */
__global__ void gather_rows_kernel(float *cache, int64_t cap, int64_t D, const int32_t *keep, int64_t n_keep)
{
    extern __shared__ float stage[]; /* [GATHER_ROWS][D] */
    float *base = cache + blockIdx.x * cap * D;
    const int32_t *kp = keep + blockIdx.x * n_keep;
    for (int64_t i0 = 0; i0 < n_keep; i0 += GATHER_ROWS) {
        const int64_t rows = n_keep - i0 < GATHER_ROWS ? n_keep - i0 : GATHER_ROWS;
        for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x)
            stage[e] = base[(int64_t)kp[i0 + e / D] * D + e % D];
        __syncthreads();
        for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x) base[(i0 + e / D) * D + e % D] = stage[e];
        __syncthreads();
    }
}

int kvcuda_gather_rows(kvcuda_ctx *c, float *cache, int64_t heads, int64_t cap, int64_t D, const int32_t *keep,
                       int64_t n_keep, kv_err *err)
{
    if (heads < 1 || n_keep < 1) return KV_OK;
    if (D > KVCUDA_MAX_HEAD_DIM || n_keep > cap || heads > INT32_MAX)
        return kv_fail(err, KV_EFAIL, "CUDA gather_rows: D %lld (max %d), %lld rows of %lld", (long long)D,
                       (int)KVCUDA_MAX_HEAD_DIM, (long long)n_keep, (long long)cap);
    gather_rows_kernel<<<(unsigned)heads, 256, GATHER_ROWS * D * sizeof(float), c->stream>>>(cache, cap, D, keep,
                                                                                            n_keep);
    launchCheck("gather_rows_kernel", err);
    return KV_OK;
}
