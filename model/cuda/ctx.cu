/* The CUDA backend's context, memory and transfers, and the exported table
 * (kvcuda.h). Kernels live in gemm.cu, elementwise.cu and attention.cu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/cuda_check.h"

int kvcuda_fail_cuda(kv_err *err, cudaError_t e, const char *call, const char *file, int line)
{
    return kv_fail(err, KV_EFAIL, "CUDA: %s failed: %s (%s) at %s:%d", call, cudaGetErrorString(e),
                   cudaGetErrorName(e), file, line);
}

int kvcuda_fail_cublas(kv_err *err, cublasStatus_t s, const char *call, const char *file, int line)
{
    return kv_fail(err, KV_EFAIL, "cuBLAS: %s failed: %s (%d) at %s:%d", call, cublasGetStatusString(s), (int)s,
                   file, line);
}

/* The sizes of live allocations, so that release can keep `used` right. */
typedef struct {
    void *p;
    size_t bytes;
} alloc_rec;
static alloc_rec *g_allocs;
static size_t g_nallocs, g_capallocs;

static void track(kvcuda_ctx *c, void *p, size_t bytes)
{
    if (g_nallocs == g_capallocs) {
        size_t cap = g_capallocs ? 2 * g_capallocs : 64;
        alloc_rec *grown = (alloc_rec *)realloc(g_allocs, cap * sizeof *grown);
        if (!grown) return; /* bookkeeping only: the allocation itself stands */
        g_allocs = grown, g_capallocs = cap;
    }
    g_allocs[g_nallocs++] = alloc_rec{p, bytes};
    c->used += bytes;
    if (c->used > c->peak) c->peak = c->used;
}

static void untrack(kvcuda_ctx *c, void *p)
{
    for (size_t i = 0; i < g_nallocs; i++)
        if (g_allocs[i].p == p) {
            c->used -= g_allocs[i].bytes;
            g_allocs[i] = g_allocs[--g_nallocs];
            return;
        }
}

static int info_fill(int device, kvcuda_info *info, kv_err *err)
{
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device), err);
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", prop.name);
    info->device = device, info->cc_major = prop.major, info->cc_minor = prop.minor;
    info->sm_count = prop.multiProcessorCount;
    cudaCheck(cudaMemGetInfo(&info->free_bytes, &info->total_bytes), err);
    cudaCheck(cudaRuntimeGetVersion(&info->runtime_version), err);
    cudaCheck(cudaDriverGetVersion(&info->driver_version), err);
    return KV_OK;
}

static int ctx_setup(kvcuda_ctx *c, kv_err *err)
{
    cudaCheck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err);
    cudaCheck(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking), err);
    cudaCheck(cudaEventCreateWithFlags(&c->compute_mark, cudaEventDisableTiming), err);
    cublasCheck(cublasCreate(&c->blas), err);
    cublasCheck(cublasSetStream(c->blas, c->stream), err);
    /* float32 products stay float32 (no TF32), so CPU/GPU parity holds */
    cublasCheck(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), err);
    return KV_OK;
}

static void ctx_close(kvcuda_ctx *c)
{
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->copy) cudaStreamSynchronize(c->copy);
    if (c->convert) cudaFree(c->convert);
    if (c->blas) cublasDestroy(c->blas);
    if (c->compute_mark) cudaEventDestroy(c->compute_mark);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->copy) cudaStreamDestroy(c->copy);
    free(c);
}

static int ctx_open(int device, kvcuda_ctx **out, kvcuda_info *info, kv_err *err)
{
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return kv_fail(err, KV_EFAIL, "no usable CUDA device: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    if (count < 1) return kv_fail(err, KV_EFAIL, "no usable CUDA device: none found");
    if (device < 0 || device >= count)
        return kv_fail(err, KV_EUSAGE, "CUDA device %d does not exist (%d found)", device, count);
    cudaCheck(cudaSetDevice(device), err);
    kvcuda_ctx *c = (kvcuda_ctx *)calloc(1, sizeof *c);
    if (!c) return kv_fail(err, KV_EFAIL, "CUDA context: out of memory");
    c->device = device;
    int rc = ctx_setup(c, err);
    if (!rc) rc = info_fill(device, info, err);
    if (rc) {
        ctx_close(c);
        return rc;
    }
    *out = c;
    return KV_OK;
}

static int mem_info(kvcuda_ctx *c, size_t *free_b, size_t *total_b, size_t *peak_b, kv_err *err)
{
    cudaCheck(cudaMemGetInfo(free_b, total_b), err);
    *peak_b = c->peak;
    return KV_OK;
}

static int dev_alloc(kvcuda_ctx *c, void **d, size_t bytes, const char *what, kv_err *err)
{
    *d = NULL;
    cudaError_t e = cudaMalloc(d, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        return kv_fail(err, KV_EFAIL, "CUDA: cannot allocate %s (%.3f GiB; %.3f GiB free of %.3f): %s", what,
                       bytes / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0, cudaGetErrorString(e));
    }
    track(c, *d, bytes);
    return KV_OK;
}

static void dev_release(kvcuda_ctx *c, void *d)
{
    if (!d) return;
    untrack(c, d);
    cudaFree(d);
}

static int dev_zero(kvcuda_ctx *c, void *d, size_t bytes, kv_err *err)
{
    cudaCheck(cudaMemsetAsync(d, 0, bytes, c->stream), err);
    return KV_OK;
}

static int host_alloc(kvcuda_ctx *c, void **h, size_t bytes, const char *what, kv_err *err)
{
    (void)c;
    *h = NULL;
    cudaError_t e = cudaMallocHost(h, bytes ? bytes : 1);
    if (e != cudaSuccess)
        return kv_fail(err, KV_EFAIL, "CUDA: cannot allocate %zu bytes of pinned host memory for %s: %s", bytes,
                       what, cudaGetErrorString(e));
    return KV_OK;
}

static void host_release(kvcuda_ctx *c, void *h)
{
    (void)c;
    if (h) cudaFreeHost(h);
}

static int upload(kvcuda_ctx *c, void *d, const void *h, size_t bytes, kv_err *err)
{
    cudaCheck(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, c->stream), err);
    cudaCheck(cudaStreamSynchronize(c->stream), err);
    return KV_OK;
}

/* f32 host -> dt device, through a bounded float32 staging buffer */
static int upload_convert(kvcuda_ctx *c, void *d, const float *h, size_t n, kvcuda_dtype dt, kv_err *err)
{
    if (dt == KVCUDA_F32) return upload(c, d, h, n * sizeof(float), err);
    const size_t step = (size_t)1 << 24; /* 64 MiB of float32 at a time */
    float *stage = NULL;
    int rc = dev_alloc(c, (void **)&stage, (n < step ? n : step) * sizeof(float), "weight staging", err);
    const size_t esize = 2; /* f16 and bf16 */
    for (size_t i = 0; !rc && i < n; i += step) {
        size_t m = n - i < step ? n - i : step;
        rc = upload(c, stage, h + i, m * sizeof(float), err);
        if (!rc) rc = kvcuda_convert(c, (char *)d + i * esize, dt, stage, m, err);
        if (!rc) {
            cudaError_t e = cudaStreamSynchronize(c->stream);
            if (e != cudaSuccess) rc = kvcuda_fail_cuda(err, e, "cudaStreamSynchronize", __FILE__, __LINE__);
        }
    }
    dev_release(c, stage);
    return rc;
}

static int download(kvcuda_ctx *c, void *h, const void *d, size_t bytes, kv_err *err)
{
    cudaCheck(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, c->stream), err);
    cudaCheck(cudaStreamSynchronize(c->stream), err);
    return KV_OK;
}

static int download_async(kvcuda_ctx *c, void *h, const void *d, size_t bytes, kv_err *err)
{
    cudaCheck(cudaEventRecord(c->compute_mark, c->stream), err);
    cudaCheck(cudaStreamWaitEvent(c->copy, c->compute_mark, 0), err);
    cudaCheck(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, c->copy), err);
    return KV_OK;
}

static int copy2d(kvcuda_ctx *c, void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                  kv_err *err)
{
    if (!height || !width) return KV_OK;
    cudaCheck(cudaMemcpy2DAsync(d, dpitch, s, spitch, width, height, cudaMemcpyDeviceToDevice, c->stream), err);
    return KV_OK;
}

static int fence(kvcuda_ctx *c, kvcuda_fence **f, kv_err *err)
{
    *f = (kvcuda_fence *)calloc(1, sizeof **f);
    if (!*f) return kv_fail(err, KV_EFAIL, "CUDA fence: out of memory");
    cudaError_t e = cudaEventCreateWithFlags(&(*f)->ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord((*f)->ev, c->copy);
    if (e != cudaSuccess) {
        free(*f);
        *f = NULL;
        return kvcuda_fail_cuda(err, e, "cudaEventRecord(fence)", __FILE__, __LINE__);
    }
    return KV_OK;
}

static int fence_wait(kvcuda_fence *f, kv_err *err)
{
    cudaCheck(cudaEventSynchronize(f->ev), err);
    return KV_OK;
}

static void fence_free(kvcuda_fence *f)
{
    if (!f) return;
    cudaEventDestroy(f->ev);
    free(f);
}

/* the compute stream only: the copy stream's downloads are waited for by their fences */
static int sync_compute(kvcuda_ctx *c, kv_err *err)
{
    cudaCheck(cudaStreamSynchronize(c->stream), err);
    return KV_OK;
}

static const kvcuda_api API = {
    KVCUDA_ABI, sizeof(kvcuda_api),
    ctx_open, ctx_close, mem_info, dev_alloc, dev_release, dev_zero, host_alloc, host_release,
    upload, upload_convert, download, download_async, copy2d, fence, fence_wait, fence_free, sync_compute,
    kvcuda_matmul, kvcuda_rmsnorm, kvcuda_rope, kvcuda_add_bias, kvcuda_swiglu, kvcuda_add, kvcuda_embed,
    kvcuda_attend, kvcuda_colsum, kvcuda_gather_rows,
};

extern "C" __attribute__((visibility("default"))) const kvcuda_api *kvcuda_get_api(int abi)
{
    return abi == KVCUDA_ABI ? &API : NULL;
}
