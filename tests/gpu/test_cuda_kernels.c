/* Every CUDA kernel against its CPU reference (the CPU backend's function),
 * on random non-degenerate inputs, with tolerance abs + rel·|ref|.
 * Run by `make test-gpu`; without a usable GPU it prints why and skips
 * (exit 0). TAP output. Tolerances (docs/cuda.md): float32 paths 1e-5 abs
 * + 1e-4 rel (summation order only); f16/bf16 products against the same
 * product of the rounded operands on the CPU, 1e-4 + 1e-3 rel. */
#include "tests/gpu/gpu_check.h"

#include "model/forward.h"
#include "core/attn_causal.h"
#include "core/attn_colsum.h"
#include "core/half.h"
#include "core/rope.h"

static kv_rng R;

/* x as the device holds it in type dt (rounded to nearest even) */
static float as_stored(float x, kvcuda_dtype dt)
{
    if (dt == KVCUDA_F16) return half_to_float(half_from_float(x));
    return dt == KVCUDA_BF16 ? bf16_to_float(bf16_from_float(x)) : x;
}

static void test_matmul(gpu_t *g, kvcuda_dtype dt, const char *name)
{
    const int64_t n = 37, in = 96, out = 80;
    float *x = rand_floats(&R, n * in, 1.0, 0.0), *w = rand_floats(&R, out * in, 0.2, 0.0);
    float *ref = malloc(sizeof(float) * n * out), *got = malloc(sizeof(float) * n * out);
    float *xr = malloc(sizeof(float) * n * in), *wr = malloc(sizeof(float) * out * in);
    for (int64_t i = 0; i < n * in; i++) /* the reference multiplies the operands as the GPU holds them */
        xr[i] = as_stored(x[i], dt);
    for (int64_t i = 0; i < out * in; i++)
        wr[i] = as_stored(w[i], dt);
    FORWARD_CPU.matmul(NULL, xr, wr, ref, n, in, out);
    kv_err err = {0};
    float *dx = gpu_upload(g, x, sizeof(float) * n * in), *dy = gpu_upload(g, NULL, sizeof(float) * n * out);
    void *dw = gpu_upload(g, NULL, (size_t)out * in * (size_t)cuda_lib_dtype_size(dt));
    int ok = dx && dy && dw && !g->b.api->upload_convert(g->b.ctx, dw, w, (size_t)(out * in), dt, &err) &&
             !g->b.api->matmul(g->b.ctx, dx, dw, dt, dy, n, in, out, &err) &&
             !gpu_download(g, got, dy, sizeof(float) * n * out);
    if (err.code) printf("# %s\n", err.msg);
    ok = ok && gpu_compare_f(name, ref, got, (size_t)(n * out), dt == KVCUDA_F32 ? 1e-5 : 1e-4,
                             dt == KVCUDA_F32 ? 1e-4 : 1e-3);
    if (ok && dt != KVCUDA_F32) { /* for the record: against the unrounded float32 product */
        FORWARD_CPU.matmul(NULL, x, w, ref, n, in, out);
        gpu_gap("(information) the same product in float32", ref, got, (size_t)(n * out));
    }
    gpu_result(g, ok, name);
    gpu_free(g, dx), gpu_free(g, dy), gpu_free(g, dw);
    free(x), free(w), free(ref), free(got), free(xr), free(wr);
}

static void test_rmsnorm(gpu_t *g, int64_t n, int64_t dim, int in_place, const char *name)
{
    float *x = rand_floats(&R, n * dim, 1.5, 0.3), *w = rand_floats(&R, dim, 0.3, 1.0);
    float *ref = malloc(sizeof(float) * n * dim), *got = malloc(sizeof(float) * n * dim);
    FORWARD_CPU.rmsnorm(NULL, ref, x, w, n, dim, 1e-5);
    kv_err err = {0};
    float *dx = gpu_upload(g, x, sizeof(float) * n * dim), *dw = gpu_upload(g, w, sizeof(float) * dim);
    float *dout = in_place ? dx : gpu_upload(g, NULL, sizeof(float) * n * dim);
    int ok = dx && dw && dout && !g->b.api->rmsnorm(g->b.ctx, dout, dx, dw, n, dim, 1e-5, &err) &&
             !gpu_download(g, got, dout, sizeof(float) * n * dim);
    if (err.code) printf("# %s\n", err.msg);
    gpu_result(g, ok && gpu_compare_f(name, ref, got, (size_t)(n * dim), 1e-6, 1e-5), name);
    if (!in_place) gpu_free(g, dout);
    gpu_free(g, dx), gpu_free(g, dw);
    free(x), free(w), free(ref), free(got);
}

static void test_rope(gpu_t *g, rope_style style, int scaled, const char *name)
{
    const int64_t T = 300, n = 45, heads = 6, D = 64, pos0 = 250;
    double div[32];
    rope_llama3_divisors(div, D, 500000.0, 32.0, 1.0, 4.0, 8192.0);
    float *tab = malloc(sizeof(float) * T * D);
    rope_table_fill_scaled(tab, T, D, 500000.0, scaled ? div : NULL);
    float *x = rand_floats(&R, n * heads * D, 1.0, 0.0), *got = malloc(sizeof(float) * n * heads * D);
    float *dx = gpu_upload(g, x, sizeof(float) * n * heads * D), *dt = gpu_upload(g, tab, sizeof(float) * T * D);
    FORWARD_CPU.rope(NULL, x, n, heads, D, pos0, tab, style);
    kv_err err = {0};
    int ok = dx && dt && !g->b.api->rope(g->b.ctx, dx, n, heads, D, pos0, dt, style == ROPE_NEOX, &err) &&
             !gpu_download(g, got, dx, sizeof(float) * n * heads * D);
    if (err.code) printf("# %s\n", err.msg);
    gpu_result(g, ok && gpu_compare_f(name, x, got, (size_t)(n * heads * D), 1e-6, 1e-6), name);
    gpu_free(g, dx), gpu_free(g, dt);
    free(tab), free(x), free(got);
}

/* add_bias, swiglu and the residual add: three element kernels. */
static void test_elementwise(gpu_t *g)
{
    const int64_t n = 33, m = 130;
    float *y = rand_floats(&R, n * m, 1.0, 0.0), *b = rand_floats(&R, m, 0.5, 0.0);
    float *up = rand_floats(&R, n * m, 1.0, 0.0);
    float *got = malloc(sizeof(float) * n * m), *ref = malloc(sizeof(float) * n * m);
    float *dy = gpu_upload(g, y, sizeof(float) * n * m), *db = gpu_upload(g, b, sizeof(float) * m);
    float *dup = gpu_upload(g, up, sizeof(float) * n * m);
    kv_err err = {0};
    memcpy(ref, y, sizeof(float) * n * m);
    FORWARD_CPU.add_bias(NULL, ref, b, n, m);
    int ok = dy && db && dup && !g->b.api->add_bias(g->b.ctx, dy, db, n, m, &err) &&
             !gpu_download(g, got, dy, sizeof(float) * n * m);
    gpu_result(g, ok && gpu_compare_f("add_bias", ref, got, (size_t)(n * m), 0, 0), "add_bias (exact)");
    FORWARD_CPU.swiglu(NULL, ref, up, n * m);
    ok = !g->b.api->swiglu(g->b.ctx, dy, dup, n * m, &err) && !gpu_download(g, got, dy, sizeof(float) * n * m);
    gpu_result(g, ok && gpu_compare_f("swiglu", ref, got, (size_t)(n * m), 1e-6, 1e-5), "swiglu");
    for (int64_t i = 0; i < n * m; i++) ref[i] += up[i];
    ok = !g->b.api->add(g->b.ctx, dy, dup, n * m, &err) && !gpu_download(g, got, dy, sizeof(float) * n * m);
    gpu_result(g, ok && gpu_compare_f("residual add", ref, got, (size_t)(n * m), 1e-6, 1e-5), "residual add");
    if (err.code) printf("# %s\n", err.msg);
    gpu_free(g, dy), gpu_free(g, db), gpu_free(g, dup);
    free(y), free(b), free(up), free(got), free(ref);
}

static void test_embed(gpu_t *g, kvcuda_dtype dt, const char *name)
{
    const int64_t V = 50, dim = 70, n = 9;
    float *table = rand_floats(&R, V * dim, 1.0, 0.0), *got = malloc(sizeof(float) * n * dim);
    float *ref = malloc(sizeof(float) * n * dim);
    int32_t tok[9] = {3, 0, 49, 7, 7, 12, 48, 1, 30};
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < dim; i++) {
            float v = table[tok[r] * dim + i];
            ref[r * dim + i] = as_stored(v, dt);
        }
    kv_err err = {0};
    void *dtab = gpu_upload(g, NULL, (size_t)(V * dim) * (size_t)cuda_lib_dtype_size(dt));
    int32_t *dtok = gpu_upload(g, tok, sizeof tok);
    float *dx = gpu_upload(g, NULL, sizeof(float) * n * dim);
    int ok = dtab && dtok && dx && !g->b.api->upload_convert(g->b.ctx, dtab, table, (size_t)(V * dim), dt, &err) &&
             !g->b.api->embed(g->b.ctx, dx, dtab, dt, dtok, n, dim, &err) &&
             !gpu_download(g, got, dx, sizeof(float) * n * dim);
    if (err.code) printf("# %s\n", err.msg);
    gpu_result(g, ok && gpu_compare_f(name, ref, got, (size_t)(n * dim), 0, 0), name);
    gpu_free(g, dtab), gpu_free(g, dtok), gpu_free(g, dx);
    free(table), free(got), free(ref);
}

/* Cache compaction: ascending keep lists per head, against a host loop. */
static void test_gather(gpu_t *g)
{
    const int64_t heads = 5, cap = 300, D = 40, n_keep = 123;
    float *cache = rand_floats(&R, heads * cap * D, 1.0, 0.0), *got = malloc(sizeof(float) * heads * cap * D);
    float *ref = malloc(sizeof(float) * heads * cap * D);
    int32_t *keep = malloc(sizeof(int32_t) * heads * n_keep);
    memcpy(ref, cache, sizeof(float) * heads * cap * D);
    for (int64_t h = 0; h < heads; h++) { /* a sorted random subset of exactly n_keep rows (selection sampling) */
        int64_t need = n_keep, left = cap, k = 0;
        for (int64_t j = 0; j < cap; j++, left--)
            if (rng_uniform(&R) * (double)left < (double)need) keep[h * n_keep + k++] = (int32_t)j, need--;
        for (int64_t i = 0; i < n_keep; i++)
            memcpy(ref + (h * cap + i) * D, cache + (h * cap + keep[h * n_keep + i]) * D, sizeof(float) * D);
    }
    kv_err err = {0};
    float *dc = gpu_upload(g, cache, sizeof(float) * heads * cap * D);
    int32_t *dk = gpu_upload(g, keep, sizeof(int32_t) * heads * n_keep);
    int ok = dc && dk && !g->b.api->gather_rows(g->b.ctx, dc, heads, cap, D, dk, n_keep, &err) &&
             !gpu_download(g, got, dc, sizeof(float) * heads * cap * D);
    if (err.code) printf("# %s\n", err.msg);
    ok = ok && gpu_compare_f("gather_rows", ref, got, (size_t)(heads * cap * D), 0, 0);
    gpu_result(g, ok, "gather_rows (exact, in place)");
    gpu_free(g, dc), gpu_free(g, dk);
    free(cache), free(got), free(ref), free(keep);
}

typedef struct {
    int64_t H, K, D, cap, pos0, n;
    int per_head; /* n_cached per kv head: pos0 - 7 g */
} attn_case;

/* CPU reference of one layer: out [n][H*D], lse [H][n], colsum [H][pos0+n]. */
static void attn_reference(const attn_case *a, const float *q, const float *k, const float *v, float *out, double *lse,
                           double *colsum)
{
    const int64_t G = a->H / a->K, D = a->D;
    float *p = malloc(sizeof(float) * a->n * (a->pos0 + a->n)), *qh = malloc(sizeof(float) * a->n * D);
    float *scratch = malloc(sizeof(float) * a->n * (a->pos0 + a->n));
    for (int64_t h = 0; h < a->H; h++) {
        const int64_t g = h / G, c = a->per_head ? a->pos0 - 7 * g : a->pos0;
        const float *kh = k + g * a->cap * D, *vh = v + g * a->cap * D;
        attn_causal_rows(q + h * D, a->H * D, kh, vh, c, a->n, D, p, out + h * D, a->H * D, lse + h * a->n, NULL);
        if (!colsum) continue;
        for (int64_t r = 0; r < a->n; r++) memcpy(qh + r * D, q + r * a->H * D + h * D, sizeof(float) * D);
        attn_colsum_add_rows(qh, a->pos0, a->n, kh, D, (float)(1.0 / sqrt((double)D)), colsum + h * (a->pos0 + a->n),
                             scratch);
    }
    free(p), free(qh), free(scratch);
}

static int attn_gpu(gpu_t *g, const attn_case *a, const float *q, const float *k, const float *v, float *out,
                    double *lse, double *colsum)
{
    const int64_t H = a->H, D = a->D, n = a->n, cols = a->pos0 + a->n;
    kv_err err = {0};
    int32_t nc[64];
    for (int64_t i = 0; i < a->K; i++) nc[i] = (int32_t)(a->pos0 - 7 * i);
    float *dq = gpu_upload(g, q, sizeof(float) * n * H * D), *dk = gpu_upload(g, k, sizeof(float) * a->K * a->cap * D);
    float *dv = gpu_upload(g, v, sizeof(float) * a->K * a->cap * D);
    float *dout = gpu_upload(g, NULL, sizeof(float) * n * H * D);
    float *dm = gpu_upload(g, NULL, sizeof(float) * H * n), *dl = gpu_upload(g, NULL, sizeof(float) * H * n);
    int32_t *dnc = a->per_head ? gpu_upload(g, nc, sizeof(int32_t) * a->K) : NULL;
    double *dcs = colsum ? gpu_upload(g, colsum, sizeof(double) * H * cols) : NULL;
    float *m = malloc(sizeof(float) * H * n), *l = malloc(sizeof(float) * H * n);
    int rc = !(dq && dk && dv && dout && dm && dl) ||
             g->b.api->attend(g->b.ctx, dq, dk, dv, a->cap, H, a->K, D, a->pos0, dnc, n, dout, dm, dl, &err) ||
             (dcs && g->b.api->colsum(g->b.ctx, dq, dk, a->cap, H, a->K, D, a->pos0, n, dm, dl, dcs, cols, &err)) ||
             gpu_download(g, out, dout, sizeof(float) * n * H * D) || gpu_download(g, m, dm, sizeof(float) * H * n) ||
             gpu_download(g, l, dl, sizeof(float) * H * n) ||
             (dcs && gpu_download(g, colsum, dcs, sizeof(double) * H * cols));
    if (err.code) printf("# %s\n", err.msg);
    for (int64_t i = 0; i < H * n; i++) lse[i] = (double)m[i] + log((double)l[i]);
    gpu_free(g, dq), gpu_free(g, dk), gpu_free(g, dv), gpu_free(g, dout), gpu_free(g, dm), gpu_free(g, dl);
    if (dnc) gpu_free(g, dnc);
    if (dcs) gpu_free(g, dcs);
    free(m), free(l);
    return rc;
}

static void test_attention(gpu_t *g, attn_case a, const char *name)
{
    const int64_t HD = a.H * a.D, cols = a.pos0 + a.n;
    /* scores of spread ~2: softmax far from uniform and far from one-hot */
    float *q = rand_floats(&R, a.n * HD, 1.4, 0.0), *k = rand_floats(&R, a.K * a.cap * a.D, 1.4, 0.1);
    float *v = rand_floats(&R, a.K * a.cap * a.D, 1.0, 0.0);
    float *ref = malloc(sizeof(float) * a.n * HD), *got = malloc(sizeof(float) * a.n * HD);
    double *lse_ref = malloc(sizeof(double) * a.H * a.n), *lse = malloc(sizeof(double) * a.H * a.n);
    double *cs_ref = a.per_head ? NULL : calloc((size_t)(a.H * cols), sizeof(double));
    double *cs = a.per_head ? NULL : calloc((size_t)(a.H * cols), sizeof(double));
    attn_reference(&a, q, k, v, ref, lse_ref, cs_ref);
    int ok = !attn_gpu(g, &a, q, k, v, got, lse, cs);
    char what[160];
    snprintf(what, sizeof what, "%s: outputs", name);
    ok = ok && gpu_compare_f(what, ref, got, (size_t)(a.n * HD), 1e-5, 1e-4);
    snprintf(what, sizeof what, "%s: row log-sum-exp", name);
    ok = ok && gpu_compare(what, lse_ref, lse, (size_t)(a.H * a.n), 1e-5, 1e-5);
    if (cs) {
        snprintf(what, sizeof what, "%s: column sums", name);
        ok = ok && gpu_compare(what, cs_ref, cs, (size_t)(a.H * cols), 1e-6, 1e-4);
    }
    gpu_result(g, ok, name);
    free(q), free(k), free(v), free(ref), free(got), free(lse_ref), free(lse), free(cs_ref), free(cs);
}

static void run_all(gpu_t *g)
{
    test_matmul(g, KVCUDA_F32, "matmul f32 weights");
    test_matmul(g, KVCUDA_F16, "matmul f16 weights (f32 accumulate)");
    test_matmul(g, KVCUDA_BF16, "matmul bf16 weights (f32 accumulate)");
    test_rmsnorm(g, 7, 300, 0, "rmsnorm");
    test_rmsnorm(g, 7 * 8, 64, 1, "per-head q/k rmsnorm, in place");
    test_rope(g, ROPE_INTERLEAVED, 0, "rope interleaved");
    test_rope(g, ROPE_NEOX, 1, "rope neox, llama3 divisors");
    test_elementwise(g);
    test_embed(g, KVCUDA_F32, "embed f32 (exact)");
    test_embed(g, KVCUDA_BF16, "embed bf16 (exact after rounding)");
    test_gather(g);
    test_attention(g, (attn_case){8, 4, 8, 64, 0, 40, 0}, "attention D=8 (stories260K), first chunk");
    test_attention(g, (attn_case){8, 2, 64, 200, 100, 45, 0}, "attention D=64 GQA 4, 100 cached");
    test_attention(g, (attn_case){32, 8, 128, 3300, 3000, 128, 0}, "attention D=128 (llama-3 8B heads), 3000 cached");
    test_attention(g, (attn_case){4, 2, 256, 120, 60, 33, 0}, "attention D=256, 60 cached");
    test_attention(g, (attn_case){8, 4, 64, 200, 150, 20, 1}, "attention with per-head cache lengths (eviction)");
    test_attention(g, (attn_case){4, 4, 64, 20, 3, 1, 0}, "attention of one query after 3 cached keys");
}

int main(int argc, char **argv)
{
    gpu_t g;
    memset(&g, 0, sizeof g);
    kv_err err = {0};
    rng_init(&R, 8, 0, 0, 0);
    const int probe = argc > 1 && strcmp(argv[1], "--probe") == 0; /* only: is there a usable GPU? */
    const char *lib = argc > 1 + probe ? argv[1 + probe] : NULL;
    if (cuda_lib_open(&g.b, lib, 0, &err)) {
        printf(probe ? "%s\n" : "1..0 # skip test_cuda_kernels: %s\n", err.msg);
        return probe ? 1 : 0;
    }
    const kvcuda_info *in = &g.b.info;
    printf("%sdevice: %s (sm_%d%d, %d SMs, %.1f GiB free), runtime %d, driver %d\n", probe ? "" : "# ", in->name,
           in->cc_major, in->cc_minor, in->sm_count, in->free_bytes / 1073741824.0, in->runtime_version,
           in->driver_version);
    if (probe) return cuda_lib_close(&g.b), 0;
    run_all(&g);
    printf("1..%d\n", g.n);
    cuda_lib_close(&g.b);
    return g.failed ? 1 : 0;
}
