/* Matrix products with cuBLAS: y[n][out] = x[n][in] . W[out][in]^T.
 *
 * Row-major y is column-major y^T (out x n), so the product is
 * C = op(A) B with A = W seen column-major as [in][out] (transposed) and
 * B = x seen as [in][n]. Float32 weights use cublasGemmEx in float32 with
 * no TF32; float16/bfloat16 weights stay in that type on the device, the
 * activations are rounded to it in a scratch buffer and cuBLAS accumulates
 * in float32 (CUBLAS_COMPUTE_32F), writing float32 outputs. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "model/cuda/cuda_check.h"

template <typename T> __device__ T from_float(float x);
template <> __device__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T> __global__ void convert_kernel(T *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = from_float<T>(src[i]);
}

int kvcuda_convert(kvcuda_ctx *c, void *dst, kvcuda_dtype dt, const float *src, size_t n, kv_err *err)
{
    if (!n) return KV_OK;
    unsigned blocks = kvcuda_blocks((int64_t)n, 256);
    if (dt == KVCUDA_F16) convert_kernel<__half><<<blocks, 256, 0, c->stream>>>((__half *)dst, src, n);
    else if (dt == KVCUDA_BF16)
        convert_kernel<__nv_bfloat16><<<blocks, 256, 0, c->stream>>>((__nv_bfloat16 *)dst, src, n);
    else return kv_fail(err, KV_EFAIL, "CUDA convert: not a 16-bit type (%d)", (int)dt);
    launchCheck("convert_kernel", err);
    return KV_OK;
}

/* The activation scratch for 16-bit products, grown on demand (n * in elements). */
static int convert_scratch(kvcuda_ctx *c, size_t bytes, kv_err *err)
{
    if (c->convert_bytes >= bytes) return KV_OK;
    if (c->convert) {
        cudaCheck(cudaStreamSynchronize(c->stream), err);
        cudaCheck(cudaFree(c->convert), err);
        c->used -= c->convert_bytes;
        c->convert = NULL, c->convert_bytes = 0;
    }
    cudaCheck(cudaMalloc(&c->convert, bytes), err);
    c->convert_bytes = bytes;
    c->used += bytes;
    if (c->used > c->peak) c->peak = c->used;
    return KV_OK;
}

int kvcuda_matmul(kvcuda_ctx *c, const float *x, const void *w, kvcuda_dtype wt, float *y, int64_t n, int64_t in,
                  int64_t out, kv_err *err)
{
    if (n < 1 || in < 1 || out < 1) return KV_OK;
    if (n > INT32_MAX || in > INT32_MAX || out > INT32_MAX)
        return kv_fail(err, KV_EFAIL, "CUDA matmul: dimensions %lld x %lld x %lld exceed cuBLAS's int range",
                       (long long)n, (long long)in, (long long)out);
    const float alpha = 1.0f, beta = 0.0f;
    const int m_ = (int)out, n_ = (int)n, k_ = (int)in;
    if (wt == KVCUDA_F32) {
        cublasCheck(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m_, n_, k_, &alpha, w, CUDA_R_32F, k_, x,
                                 CUDA_R_32F, k_, &beta, y, CUDA_R_32F, m_, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    err);
        return KV_OK;
    }
    if (wt != KVCUDA_F16 && wt != KVCUDA_BF16) return kv_fail(err, KV_EFAIL, "CUDA matmul: weight type %d", (int)wt);
    const cudaDataType_t t = wt == KVCUDA_F16 ? CUDA_R_16F : CUDA_R_16BF;
    int rc = convert_scratch(c, (size_t)n * (size_t)in * 2, err);
    if (!rc) rc = kvcuda_convert(c, c->convert, wt, x, (size_t)n * (size_t)in, err);
    if (rc) return rc;
    cublasCheck(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m_, n_, k_, &alpha, w, t, k_, c->convert, t, k_,
                             &beta, y, CUDA_R_32F, m_, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                err);
    return KV_OK;
}
