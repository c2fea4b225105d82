/* The CUDA backend (backend.h): its instance, its forward_kernels table and
 * its row of the backend table. Each kernel forwards to the library opened
 * by model/cuda_lib.c on the instance's context (the walk passes it as the
 * table's ctx): a GPU call goes walk -> this table -> the library. Kernels
 * return void as the table's signatures do; the instance keeps the first
 * failure and returns it from sync (the walk syncs after every chunk), and
 * later kernels are skipped.
 *
 * prepare mirrors the host model: a kv_model whose weight pointers are device
 * memory (matrices in the weight type, vectors float32), which the walk
 * reads, after checking the device-memory budget (cuda_budget.h); it also
 * allocates the attention kernels' scratch and, with column sums, their
 * device accumulator [L][H][T] (double). */
#include "model/backend.h"

#include <stdlib.h>
#include <string.h>

#include "model/cuda_budget.h"
#include "model/cuda_lib.h"

typedef struct {
    cuda_lib lib;          /* api, ctx, device information */
    kvcuda_dtype wt;       /* weight matrices and the embedding */
    kv_err err;            /* first failure of a void kernel */
    kv_model dev;          /* the prepared model: weights in device memory (cfg shared with the host's) */
    bool prepared;
    float *row_max;        /* [H][B] attention row normalisers */
    float *row_sum;        /* [H][B] */
    int32_t *tokens;       /* [B] the chunk's ids */
    int32_t *keep;         /* [T] rows a compaction keeps */
    int32_t *keep_host;    /* [T] */
    double *colsum;        /* [L][H][T] or NULL */
    int64_t L, H, T, B;
} cuda_backend;

/* No kernel failed so far: the next one may run. */
static bool live(const cuda_backend *b)
{
    return b->err.code == KV_OK;
}

static void *cu_alloc(void *ctx, size_t n, size_t size, const char *what, kv_err *err)
{
    cuda_backend *b = ctx;
    void *d = NULL;
    if (size && n > SIZE_MAX / size) {
        kv_fail(err, KV_EFAIL, "%s: size overflow", what);
        return NULL;
    }
    if (b->lib.api->alloc(b->lib.ctx, &d, n * size, what, err)) return NULL;
    if (b->lib.api->zero(b->lib.ctx, d, n * size, err)) { /* zeroed, as the CPU table's calloc */
        b->lib.api->release(b->lib.ctx, d);
        return NULL;
    }
    return d;
}

static void cu_release(void *ctx, void *p)
{
    cuda_backend *b = ctx;
    if (p) b->lib.api->release(b->lib.ctx, p);
}

static int cu_upload(void *ctx, void *dst, const void *src, size_t bytes, kv_err *err)
{
    cuda_backend *b = ctx;
    return b->lib.api->upload(b->lib.ctx, dst, src, bytes, err);
}

static int cu_download(void *ctx, void *dst, const void *src, size_t bytes, kv_err *err)
{
    cuda_backend *b = ctx;
    return b->lib.api->download(b->lib.ctx, dst, src, bytes, err);
}

static void cu_matmul(void *ctx, const float *x, const float *w, float *y, int64_t n, int64_t in, int64_t out)
{
    cuda_backend *b = ctx;
    if (live(b)) b->lib.api->matmul(b->lib.ctx, x, w, b->wt, y, n, in, out, &b->err);
}

static void cu_rmsnorm(void *ctx, float *out, const float *x, const float *w, int64_t n, int64_t dim, double eps)
{
    cuda_backend *b = ctx;
    if (live(b)) b->lib.api->rmsnorm(b->lib.ctx, out, x, w, n, dim, eps, &b->err);
}

static void cu_rope(void *ctx, float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0, const float *table,
                    rope_style style)
{
    cuda_backend *b = ctx;
    if (live(b)) b->lib.api->rope(b->lib.ctx, x, n, heads, D, pos0, table, style == ROPE_NEOX, &b->err);
}

static void cu_add_bias(void *ctx, float *y, const float *bias, int64_t n, int64_t m)
{
    cuda_backend *b = ctx;
    if (live(b)) b->lib.api->add_bias(b->lib.ctx, y, bias, n, m, &b->err);
}

static void cu_swiglu(void *ctx, float *gate, const float *up, int64_t n)
{
    cuda_backend *b = ctx;
    if (live(b)) b->lib.api->swiglu(b->lib.ctx, gate, up, n, &b->err);
}

static void cu_add(void *ctx, float *x, const float *y, int64_t n)
{
    cuda_backend *b = ctx;
    if (live(b)) b->lib.api->add(b->lib.ctx, x, y, n, &b->err);
}

static void cu_embed(void *ctx, float *x, const float *table, const int32_t *tokens, int64_t n, int64_t dim)
{
    cuda_backend *b = ctx;
    if (n > b->B) {
        kv_fail(&b->err, KV_EFAIL, "CUDA embed: %lld tokens, scratch for %lld", (long long)n, (long long)b->B);
        return;
    }
    if (live(b)) b->lib.api->upload(b->lib.ctx, b->tokens, tokens, sizeof(int32_t) * (size_t)n, &b->err);
    if (live(b)) b->lib.api->embed(b->lib.ctx, x, table, b->wt, b->tokens, n, dim, &b->err);
}

static void cu_copy_rows(void *ctx, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                         int64_t width)
{
    cuda_backend *b = ctx;
    if (live(b))
        b->lib.api->copy2d(b->lib.ctx, dst, sizeof(float) * (size_t)ldd, src, sizeof(float) * (size_t)lds,
                           sizeof(float) * (size_t)width, (size_t)rows, &b->err);
}

/* Every query head of layer l; with column sums, their chunk's contributions. The row
 * statistics land in the caller's stats when given ([2][H][n]), else in the scratch. */
static void cu_attend_layer(void *ctx, int64_t l, const float *q, const float *k, const float *v, int64_t cap,
                            int64_t H, int64_t K, int64_t D, int64_t n_cached, int64_t n, float *out, float *stats)
{
    cuda_backend *b = ctx;
    float *row_max = stats ? stats : b->row_max, *row_sum = stats ? stats + H * n : b->row_sum;
    if (n > b->B || H > b->H || (b->colsum && (l >= b->L || n_cached + n > b->T))) {
        kv_fail(&b->err, KV_EFAIL, "CUDA attention: layer %lld, %lld rows after %lld outside the prepared scratch",
                (long long)l, (long long)n, (long long)n_cached);
        return;
    }
    if (live(b))
        b->lib.api->attend(b->lib.ctx, q, k, v, cap, H, K, D, n_cached, NULL, n, out, row_max, row_sum, &b->err);
    if (live(b) && b->colsum)
        b->lib.api->colsum(b->lib.ctx, q, k, cap, H, K, D, n_cached, n, row_max, row_sum,
                           b->colsum + l * b->H * b->T, b->T, &b->err);
}

/* In-model eviction's compaction: keep (host, ascending) as int32 on the device, then each cache. */
static void cu_compact(void *ctx, float *k, float *v, const int64_t *keep, int64_t n_keep, int64_t D)
{
    cuda_backend *b = ctx;
    if (n_keep > b->T) {
        kv_fail(&b->err, KV_EFAIL, "CUDA compact: %lld rows, scratch for %lld", (long long)n_keep, (long long)b->T);
        return;
    }
    for (int64_t i = 0; i < n_keep; i++) b->keep_host[i] = (int32_t)keep[i];
    if (live(b)) b->lib.api->upload(b->lib.ctx, b->keep, b->keep_host, sizeof(int32_t) * (size_t)n_keep, &b->err);
    if (live(b)) b->lib.api->gather_rows(b->lib.ctx, k, 1, n_keep, D, b->keep, n_keep, &b->err);
    if (live(b)) b->lib.api->gather_rows(b->lib.ctx, v, 1, n_keep, D, b->keep, n_keep, &b->err);
}

/* Cache rows for the policies, copied to the host. */
static const float *cu_host_rows(void *ctx, const float *cache, int64_t n, int64_t D, float *host)
{
    cuda_backend *b = ctx;
    if (live(b)) b->lib.api->download(b->lib.ctx, host, cache, sizeof(float) * (size_t)(n * D), &b->err);
    return host;
}

static int cu_sync(void *ctx, kv_err *err)
{
    cuda_backend *b = ctx;
    if (live(b)) b->lib.api->sync(b->lib.ctx, &b->err);
    return b->err.code ? kv_fail(err, b->err.code, "%s", b->err.msg) : KV_OK;
}

static const forward_kernels FORWARD_CUDA = {
    .matmul = cu_matmul,
    .rmsnorm = cu_rmsnorm,
    .rope = cu_rope,
    .add_bias = cu_add_bias,
    .swiglu = cu_swiglu,
    .attend = NULL, /* attend_layer */
    .compact = cu_compact,
    .host_rows = cu_host_rows,
    .host_memory = false,
    .alloc = cu_alloc,
    .release = cu_release,
    .upload = cu_upload,
    .download = cu_download,
    .embed = cu_embed,
    .add = cu_add,
    .copy_rows = cu_copy_rows,
    .attend_layer = cu_attend_layer,
    .sync = cu_sync,
};

/* ---- the weights' device mirror ------------------------------------------ */

/* A device copy of n floats, as the weight type (matrices) or float32. */
static int up(cuda_backend *b, const float *h, size_t n, bool matrix, void **d, kv_err *err)
{
    *d = NULL;
    if (!h) return KV_OK;
    kvcuda_dtype dt = matrix ? b->wt : KVCUDA_F32;
    if (b->lib.api->alloc(b->lib.ctx, d, n * (size_t)cuda_lib_dtype_size(dt), "weights", err)) return err->code;
    return b->lib.api->upload_convert(b->lib.ctx, *d, h, n, dt, err);
}

static int upload_layer(cuda_backend *b, const model_config *c, const model_layer *h, model_layer *d, kv_err *err)
{
    const size_t dim = (size_t)c->dim, ffn = (size_t)c->ffn_dim, D = (size_t)c->head_dim;
    const size_t HD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    void *p[14];
    int rc = up(b, h->attn_norm, dim, false, &p[0], err) || up(b, h->wq, HD * dim, true, &p[1], err) ||
             up(b, h->wk, KD * dim, true, &p[2], err) || up(b, h->wv, KD * dim, true, &p[3], err) ||
             up(b, h->bq, HD, false, &p[4], err) || up(b, h->bk, KD, false, &p[5], err) ||
             up(b, h->bv, KD, false, &p[6], err) || up(b, h->q_norm, D, false, &p[7], err) ||
             up(b, h->k_norm, D, false, &p[8], err) || up(b, h->wo, dim * HD, true, &p[9], err) ||
             up(b, h->ffn_norm, dim, false, &p[10], err) || up(b, h->w_gate, ffn * dim, true, &p[11], err) ||
             up(b, h->w_up, ffn * dim, true, &p[12], err) || up(b, h->w_down, dim * ffn, true, &p[13], err);
    d->attn_norm = p[0], d->wq = p[1], d->wk = p[2], d->wv = p[3], d->bq = p[4], d->bk = p[5], d->bv = p[6];
    d->q_norm = p[7], d->k_norm = p[8], d->wo = p[9], d->ffn_norm = p[10], d->w_gate = p[11], d->w_up = p[12];
    d->w_down = p[13];
    return rc ? err->code : KV_OK;
}

/* Device copies of host's weights into b->dev (cfg and rope_div shared with host). */
static int upload_model(cuda_backend *b, const kv_model *host, kv_err *err)
{
    const model_config *c = &host->cfg;
    kv_model *dev = &b->dev;
    memset(dev, 0, sizeof *dev);
    dev->cfg = *c, dev->rope_div = host->rope_div;
    dev->layers = calloc((size_t)c->n_layers, sizeof *dev->layers);
    if (!dev->layers) return kv_fail(err, KV_EFAIL, "out of memory");
    const size_t Vd = (size_t)(c->vocab_size * c->dim);
    void *emb = NULL, *out = NULL, *norm = NULL;
    int rc = up(b, host->tok_embd, Vd, true, &emb, err) ||
             up(b, host->output_norm, (size_t)c->dim, false, &norm, err) ||
             (host->output != host->tok_embd && up(b, host->output, Vd, true, &out, err));
    dev->tok_embd = emb, dev->output_norm = norm, dev->output = host->output == host->tok_embd ? emb : out;
    for (int64_t l = 0; !rc && l < c->n_layers; l++) rc = upload_layer(b, c, &host->layers[l], &dev->layers[l], err);
    return rc ? err->code : KV_OK;
}

static void free_model(cuda_backend *b)
{
    kv_model *dev = &b->dev;
    if (dev->layers)
        for (int64_t l = 0; l < dev->cfg.n_layers; l++) {
            model_layer *w = &dev->layers[l];
            float *p[] = {w->attn_norm, w->wq, w->wk, w->wv, w->bq, w->bk, w->bv, w->q_norm, w->k_norm, w->wo,
                          w->ffn_norm, w->w_gate, w->w_up, w->w_down};
            for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cu_release(b, p[i]);
        }
    if (dev->output != dev->tok_embd) cu_release(b, dev->output);
    cu_release(b, dev->tok_embd), cu_release(b, dev->output_norm);
    free(dev->layers);
    memset(dev, 0, sizeof *dev);
}

/* ---- the backend's hooks --------------------------------------------------- */

static int cu_check(const backend_request *req, kv_err *err)
{
    if (req->evict)
        return kv_fail(err, KV_EUSAGE, "capture: --evict runs on the CPU only so far (its policies read every head's "
                       "attention weights, which the GPU's tiled attention never forms): drop --device cuda");
    if (req->attention_full)
        return kv_fail(err, KV_EUSAGE, "capture: --attention full is not available with --device cuda (the tiled "
                       "attention forms no weight matrix): use --attention colsum, or the CPU");
    if (req->int8)
        return kv_fail(err, KV_EUSAGE, "capture: --compute int8 runs on the CPU only: drop --device cuda");
    return KV_OK;
}

static int cu_open(const backend_request *req, void **ctx, kv_err *err)
{
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return kv_fail(err, KV_EFAIL, "--device cuda: out of memory");
    int rc = cuda_lib_open(&b->lib, NULL, 0, err);
    if (rc) {
        free(b);
        return rc;
    }
    b->wt = (kvcuda_dtype)req->weights;
    *ctx = b;
    return KV_OK;
}

static void cu_close(void *ctx)
{
    cuda_backend *b = ctx;
    free_model(b);
    cu_release(b, b->row_max), cu_release(b, b->row_sum), cu_release(b, b->tokens), cu_release(b, b->colsum);
    cu_release(b, b->keep);
    free(b->keep_host);
    cuda_lib_close(&b->lib);
    free(b);
}

/* The attention kernels' scratch for chunks of up to B rows and, with colsum, the column sums. */
static int alloc_scratch(cuda_backend *b, const model_config *c, bool colsum, kv_err *err)
{
    const size_t HB = (size_t)(c->n_heads * b->B), T = (size_t)b->T;
    if (!(b->row_max = cu_alloc(b, HB, sizeof(float), "attention row maxima", err)) ||
        !(b->row_sum = cu_alloc(b, HB, sizeof(float), "attention row sums", err)) ||
        !(b->tokens = cu_alloc(b, (size_t)b->B, sizeof(int32_t), "token ids", err)) ||
        !(b->keep = cu_alloc(b, T, sizeof(int32_t), "compaction rows", err)) ||
        !(b->keep_host = kv_calloc(T, sizeof(int32_t), "compaction rows", err)) ||
        (colsum && !(b->colsum = cu_alloc(b, (size_t)(c->n_layers * c->n_heads) * T, sizeof(double), "column sums",
                                          err))))
        return err->code;
    return KV_OK;
}

static int cu_prepare(void *ctx, const kv_model *m, int64_t T, int64_t B, bool colsum, const kv_model **walk,
                      kv_err *err)
{
    cuda_backend *b = ctx;
    if (b->prepared) return kv_fail(err, KV_EFAIL, "--device cuda: the backend already holds a model");
    if (m->wtype != MODEL_W_F32) /* the device mirror converts float32 (capture loads it so) */
        return kv_fail(err, KV_EUSAGE, "--device cuda: the host model must hold float32 weights");
    b->prepared = true;
    B = B < T ? B : T;
    cuda_budget need;
    cuda_budget_compute(m, T, B, b->wt, colsum, &need);
    int rc = cuda_budget_check(&need, b->lib.info.free_bytes, b->lib.info.total_bytes, b->lib.info.name, err);
    if (!rc) rc = upload_model(b, m, err);
    b->L = m->cfg.n_layers, b->H = m->cfg.n_heads, b->T = T, b->B = B;
    if (!rc) rc = alloc_scratch(b, &m->cfg, colsum, err);
    *walk = rc ? NULL : &b->dev;
    return rc;
}

static int cu_colsum(void *ctx, double *host, kv_err *err)
{
    cuda_backend *b = ctx;
    if (!b->colsum) return kv_fail(err, KV_EFAIL, "CUDA: no column sums were accumulated");
    int rc = cu_sync(b, err);
    return rc ? rc : b->lib.api->download(b->lib.ctx, host, b->colsum, sizeof(double) * (size_t)(b->L * b->H * b->T),
                                          err);
}

static uint64_t cu_peak_bytes(void *ctx)
{
    cuda_backend *b = ctx;
    size_t free_b = 0, total_b = 0, peak = 0;
    kv_err e = {0};
    b->lib.api->mem_info(b->lib.ctx, &free_b, &total_b, &peak, &e);
    return peak;
}

/* ---- staging for the recording path ------------------------------------- */

static int st_host_alloc(void *ctx, void **h, size_t bytes, const char *what, kv_err *err)
{
    cuda_backend *b = ctx;
    return b->lib.api->host_alloc(b->lib.ctx, h, bytes, what, err);
}

static void st_host_release(void *ctx, void *h)
{
    cuda_backend *b = ctx;
    b->lib.api->host_release(b->lib.ctx, h);
}

static int st_stage(void *ctx, void *host, void *twin, const void *src, size_t bytes, kv_err *err)
{
    cuda_backend *b = ctx;
    int rc = b->lib.api->copy2d(b->lib.ctx, twin, bytes, src, bytes, bytes, 1, err);
    return rc ? rc : b->lib.api->download_async(b->lib.ctx, host, twin, bytes, err);
}

static int st_fence(void *ctx, void **fence, kv_err *err)
{
    cuda_backend *b = ctx;
    kvcuda_fence *f = NULL;
    int rc = b->lib.api->fence(b->lib.ctx, &f, err);
    *fence = f;
    return rc;
}

static int st_fence_wait(void *ctx, void *fence, kv_err *err)
{
    const cuda_backend *b = ctx;
    return b->lib.api->fence_wait(fence, err);
}

static void st_fence_free(void *ctx, void *fence)
{
    const cuda_backend *b = ctx;
    b->lib.api->fence_free(fence);
}

static const backend_staging STAGING_CUDA = {
    .host_alloc = st_host_alloc,
    .host_release = st_host_release,
    .stage = st_stage,
    .fence = st_fence,
    .fence_wait = st_fence_wait,
    .fence_free = st_fence_free,
};

const backend_iface BACKEND_CUDA = {
    .name = "cuda",
    .kernels = &FORWARD_CUDA,
    .weight_types = true,
    .check = cu_check,
    .open = cu_open,
    .close = cu_close,
    .prepare = cu_prepare,
    .colsum = cu_colsum,
    .peak_bytes = cu_peak_bytes,
    .staging = &STAGING_CUDA,
};
