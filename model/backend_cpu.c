/* The CPU backend: the kernels of the forward pass (OpenBLAS for every
 * product, plain loops vectorised by the compiler for the rest) on host
 * memory, and its row of the backend table. The kernels take no context. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/forward.h"
#include "model/weights16.h"
#include "core/attn_causal.h"

static void cpu_matmul(void *ctx, const float *x, const float *w, float *y, int64_t n, int64_t in, int64_t out)
{
    (void)ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, 1.0f, x, (int)in,
                w, (int)in, 0.0f, y, (int)out);
}

/* 16-bit W: blocks of whole rows, as many as the tile holds and all of
 * about the same size, widened, then sgemm into y's columns of those rows
 * (a matrix that fits is one call, exactly cpu_matmul's on the widened W).
 * Each y element is a dot product of the same float32 values; docs/capture.md
 * says when the sums match cpu_matmul's bit for bit (test_weights16.py). */
static void cpu_matmul16(void *ctx, const float *x, const model_mat *w, model_wtype t, float *y, int64_t n,
                         int64_t in, int64_t out, float *tile, int64_t tile_n)
{
    (void)ctx;
    const int64_t most = tile_n / in, tiles = (out + most - 1) / most; /* most >= 1: FORWARD_WTILE rows fit */
    const int64_t step = (out + tiles - 1) / tiles; /* tiles of equal size: no small remainder (docs/capture.md) */
    for (int64_t o0 = 0; o0 < out; o0 += step) {
        const int64_t rows = out - o0 < step ? out - o0 : step;
        weights_widen(w, t, (size_t)o0 * (size_t)in, (size_t)(rows * in), tile);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)rows, (int)in, 1.0f, x, (int)in,
                    tile, (int)in, 0.0f, y + o0, (int)out);
    }
}

static void cpu_rmsnorm(void *ctx, float *out, const float *x, const float *w, int64_t n, int64_t dim, double eps)
{
    (void)ctx;
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * dim;
        double ss = 0.0;
        for (int64_t i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float scale = (float)(1.0 / sqrt(ss / (double)dim + eps));
        for (int64_t i = 0; i < dim; i++) out[r * dim + i] = xr[i] * scale * w[i];
    }
}

static void cpu_rope(void *ctx, float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0,
                     const float *rope_table, rope_style style)
{
    (void)ctx;
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < heads; h++)
            rope_table_apply(x + (r * heads + h) * D, D, style, rope_table, pos0 + r);
}

static void cpu_add_bias(void *ctx, float *y, const float *b, int64_t n, int64_t m)
{
    (void)ctx;
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < m; i++) y[r * m + i] += b[i];
}

static void cpu_swiglu(void *ctx, float *gate, const float *up, int64_t n)
{
    (void)ctx;
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void cpu_attend(void *ctx, const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0, int64_t n,
                       int64_t D, float *p, float *out, int64_t ldo, double *lse)
{
    (void)ctx;
    attn_causal_rows(q, ldq, k, v, pos0, n, D, p, out, ldo, lse);
}

static void cpu_compact(void *ctx, float *k, float *v, const int64_t *keep, int64_t n_keep, int64_t D)
{
    (void)ctx;
    for (int64_t i = 0; i < n_keep; i++) { /* keep[i] >= i: in place, front to back */
        if (keep[i] == i) continue;
        memmove(k + i * D, k + keep[i] * D, sizeof(float) * (size_t)D);
        memmove(v + i * D, v + keep[i] * D, sizeof(float) * (size_t)D);
    }
}

static const float *cpu_host_rows(void *ctx, const float *cache, int64_t n, int64_t D, float *host)
{
    (void)ctx, (void)n, (void)D, (void)host; /* the cache is host memory */
    return cache;
}

/* ---- memory: the host's own (the walk's buffers are plain host arrays) ---- */

static void *cpu_alloc(void *ctx, size_t n, size_t size, const char *what, kv_err *err)
{
    (void)ctx;
    return kv_calloc(n, size, what, err);
}

static void cpu_release(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes, kv_err *err)
{
    (void)ctx, (void)err;
    memcpy(dst, src, bytes);
    return KV_OK;
}

static void cpu_embed(void *ctx, float *x, const float *table, const int32_t *tokens, int64_t n, int64_t dim)
{
    (void)ctx;
    for (int64_t r = 0; r < n; r++)
        memcpy(x + r * dim, table + (size_t)tokens[r] * (size_t)dim, sizeof(float) * (size_t)dim);
}

static void cpu_add(void *ctx, float *x, const float *y, int64_t n)
{
    (void)ctx;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_copy_rows(void *ctx, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                          int64_t width)
{
    (void)ctx;
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * ldd, src + r * lds, sizeof(float) * (size_t)width);
}

static int cpu_sync(void *ctx, kv_err *err)
{
    (void)ctx, (void)err; /* the CPU kernels finished when they returned */
    return KV_OK;
}

const forward_kernels FORWARD_CPU = {
    .matmul = cpu_matmul,
    .matmul16 = cpu_matmul16,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .add_bias = cpu_add_bias,
    .swiglu = cpu_swiglu,
    .attend = cpu_attend,
    .compact = cpu_compact,
    .host_rows = cpu_host_rows,
    .host_memory = true,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .embed = cpu_embed,
    .add = cpu_add,
    .copy_rows = cpu_copy_rows,
    .attend_layer = NULL, /* attend per head, with its weights for the observers and the evictor */
    .sync = cpu_sync,
};

const backend_iface BACKEND_CPU = {
    .name = "cpu",
    .kernels = &FORWARD_CPU,
    .weight_types = false, /* float32: the model as loaded */
    /* no check, open, prepare: every option, no instance, the host model as it is;
     * no colsum: the recorder sums the weights the walk hands it; no staging: host memory */
};
