/* The CUDA forward_kernels table (kernels_cuda.h). */
#include "model/kernels_cuda.h"

#include <stdlib.h>
#include <string.h>

static struct {
    backend_cuda b;
    bool open;
    kvcuda_dtype wt;       /* weight matrices and the embedding */
    kv_err err;            /* first failure of a void kernel */
    float *row_max;        /* [H][B] attention row normalisers */
    float *row_sum;        /* [H][B] */
    int32_t *tokens;       /* [B] the chunk's ids */
    int32_t *keep;         /* [T] rows a compaction keeps */
    int32_t *keep_host;    /* [T] */
    double *colsum;        /* [L][H][T] or NULL */
    int64_t L, H, T, B;
} G;

#define API (G.b.api)
#define CTX (G.b.ctx)

/* Runs a backend call unless an earlier one failed; keeps the first error. */
#define CU(call)                                                 \
    do {                                                         \
        if (G.err.code == KV_OK) (void)(call);                   \
    } while (0)

static void *cu_alloc(size_t n, size_t size, const char *what, kv_err *err)
{
    void *d = NULL;
    if (size && n > SIZE_MAX / size) {
        kv_fail(err, KV_EFAIL, "%s: size overflow", what);
        return NULL;
    }
    if (API->alloc(CTX, &d, n * size, what, err)) return NULL;
    if (API->zero(CTX, d, n * size, err)) { /* zeroed, as the CPU table's calloc */
        API->release(CTX, d);
        return NULL;
    }
    return d;
}

static void cu_release(void *p)
{
    if (p && G.open) API->release(CTX, p);
}

static int cu_upload(void *dst, const void *src, size_t bytes, kv_err *err)
{
    return API->upload(CTX, dst, src, bytes, err);
}

static int cu_download(void *dst, const void *src, size_t bytes, kv_err *err)
{
    return API->download(CTX, dst, src, bytes, err);
}

static void cu_matmul(const float *x, const float *w, float *y, int64_t n, int64_t in, int64_t out)
{
    CU(API->matmul(CTX, x, w, G.wt, y, n, in, out, &G.err));
}

static void cu_rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t dim, double eps)
{
    CU(API->rmsnorm(CTX, out, x, w, n, dim, eps, &G.err));
}

static void cu_rope(float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0, const float *table, rope_style style)
{
    CU(API->rope(CTX, x, n, heads, D, pos0, table, style == ROPE_NEOX, &G.err));
}

static void cu_add_bias(float *y, const float *b, int64_t n, int64_t m)
{
    CU(API->add_bias(CTX, y, b, n, m, &G.err));
}

static void cu_swiglu(float *gate, const float *up, int64_t n)
{
    CU(API->swiglu(CTX, gate, up, n, &G.err));
}

static void cu_add(float *x, const float *y, int64_t n)
{
    CU(API->add(CTX, x, y, n, &G.err));
}

static void cu_embed(float *x, const float *table, const int32_t *tokens, int64_t n, int64_t dim)
{
    if (n > G.B) {
        kv_fail(&G.err, KV_EFAIL, "CUDA embed: %lld tokens, scratch for %lld", (long long)n, (long long)G.B);
        return;
    }
    CU(API->upload(CTX, G.tokens, tokens, sizeof(int32_t) * (size_t)n, &G.err));
    CU(API->embed(CTX, x, table, G.wt, G.tokens, n, dim, &G.err));
}

static void cu_copy_rows(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t width)
{
    CU(API->copy2d(CTX, dst, sizeof(float) * (size_t)ldd, src, sizeof(float) * (size_t)lds,
                   sizeof(float) * (size_t)width, (size_t)rows, &G.err));
}

/* Every query head of layer l; with column sums, their chunk's contributions. */
static void cu_attend_layer(int64_t l, const float *q, const float *k, const float *v, int64_t cap, int64_t H,
                            int64_t K, int64_t D, int64_t n_cached, int64_t n, float *out)
{
    if (n > G.B || H > G.H || (G.colsum && (l >= G.L || n_cached + n > G.T))) {
        kv_fail(&G.err, KV_EFAIL, "CUDA attention: layer %lld, %lld rows after %lld outside the prepared scratch",
                (long long)l, (long long)n, (long long)n_cached);
        return;
    }
    CU(API->attend(CTX, q, k, v, cap, H, K, D, n_cached, NULL, n, out, G.row_max, G.row_sum, &G.err));
    if (G.colsum)
        CU(API->colsum(CTX, q, k, cap, H, K, D, n_cached, n, G.row_max, G.row_sum, G.colsum + l * G.H * G.T, G.T,
                       &G.err));
}

/* In-model eviction's compaction: keep (host, ascending) as int32 on the device, then each cache. */
static void cu_compact(float *k, float *v, const int64_t *keep, int64_t n_keep, int64_t D)
{
    if (n_keep > G.T) {
        kv_fail(&G.err, KV_EFAIL, "CUDA compact: %lld rows, scratch for %lld", (long long)n_keep, (long long)G.T);
        return;
    }
    for (int64_t i = 0; i < n_keep; i++) G.keep_host[i] = (int32_t)keep[i];
    CU(API->upload(CTX, G.keep, G.keep_host, sizeof(int32_t) * (size_t)n_keep, &G.err));
    CU(API->gather_rows(CTX, k, 1, n_keep, D, G.keep, n_keep, &G.err));
    CU(API->gather_rows(CTX, v, 1, n_keep, D, G.keep, n_keep, &G.err));
}

/* Cache rows for the policies, copied to the host. */
static const float *cu_host_rows(const float *cache, int64_t n, int64_t D, float *host)
{
    CU(API->download(CTX, host, cache, sizeof(float) * (size_t)(n * D), &G.err));
    return host;
}

static int cu_sync(kv_err *err)
{
    if (G.err.code == KV_OK) API->sync(CTX, &G.err);
    return G.err.code ? kv_fail(err, G.err.code, "%s", G.err.msg) : KV_OK;
}

static forward_kernels TABLE = {
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

int kernels_cuda_open(const char *lib, kvcuda_dtype wt, kv_err *err)
{
    if (G.open) return kv_fail(err, KV_EFAIL, "--device cuda: the backend is already open");
    memset(&G, 0, sizeof G);
    int rc = backend_open_cuda(&G.b, lib, 0, err);
    if (rc) return rc;
    G.open = true, G.wt = wt;
    return KV_OK;
}

const forward_kernels *kernels_cuda_table(void)
{
    return &TABLE;
}

backend_cuda *kernels_cuda_backend(void)
{
    return &G.b;
}

int kernels_cuda_prepare(const model_config *c, int64_t T, int64_t B, bool colsum, kv_err *err)
{
    G.L = c->n_layers, G.H = c->n_heads, G.T = T, G.B = B;
    const size_t HB = (size_t)(c->n_heads * B);
    if (!(G.row_max = cu_alloc(HB, sizeof(float), "attention row maxima", err)) ||
        !(G.row_sum = cu_alloc(HB, sizeof(float), "attention row sums", err)) ||
        !(G.tokens = cu_alloc((size_t)B, sizeof(int32_t), "token ids", err)) ||
        !(G.keep = cu_alloc((size_t)T, sizeof(int32_t), "compaction rows", err)) ||
        !(G.keep_host = kv_calloc((size_t)T, sizeof(int32_t), "compaction rows", err)) ||
        (colsum && !(G.colsum = cu_alloc((size_t)(c->n_layers * c->n_heads * T), sizeof(double), "column sums", err))))
        return err->code;
    return KV_OK;
}

int kernels_cuda_colsum_download(double *host, kv_err *err)
{
    if (!G.colsum) return kv_fail(err, KV_EFAIL, "CUDA: no column sums were accumulated");
    int rc = cu_sync(err);
    return rc ? rc : API->download(CTX, host, G.colsum, sizeof(double) * (size_t)(G.L * G.H * G.T), err);
}

/* A device copy of n floats, as the weight type (matrices) or float32. */
static int up(const float *h, size_t n, bool matrix, void **d, kv_err *err)
{
    *d = NULL;
    if (!h) return KV_OK;
    kvcuda_dtype dt = matrix ? G.wt : KVCUDA_F32;
    if (API->alloc(CTX, d, n * (size_t)backend_dtype_size(dt), "weights", err)) return err->code;
    return API->upload_convert(CTX, *d, h, n, dt, err);
}

static int upload_layer(const model_config *c, const model_layer *h, model_layer *d, kv_err *err)
{
    const size_t dim = (size_t)c->dim, ffn = (size_t)c->ffn_dim, D = (size_t)c->head_dim;
    const size_t HD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    void *p[14];
    int rc = up(h->attn_norm, dim, false, &p[0], err) || up(h->wq, HD * dim, true, &p[1], err) ||
             up(h->wk, KD * dim, true, &p[2], err) || up(h->wv, KD * dim, true, &p[3], err) ||
             up(h->bq, HD, false, &p[4], err) || up(h->bk, KD, false, &p[5], err) || up(h->bv, KD, false, &p[6], err) ||
             up(h->q_norm, D, false, &p[7], err) || up(h->k_norm, D, false, &p[8], err) ||
             up(h->wo, dim * HD, true, &p[9], err) || up(h->ffn_norm, dim, false, &p[10], err) ||
             up(h->w_gate, ffn * dim, true, &p[11], err) || up(h->w_up, ffn * dim, true, &p[12], err) ||
             up(h->w_down, dim * ffn, true, &p[13], err);
    d->attn_norm = p[0], d->wq = p[1], d->wk = p[2], d->wv = p[3], d->bq = p[4], d->bk = p[5], d->bv = p[6];
    d->q_norm = p[7], d->k_norm = p[8], d->wo = p[9], d->ffn_norm = p[10], d->w_gate = p[11], d->w_up = p[12];
    d->w_down = p[13];
    return rc ? err->code : KV_OK;
}

int kernels_cuda_upload_model(const kv_model *host, kv_model *dev, kv_err *err)
{
    const model_config *c = &host->cfg;
    memset(dev, 0, sizeof *dev);
    dev->cfg = *c, dev->rope_div = host->rope_div;
    dev->layers = calloc((size_t)c->n_layers, sizeof *dev->layers);
    if (!dev->layers) return kv_fail(err, KV_EFAIL, "out of memory");
    const size_t Vd = (size_t)(c->vocab_size * c->dim);
    void *emb = NULL, *out = NULL, *norm = NULL;
    int rc = up(host->tok_embd, Vd, true, &emb, err) || up(host->output_norm, (size_t)c->dim, false, &norm, err) ||
             (host->output != host->tok_embd && up(host->output, Vd, true, &out, err));
    dev->tok_embd = emb, dev->output_norm = norm, dev->output = host->output == host->tok_embd ? emb : out;
    for (int64_t l = 0; !rc && l < c->n_layers; l++) rc = upload_layer(c, &host->layers[l], &dev->layers[l], err);
    return rc ? err->code : KV_OK;
}

void kernels_cuda_free_model(kv_model *dev)
{
    if (dev->layers)
        for (int64_t l = 0; l < dev->cfg.n_layers; l++) {
            model_layer *w = &dev->layers[l];
            float *p[] = {w->attn_norm, w->wq, w->wk, w->wv, w->bq, w->bk, w->bv, w->q_norm, w->k_norm, w->wo,
                          w->ffn_norm, w->w_gate, w->w_up, w->w_down};
            for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cu_release(p[i]);
        }
    if (dev->output != dev->tok_embd) cu_release(dev->output);
    cu_release(dev->tok_embd), cu_release(dev->output_norm);
    free(dev->layers);
    memset(dev, 0, sizeof *dev);
}

uint64_t kernels_cuda_peak_bytes(void)
{
    size_t free_b = 0, total_b = 0, peak = 0;
    kv_err e = {0};
    if (G.open) API->mem_info(CTX, &free_b, &total_b, &peak, &e);
    return peak;
}

void kernels_cuda_close(void)
{
    if (!G.open) return;
    cu_release(G.row_max), cu_release(G.row_sum), cu_release(G.tokens), cu_release(G.colsum), cu_release(G.keep);
    free(G.keep_host);
    backend_close_cuda(&G.b);
    memset(&G, 0, sizeof G);
}
