/* The CPU backend: the kernels of the forward pass (OpenBLAS for every
 * product, plain loops vectorised by the compiler for the rest) on host
 * memory, and its row of the backend table.
 *
 * The instance (open) holds the number of threads the kernels may use (and
 * with --compute int8 the quantised rows and scratch of int8_product.h); a
 * NULL context (walks made without open: the unit tests) means one. Every
 * OpenBLAS call runs on one thread (main() says so); the products are split
 * here, in blocks whose bounds depend only on the shapes (W's rows for a
 * projection, query rows for attention), and OpenMP runs the blocks on the
 * threads. Each block is the same call whichever thread runs it, so the
 * trace is the same for any --threads (docs/reproducibility.md). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/forward.h"
#include "model/int8_product.h"
#include "model/weights.h"
#include "core/attn_causal.h"
#include "core/filemap.h"

typedef struct {
    int threads;     /* >= 1 */
    bool int8;       /* --compute int8: Q8_0, Q4_0 and Q4_1 matrices multiply quantised rows (int8_product.h) */
    bool amx;        /* with int8: int8_amx(), asked at prepare */
    int8_rows x;     /* with int8: a product's rows, quantised (prepare reserves the largest) */
    float *x_was;    /* with int8: the rows x holds quantised, as they were (x.n by x.in) */
    int8_matrix *mats; /* with int8: the model's int8 matrices, packed at prepare */
    int64_t n_mats;
    char *scratch;   /* with int8: threads parts of `each` bytes */
    size_t each;
} cpu_instance;

/* A product below this many floating-point operations runs its blocks on the calling thread: starting
 * the others costs more than it saves (the blocks, hence the results, are the same). */
#define CPU_PARALLEL_FLOPS 2e6

/* The threads for nb blocks of a product of `flops` operations. */
static int threads_for(const void *ctx, int64_t nb, double flops)
{
    const int t = ctx ? ((const cpu_instance *)ctx)->threads : 1;
    return flops < CPU_PARALLEL_FLOPS || nb < 2 ? 1 : nb < t ? (int)nb : t;
}

/* The fixed split of a length into blocks of equal size, about `most` each:
 * the block length (the last block may be shorter). */
static int64_t block_len(int64_t len, int64_t most)
{
    const int64_t nb = (len + most - 1) / most;
    return (len + nb - 1) / nb;
}

/* y[n][out] = x[n][in] . W[out][in]^T as blocks of about FORWARD_WTILE of W's rows, one sgemm into y's
 * columns of each block's rows (docs/capture.md). W is float32 (w) or of 16-bit type t (w16): a 16-bit
 * block is first widened, exactly (every F16/BF16 value is a float32), into the running thread's part of
 * the tile (tile_n floats: forward_kernels.workers parts of FORWARD_WTILE rows of the widest input). Both
 * make the same calls on the same values, so they are identical bit for bit (test_weights16.py). */
static void blocked_product(void *ctx, const float *x, const float *w, const model_mat *w16, model_wtype t, float *y,
                            int64_t n, int64_t in, int64_t out, float *tile, int64_t tile_n)
{
    const int64_t step = block_len(out, FORWARD_WTILE), nb = (out + step - 1) / step;
    int nt = threads_for(ctx, nb, 2.0 * (double)n * (double)in * (double)out);
    if (w16 && nt > tile_n / (step * in)) nt = (int)(tile_n / (step * in)); /* >= 1: forward sized the tile */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (int64_t b = 0; b < nb; b++) {
        const int64_t o0 = b * step, rows = out - o0 < step ? out - o0 : step;
        float *part = w16 ? tile + (size_t)omp_get_thread_num() * (size_t)(step * in) : NULL;
        if (w16) weights_widen(w16, t, (size_t)o0 * (size_t)in, (size_t)(rows * in), part);
        const float *wb = w16 ? part : w + o0 * in;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)rows, (int)in, 1.0f, x, (int)in, wb,
                    (int)in, 0.0f, y + o0, (int)out);
    }
}

/* W (ggml blocks, int8_supports) times x quantised to int8 (--compute int8): the rows quantised 16 at a
 * time, then W's rows a panel at a time (int8_panel_rows, fewer where that leaves a thread without two
 * panels), on the threads. Every output is one thread's sum over its row's blocks in block order, so the
 * split changes nothing in the result (int8_product.h). */
static void int8_blocked_product(cpu_instance *c, const float *x, const int8_matrix *w, float *y, int64_t n,
                                 int64_t in, int64_t out)
{
    KV_ASSERT(w->in == in && w->out == out);
    KV_ASSERT(int8_rows_fit(&c->x, n, in)); /* prepare reserved the largest */
    /* rows equal bit for bit to the last product's are quantised already (q, k and v share theirs, gate and up) */
    const size_t bytes = sizeof(float) * (size_t)(n * in);
    const bool fresh = !(c->x.n == n && c->x.in == in && memcmp(c->x_was, x, bytes) == 0);
    const int64_t nq = fresh ? (n + INT8_TILE - 1) / INT8_TILE : 0;
    if (fresh) int8_quantise_begin(&c->x, n, in), memcpy(c->x_was, x, bytes);
    const int nt = threads_for(c, (out + INT8_TILE - 1) / INT8_TILE, 2.0 * (double)n * (double)in * (double)out);
    int64_t per = int8_panel_rows(in), fair = (out + 2 * nt - 1) / (2 * nt);
    fair = (fair + INT8_TILE - 1) / INT8_TILE * INT8_TILE;
    per = fair < per ? fair : per;
    const int64_t np = (out + per - 1) / per;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < nq; t++)
            int8_quantise_rows(&c->x, x, t * INT8_TILE, (t + 1) * INT8_TILE < n ? (t + 1) * INT8_TILE : n);
#pragma omp for schedule(dynamic, 1)
        for (int64_t p = 0; p < np; p++) {
            const int64_t o0 = p * per, rows = out - o0 < per ? out - o0 : per;
            int8_product(&c->x, w, o0, rows, y + o0, out, c->scratch + (size_t)omp_get_thread_num() * c->each, c->amx);
        }
    }
}

/* With --compute int8: the packing prepare made of the matrix the forward pass names `key`, else NULL. */
static const int8_matrix *packed_for(const cpu_instance *c, const void *key)
{
    for (int64_t i = 0; c && c->int8 && i < c->n_mats; i++)
        if (c->mats[i].key == key) return &c->mats[i];
    return NULL;
}

static void cpu_matmul(void *ctx, const float *x, const float *w, float *y, int64_t n, int64_t in, int64_t out)
{
    const int8_matrix *p = packed_for(ctx, w); /* W_o with --compute int8, where the file holds it in blocks */
    if (p) int8_blocked_product(ctx, x, p, y, n, in, out);
    else blocked_product(ctx, x, w, NULL, MODEL_W_F32, y, n, in, out, NULL, 0);
}

static void cpu_matmul16(void *ctx, const float *x, const model_mat *w, model_wtype t, float *y, int64_t n,
                         int64_t in, int64_t out, float *tile, int64_t tile_n)
{
    cpu_instance *c = ctx;
    if (c && c->int8 && t == MODEL_W_GGML && int8_supports(((const weights_ggml *)w)->type)) {
        const int8_matrix *p = packed_for(c, w);
        KV_ASSERT(p); /* prepare packed every one (int8_model_matrices) */
        int8_blocked_product(c, x, p, y, n, in, out);
        return;
    }
    blocked_product(ctx, x, NULL, w, t, y, n, in, out, tile, tile_n);
}

static int cpu_workers(void *ctx)
{
    return ctx ? ((const cpu_instance *)ctx)->threads : 1;
}

/* The element-wise kernels below run their rows (or runs of elements) on the threads too where there are
 * enough: each result is computed as on one thread, so the split changes nothing. */
static void cpu_rmsnorm(void *ctx, float *out, const float *x, const float *w, int64_t n, int64_t dim, double eps)
{
    const int nt = threads_for(ctx, n, 3.0 * (double)n * (double)dim);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
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
    const int nt = threads_for(ctx, n, 4.0 * (double)n * (double)heads * (double)D);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
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
    enum { RUN = 4096 };
    const int64_t nb = (n + RUN - 1) / RUN;
    const int nt = threads_for(ctx, nb, 20.0 * (double)n);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = b * RUN; i < n && i < (b + 1) * RUN; i++) {
            float g = gate[i];
            gate[i] = g / (1.0f + expf(-g)) * up[i];
        }
}

/* One head's causal attention as blocks of about CPU_ATTN_ROWS query rows (core/attn_causal.h). */
#define CPU_ATTN_ROWS 16
static void cpu_attend(void *ctx, const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0, int64_t n,
                       int64_t D, float *p, float *out, int64_t ldo, double *lse, float *mx)
{
    const int64_t step = block_len(n, CPU_ATTN_ROWS), nb = (n + step - 1) / step;
    const int nt = threads_for(ctx, nb, 4.0 * (double)n * (double)(pos0 + n) * (double)D);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (int64_t b = 0; b < nb; b++) {
        const int64_t r0 = b * step, rows = n - r0 < step ? n - r0 : step;
        attn_causal_row_block(q, ldq, k, v, pos0, n, r0, rows, D, p, out, ldo, lse, mx);
    }
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
    .workers = cpu_workers,
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

static int cpu_open(const backend_request *req, void **ctx, kv_err *err)
{
    cpu_instance *c = kv_calloc(1, sizeof *c, "CPU backend", err);
    if (!c) return err->code;
    c->threads = req->threads > 1 ? req->threads : 1;
    c->int8 = req->int8;
    *ctx = c;
    return KV_OK;
}

static void free_mats(cpu_instance *c)
{
    for (int64_t i = 0; i < c->n_mats; i++) int8_matrix_free(&c->mats[i]);
    free(c->mats), c->mats = NULL, c->n_mats = 0;
}

/* With --compute int8: the model's int8 matrices packed (int8_product.h, on the threads), the quantised
 * rows of the largest product (B rows of the widest input) and each thread's scratch, or the refusal of a
 * model none of whose matrices has an int8 product. */
static int cpu_prepare(void *ctx, const kv_model *m, int64_t T, int64_t B, bool colsum, const kv_model **walk,
                       kv_err *err)
{
    (void)T, (void)colsum;
    *walk = m;
    cpu_instance *c = ctx;
    if (!c || !c->int8) return KV_OK;
    const int64_t n = int8_model_matrices(m, NULL, NULL);
    if (n == 0)
        return kv_fail(err, KV_EUSAGE, "--compute int8: the model holds no matrix in Q8_0, Q4_0 or Q4_1 blocks (the "
                       "int8 products are for those GGUF types, kept as the file stores them: not with --weights)");
    const model_config *f = &m->cfg;
    int64_t in = f->dim > f->ffn_dim ? f->dim : f->ffn_dim;
    in = in > f->n_heads * f->head_dim ? in : f->n_heads * f->head_dim;
    in = (in + INT8_BLOCK - 1) / INT8_BLOCK * INT8_BLOCK;
    free(c->scratch), c->scratch = NULL;
    free(c->x_was), c->x_was = NULL;
    free_mats(c);
    c->amx = int8_amx();
    c->each = (int8_scratch_bytes() + 63) / 64 * 64;
    int8_matrix_ref *refs = malloc(sizeof *refs * (size_t)n);
    c->mats = calloc((size_t)n, sizeof *c->mats);
    int rc = refs && c->mats ? KV_OK : kv_fail(err, KV_EFAIL, "--compute int8: out of memory for the packed matrices");
    if (!rc) int8_model_matrices(m, refs, NULL);
    for (int64_t i = 0; !rc && i < n; i++) {
        rc = int8_matrix_reserve(&c->mats[i], refs[i].w, refs[i].in, refs[i].out, err);
        if (!rc) c->mats[i].key = refs[i].key, c->n_mats++;
        int8_matrix *p = &c->mats[i];
#pragma omp parallel for num_threads(c->threads) schedule(dynamic, 16) if (!rc && c->threads > 1)
        for (int64_t g = 0; g < p->groups; g++) int8_matrix_pack(p, g, g + 1, c->amx);
        /* the products read the packing only: the file's pages of these blocks leave memory (the embedding's
         * rows, where the output layer is tied to it, are read from the file again when looked up) */
        if (!rc && p->w->mapped) kv_filemap_drop(p->w->data, int8_matrix_file_bytes(p));
    }
    free(refs);
    if (!rc) rc = int8_rows_reserve(&c->x, B, in, err);
    if (!rc && !(c->x_was = malloc(sizeof(float) * (size_t)(B * in))))
        rc = kv_fail(err, KV_EFAIL, "--compute int8: out of memory for the products' rows");
    if (!rc && !(c->scratch = aligned_alloc(64, c->each * (size_t)c->threads)))
        rc = kv_fail(err, KV_EFAIL, "--compute int8: out of memory for the products' scratch");
    return rc;
}

static void cpu_close(void *ctx)
{
    cpu_instance *c = ctx;
    if (c) int8_rows_free(&c->x), free(c->x_was), free_mats(c), free(c->scratch);
    free(ctx);
}

const backend_iface BACKEND_CPU = {
    .name = "cpu",
    .kernels = &FORWARD_CPU,
    .weight_types = false, /* float32: the model as loaded */
    .open = cpu_open,
    .prepare = cpu_prepare,
    .close = cpu_close,
    /* no check: every option; prepare: the host model as it is (with --compute int8, its scratch);
     * no colsum: the recorder sums the weights the walk hands it; no staging: host memory */
};
