/* A host emulation of the CUDA backend's ABI (model/cuda/kvcuda.h), so
 * that CI, which has no GPU, runs the whole `--device cuda` path — the walk
 * on a device table, weights uploaded in F32/F16/BF16, the recording
 * through "pinned" buffers, fences and the writer thread, the column sums
 * brought back, the memory budget — with KVTRACE_CUDA_LIB pointing here.
 * "Device memory" is host memory; each entry follows the contract in
 * kvcuda.h with the CPU references (the same functions the GPU kernels are
 * validated against). KVCUDA_EMUL_FREE_MIB sets the reported free memory
 * (default 64 GiB), to exercise the budget's refusal. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/kvcuda.h"
#include "core/attn_causal.h"
#include "core/attn_colsum.h"
#include "core/half.h"
#include "core/rope.h"

struct kvcuda_ctx {
    size_t used, peak;
};
struct kvcuda_fence {
    int unused;
};

static int e_open(int device, kvcuda_ctx **ctx, kvcuda_info *info, kv_err *err)
{
    if (device != 0) return kv_fail(err, KV_EUSAGE, "CUDA device %d does not exist (1 found)", device);
    *ctx = calloc(1, sizeof **ctx);
    if (!*ctx) return kv_fail(err, KV_EFAIL, "out of memory");
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "kvtrace host emulation");
    info->cc_major = 9, info->sm_count = 1, info->total_bytes = (size_t)64 << 30;
    const char *mib = getenv("KVCUDA_EMUL_FREE_MIB");
    info->free_bytes = mib ? (size_t)atoll(mib) << 20 : info->total_bytes;
    return KV_OK;
}

static void e_close(kvcuda_ctx *c)
{
    free(c);
}

static int e_mem_info(kvcuda_ctx *c, size_t *f, size_t *t, size_t *peak, kv_err *err)
{
    (void)err;
    *t = (size_t)64 << 30, *f = *t - c->used, *peak = c->peak;
    return KV_OK;
}

/* allocations carry their size in front, for the peak count */
static int e_alloc(kvcuda_ctx *c, void **d, size_t bytes, const char *what, kv_err *err)
{
    size_t *p = malloc(bytes + 16);
    if (!p) return kv_fail(err, KV_EFAIL, "emulated device: cannot allocate %s", what);
    p[0] = bytes;
    c->used += bytes;
    if (c->used > c->peak) c->peak = c->used;
    *d = (char *)p + 16;
    return KV_OK;
}

static void e_release(kvcuda_ctx *c, void *d)
{
    if (!d) return;
    size_t *p = (size_t *)((char *)d - 16);
    c->used -= p[0];
    free(p);
}

static int e_zero(kvcuda_ctx *c, void *d, size_t bytes, kv_err *err)
{
    (void)c, (void)err;
    memset(d, 0, bytes);
    return KV_OK;
}

static int e_host_alloc(kvcuda_ctx *c, void **h, size_t bytes, const char *what, kv_err *err)
{
    (void)c;
    *h = malloc(bytes ? bytes : 1);
    return *h ? KV_OK : kv_fail(err, KV_EFAIL, "cannot allocate %s", what);
}

static void e_host_release(kvcuda_ctx *c, void *h)
{
    (void)c;
    free(h);
}

static int e_copy(kvcuda_ctx *c, void *d, const void *s, size_t bytes, kv_err *err)
{
    (void)c, (void)err;
    memcpy(d, s, bytes);
    return KV_OK;
}

static float round_to(float x, kvcuda_dtype dt)
{
    if (dt == KVCUDA_F16) return half_to_float(half_from_float(x));
    if (dt == KVCUDA_BF16) return bf16_to_float(bf16_from_float(x));
    return x;
}

/* 16-bit types are stored as their rounded float32 values: same numbers, simpler code */
static int e_upload_convert(kvcuda_ctx *c, void *d, const float *h, size_t n, kvcuda_dtype dt, kv_err *err)
{
    (void)c, (void)err;
    uint16_t *o = d;
    for (size_t i = 0; i < n; i++) {
        if (dt == KVCUDA_F32) ((float *)d)[i] = h[i];
        else o[i] = dt == KVCUDA_F16 ? half_from_float(h[i]) : bf16_from_float(h[i]);
    }
    return KV_OK;
}

static float load(const void *t, kvcuda_dtype dt, size_t i)
{
    if (dt == KVCUDA_F16) return half_to_float(((const uint16_t *)t)[i]);
    if (dt == KVCUDA_BF16) return bf16_to_float(((const uint16_t *)t)[i]);
    return ((const float *)t)[i];
}

static int e_copy2d(kvcuda_ctx *c, void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, kv_err *err)
{
    (void)c, (void)err;
    for (size_t r = 0; r < h; r++) memcpy((char *)d + r * dp, (const char *)s + r * sp, w);
    return KV_OK;
}

static int e_fence(kvcuda_ctx *c, kvcuda_fence **f, kv_err *err)
{
    (void)c;
    *f = calloc(1, sizeof **f);
    return *f ? KV_OK : kv_fail(err, KV_EFAIL, "out of memory");
}

static int e_fence_wait(kvcuda_fence *f, kv_err *err)
{
    (void)f, (void)err;
    return KV_OK;
}

static void e_fence_free(kvcuda_fence *f)
{
    free(f);
}

static int e_sync(kvcuda_ctx *c, kv_err *err)
{
    (void)c, (void)err;
    return KV_OK;
}

static int e_matmul(kvcuda_ctx *c, const float *x, const void *w, kvcuda_dtype wt, float *y, int64_t n, int64_t in,
                    int64_t out, kv_err *err)
{
    (void)c;
    float *xr = malloc(sizeof(float) * (size_t)(n * in)), *wr = malloc(sizeof(float) * (size_t)(out * in));
    if (!xr || !wr) return free(xr), free(wr), kv_fail(err, KV_EFAIL, "out of memory");
    for (int64_t i = 0; i < n * in; i++) xr[i] = round_to(x[i], wt);
    for (int64_t i = 0; i < out * in; i++) wr[i] = load(w, wt, (size_t)i);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, 1.0f, xr, (int)in, wr, (int)in,
                0.0f, y, (int)out);
    free(xr), free(wr);
    return KV_OK;
}

static int e_rmsnorm(kvcuda_ctx *c, float *out, const float *x, const float *w, int64_t n, int64_t dim, double eps,
                     kv_err *err)
{
    (void)c, (void)err;
    for (int64_t r = 0; r < n; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
        float scale = (float)(1.0 / sqrt(ss / (double)dim + eps));
        for (int64_t i = 0; i < dim; i++) out[r * dim + i] = x[r * dim + i] * scale * w[i];
    }
    return KV_OK;
}

static int e_rope(kvcuda_ctx *c, float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0, const float *table,
                  int style, kv_err *err)
{
    (void)c, (void)err;
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < heads; h++)
            rope_table_apply(x + (r * heads + h) * D, D, style ? ROPE_NEOX : ROPE_INTERLEAVED, table, pos0 + r);
    return KV_OK;
}

static int e_add_bias(kvcuda_ctx *c, float *y, const float *b, int64_t n, int64_t m, kv_err *err)
{
    (void)c, (void)err;
    for (int64_t i = 0; i < n * m; i++) y[i] += b[i % m];
    return KV_OK;
}

static int e_swiglu(kvcuda_ctx *c, float *gate, const float *up, int64_t n, kv_err *err)
{
    (void)c, (void)err;
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
    return KV_OK;
}

static int e_add(kvcuda_ctx *c, float *x, const float *y, int64_t n, kv_err *err)
{
    (void)c, (void)err;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
    return KV_OK;
}

static int e_embed(kvcuda_ctx *c, float *x, const void *table, kvcuda_dtype dt, const int32_t *tokens, int64_t n,
                   int64_t dim, kv_err *err)
{
    (void)c, (void)err;
    for (int64_t i = 0; i < n * dim; i++) x[i] = load(table, dt, (size_t)(tokens[i / dim] * dim + i % dim));
    return KV_OK;
}

/* per head through attn_causal_rows; the normalisers as the kernel's (row max m, Σ exp(s - m)) */
static int e_attend(kvcuda_ctx *c, const float *q, const float *k, const float *v, int64_t cap, int64_t H, int64_t K,
                    int64_t D, int64_t pos0, const int32_t *n_cached, int64_t n, float *out, float *row_max,
                    float *row_sum, kv_err *err)
{
    (void)c;
    float *p = malloc(sizeof(float) * (size_t)(n * cap));
    double *lse = malloc(sizeof(double) * (size_t)n);
    if (!p || !lse) return free(p), free(lse), kv_fail(err, KV_EFAIL, "out of memory");
    for (int64_t h = 0; h < H; h++) {
        const int64_t g = h / (H / K), c0 = n_cached ? n_cached[g] : pos0;
        attn_causal_rows(q + h * D, H * D, k + g * cap * D, v + g * cap * D, c0, n, D, p, out + h * D, H * D, lse,
                         row_max + h * n);
        for (int64_t r = 0; r < n; r++) row_sum[h * n + r] = (float)exp(lse[r] - (double)row_max[h * n + r]);
    }
    free(p), free(lse);
    return KV_OK;
}

static int e_colsum(kvcuda_ctx *c, const float *q, const float *k, int64_t cap, int64_t H, int64_t K, int64_t D,
                    int64_t pos0, int64_t n, const float *row_max, const float *row_sum, double *colsum, int64_t ldc,
                    kv_err *err)
{
    (void)c, (void)err, (void)row_max, (void)row_sum; /* the reference recomputes its normalisers */
    float *qh = malloc(sizeof(float) * (size_t)(n * D)), *scratch = malloc(sizeof(float) * (size_t)(n * (pos0 + n)));
    if (!qh || !scratch) return free(qh), free(scratch), kv_fail(err, KV_EFAIL, "out of memory");
    for (int64_t h = 0; h < H; h++) {
        for (int64_t r = 0; r < n; r++) memcpy(qh + r * D, q + r * H * D + h * D, sizeof(float) * (size_t)D);
        attn_colsum_add_rows(qh, pos0, n, k + (h / (H / K)) * cap * D, D, (float)(1.0 / sqrt((double)D)),
                             colsum + h * ldc, scratch);
    }
    free(qh), free(scratch);
    return KV_OK;
}

static int e_gather(kvcuda_ctx *c, float *cache, int64_t heads, int64_t cap, int64_t D, const int32_t *keep,
                    int64_t n_keep, kv_err *err)
{
    (void)c, (void)err;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < n_keep; i++)
            memmove(cache + (h * cap + i) * D, cache + (h * cap + keep[h * n_keep + i]) * D, sizeof(float) * (size_t)D);
    return KV_OK;
}

static const kvcuda_api API = {
    .abi = KVCUDA_ABI, .size = sizeof(kvcuda_api),
    .open = e_open, .close = e_close, .mem_info = e_mem_info, .alloc = e_alloc, .release = e_release,
    .zero = e_zero, .host_alloc = e_host_alloc, .host_release = e_host_release, .upload = e_copy,
    .upload_convert = e_upload_convert, .download = e_copy, .download_async = e_copy, .copy2d = e_copy2d,
    .fence = e_fence, .fence_wait = e_fence_wait, .fence_free = e_fence_free, .sync = e_sync,
    .matmul = e_matmul, .rmsnorm = e_rmsnorm, .rope = e_rope, .add_bias = e_add_bias, .swiglu = e_swiglu,
    .add = e_add, .embed = e_embed, .attend = e_attend, .colsum = e_colsum, .gather_rows = e_gather,
};

__attribute__((visibility("default"))) const kvcuda_api *kvcuda_get_api(int abi)
{
    return abi == KVCUDA_ABI ? &API : NULL;
}
