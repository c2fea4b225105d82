/* The backends' host side, on a machine without a GPU: the table of
 * backends (names, the CPU's trivial row), what the CUDA backend refuses;
 * the device-memory budget (numbers of a known shape, refusal with the
 * numbers), the loader's errors (library missing; present but no usable
 * device), the table of build/libkvtrace_cuda.so complete when nvcc built
 * it; and, on the host emulation of the library, two CUDA instances open at
 * once, each with its own state: the same walk on both gives the CPU's
 * logits, and one instance's failure stays its own. */
#include "testutil.h"

#include "core/model_shapes.h"
#include "model/backend.h"
#include "model/cuda_budget.h"

static void shape_model(kv_model *m, const char *name)
{
    memset(m, 0, sizeof *m);
    const model_shape *s = model_shape_find(name);
    assert_non_null(s);
    model_config *c = &m->cfg;
    c->n_layers = s->n_layers, c->n_heads = s->n_heads, c->n_kv_heads = s->n_kv_heads;
    c->head_dim = s->head_dim, c->dim = s->dim, c->ffn_dim = s->ffn_dim, c->vocab_size = s->vocab_size;
}

static void budget_of_llama_8b(void **state)
{
    (void)state;
    kv_model m;
    shape_model(&m, "llama-3.1-8b");
    cuda_budget b;
    cuda_budget_compute(&m, 8192, 128, KVCUDA_BF16, true, &b);
    const uint64_t L = 32, dim = 4096, ffn = 14336, V = 128256, HD = 4096, KD = 1024;
    uint64_t mat = L * (HD * dim + 2 * KD * dim + dim * HD + 3 * ffn * dim) + 2 * V * dim;
    assert_true(b.weights == mat * 2 + (L * 2 * dim + dim) * 4);
    assert_true(b.weights > (uint64_t)14 << 30 && b.weights < (uint64_t)16 << 30); /* ~8.0e9 bf16 */
    assert_true(b.kv_cache == (uint64_t)2 << 30);                                  /* 2 L K T D f32 */
    assert_true(b.colsum == L * 32 * 8192 * 8);
    assert_true(b.scratch < (uint64_t)1 << 30); /* O(B (dim + ffn + V)) + slack, not T x T */
    assert_true(b.total == b.weights + b.kv_cache + b.scratch + b.colsum);
    cuda_budget f32;
    cuda_budget_compute(&m, 8192, 128, KVCUDA_F32, false, &f32);
    assert_true(f32.weights > 2 * b.weights - ((uint64_t)2 << 20) && f32.colsum == 0);
    kv_err err = {0};
    assert_int_equal(cuda_budget_check(&b, (uint64_t)139 << 30, (uint64_t)140 << 30, "H200", &err), KV_OK);
    assert_int_equal(cuda_budget_check(&b, (uint64_t)10 << 30, (uint64_t)16 << 30, "a small GPU", &err), KV_EFAIL);
    printf("# %s\n", err.msg);
    assert_non_null(strstr(err.msg, "needs 17."));
    assert_non_null(strstr(err.msg, "KV cache 2.00"));
    assert_non_null(strstr(err.msg, "a small GPU has 10.00 GiB free of 16.00 GiB"));
}

static void budget_grows_with_tokens_not_squared(void **state)
{
    (void)state;
    kv_model m;
    shape_model(&m, "llama-3.2-1b");
    cuda_budget a, b;
    cuda_budget_compute(&m, 4096, 128, KVCUDA_F32, true, &a);
    cuda_budget_compute(&m, 32768, 128, KVCUDA_F32, true, &b);
    /* 8x the tokens: the cache and column sums 8x, scratch by the RoPE table only */
    assert_true(b.kv_cache == 8 * a.kv_cache && b.colsum == 8 * a.colsum);
    assert_true(b.scratch - a.scratch == (uint64_t)(32768 - 4096) * 64 * 4);
}

static void missing_library(void **state)
{
    (void)state;
    cuda_lib b;
    kv_err err = {0};
    assert_int_equal(cuda_lib_open(&b, "/nonexistent/libkvtrace_cuda.so", 0, &err), KV_EFAIL);
    printf("# %s\n", err.msg);
    assert_non_null(strstr(err.msg, "--device cuda: cannot load the CUDA backend /nonexistent/libkvtrace_cuda.so"));
    assert_null(strchr(err.msg, '\n'));
    assert_null(b.dl);
}

/* The library make built (skipped where nvcc is absent). */
static bool built_library(char *path, size_t cap)
{
    const char *root = getenv("ROOT");
    snprintf(path, cap, "%s/build/libkvtrace_cuda.so", root ? root : ".");
    return access(path, F_OK) == 0;
}

static void library_table_and_no_device(void **state)
{
    (void)state;
    char path[4096];
    if (!built_library(path, sizeof path)) tu_skip("%s not built (no nvcc with cuBLAS here)", path);
    cuda_lib b;
    kv_err err = {0};
    assert_int_equal(cuda_lib_load(&b, path, &err), KV_OK);
    const kvcuda_api *a = b.api;
    assert_int_equal(a->abi, KVCUDA_ABI);
    assert_true(a->size == sizeof(kvcuda_api));
    const void *const *fn = (const void *const *)&a->open; /* every entry after the header is set */
    size_t nfn = (sizeof(kvcuda_api) - offsetof(kvcuda_api, open)) / sizeof(void *);
    for (size_t i = 0; i < nfn; i++) assert_non_null(fn[i]);
    cuda_lib_close(&b);
    int rc = cuda_lib_open(&b, path, 0, &err);
    if (rc == KV_OK) { /* a machine with a GPU */
        printf("# device: %s, %.1f GiB free\n", b.info.name, b.info.free_bytes / 1073741824.0);
        cuda_lib_close(&b);
        return;
    }
    printf("# %s\n", err.msg);
    assert_int_equal(rc, KV_EFAIL);
    assert_non_null(strstr(err.msg, "--device cuda: no usable CUDA device: "));
}

static void table_of_backends(void **state)
{
    (void)state;
    const backend_iface *const *all = backend_all();
    assert_ptr_equal(all[0], &BACKEND_CPU); /* the default */
    assert_ptr_equal(backend_find("cpu"), &BACKEND_CPU);
    assert_ptr_equal(backend_find("cuda"), &BACKEND_CUDA);
    assert_null(backend_find("tpu"));
    char names[64];
    backend_names(names, sizeof names);
    assert_string_equal(names, "cpu or cuda");
    for (const backend_iface *const *b = all; *b; b++) { /* every row has a name and a complete kernel table */
        const forward_kernels *k = (*b)->kernels;
        assert_non_null((*b)->name);
        assert_non_null(k);
        assert_true(k->matmul && k->rmsnorm && k->rope && k->add_bias && k->swiglu && (k->attend || k->attend_layer));
        assert_true(k->alloc && k->release && k->upload && k->download && k->embed && k->add && k->copy_rows && k->sync);
        assert_true(k->host_memory == ((*b)->staging == NULL)); /* host memory, or a way to stage it */
    }
    /* the CPU: every request taken; the instance holds the threads (at least one) */
    const backend_request all_of_it = {.evict = true, .attention_full = true, .threads = 3};
    void *ctx = NULL;
    kv_err err = {0};
    assert_int_equal(backend_open(&BACKEND_CPU, &all_of_it, &ctx, &err), KV_OK);
    assert_non_null(ctx);
    assert_int_equal(BACKEND_CPU.kernels->workers(ctx), 3);
    backend_close(&BACKEND_CPU, ctx);
    assert_int_equal(backend_open(&BACKEND_CPU, &(backend_request){.threads = 0}, &ctx, &err), KV_OK);
    assert_int_equal(BACKEND_CPU.kernels->workers(ctx), 1);
    backend_close(&BACKEND_CPU, ctx);
    assert_int_equal(BACKEND_CPU.kernels->workers(NULL), 1); /* walks made without open: one thread */
    assert_false(BACKEND_CPU.weight_types);
    assert_true(BACKEND_CUDA.weight_types);
}

static void cuda_refusals_before_any_work(void **state)
{
    (void)state;
    kv_err err = {0};
    void *ctx = (void *)1;
    const backend_request ev = {.evict = true}, full = {.attention_full = true};
    setenv("KVTRACE_CUDA_LIB", "/nonexistent/libkvtrace_cuda.so", 1); /* refused before the library is looked for */
    assert_int_equal(backend_open(&BACKEND_CUDA, &ev, &ctx, &err), KV_EUSAGE);
    assert_null(ctx);
    assert_string_equal(err.msg, "capture: --evict runs on the CPU only so far (its policies read every head's "
                                 "attention weights, which the GPU's tiled attention never forms): drop --device cuda");
    kv_err_clear(&err);
    assert_int_equal(backend_open(&BACKEND_CUDA, &full, &ctx, &err), KV_EUSAGE);
    assert_non_null(strstr(err.msg, "--attention full is not available with --device cuda"));
    kv_err_clear(&err);
    const backend_request plain = {0};
    assert_int_equal(backend_open(&BACKEND_CUDA, &plain, &ctx, &err), KV_EFAIL);
    assert_non_null(strstr(err.msg, "cannot load the CUDA backend /nonexistent/libkvtrace_cuda.so"));
    unsetenv("KVTRACE_CUDA_LIB");
}

/* The host emulation of the CUDA library, where make built it. */
static bool emulation(char *path, size_t cap)
{
    const char *root = getenv("ROOT"), *build = getenv("BUILD");
    snprintf(path, cap, "%s/%s/emul/libkvcuda_emul.so", root ? root : ".", build ? build : "build");
    return access(path, F_OK) == 0;
}

enum { WT = 20, WB = 8 };

/* The walk over tokens [WT] on kernels k with context ctx: logits [WT][V]. */
static void walk(const kv_model *m, const forward_kernels *k, void *ctx, const int32_t *tok, float *logits)
{
    forward_state s;
    kv_err err = {0};
    const int64_t V = m->cfg.vocab_size;
    assert_int_equal(forward_init(&s, m, k, ctx, WT, WB, &err), KV_OK);
    for (int64_t t = 0; t < WT; t += WB) {
        const int64_t n = WT - t < WB ? WT - t : WB;
        assert_int_equal(forward_chunk(&s, tok + t, n, NULL, &err), KV_OK);
        memcpy(logits + t * V, s.logits, sizeof(float) * (size_t)(n * V));
    }
    forward_free(&s);
}

static void two_cuda_instances_at_once(void **state)
{
    (void)state;
    char lib[4096];
    if (!emulation(lib, sizeof lib)) tu_skip("%s not built (make tests builds it)", lib);
    setenv("KVTRACE_CUDA_LIB", lib, 1);
    kv_err err = {0};
    kv_model m;
    assert_int_equal(model_load("random:stories260k:2", NULL, &m, &err), KV_OK);
    const int64_t V = m.cfg.vocab_size;
    int32_t tok[WT];
    for (int i = 0; i < WT; i++) tok[i] = (int32_t)((i * 37 + 5) % V);
    const backend_request req = {0};
    void *a = NULL, *b = NULL;
    const kv_model *ma = NULL, *mb = NULL;
    assert_int_equal(backend_open(&BACKEND_CUDA, &req, &a, &err), KV_OK);
    assert_int_equal(backend_open(&BACKEND_CUDA, &req, &b, &err), KV_OK);
    assert_ptr_not_equal(a, b);
    assert_int_equal(BACKEND_CUDA.prepare(a, &m, WT, WB, true, &ma, &err), KV_OK);
    assert_int_equal(BACKEND_CUDA.prepare(b, &m, WT, WB, false, &mb, &err), KV_OK);
    assert_ptr_not_equal(ma, mb);
    assert_int_equal(BACKEND_CUDA.prepare(a, &m, WT, WB, false, &ma, &err), KV_EFAIL); /* one model an instance */
    kv_err_clear(&err);
    float *ref = malloc(sizeof(float) * (size_t)(WT * V)), *la = malloc(sizeof(float) * (size_t)(WT * V));
    float *lb = malloc(sizeof(float) * (size_t)(WT * V));
    double *dref = malloc(sizeof(double) * (size_t)(WT * V));
    walk(&m, &FORWARD_CPU, NULL, tok, ref);
    walk(ma, BACKEND_CUDA.kernels, a, tok, la);
    walk(mb, BACKEND_CUDA.kernels, b, tok, lb);
    for (int64_t i = 0; i < WT * V; i++) dref[i] = ref[i];
    assert_int_equal(tu_close_array("instance a", dref, la, (size_t)(WT * V), 1e-4, 1e-4), 0);
    assert_memory_equal(la, lb, sizeof(float) * (size_t)(WT * V));
    /* a failure of instance a (an embedding wider than its scratch) is a's alone */
    BACKEND_CUDA.kernels->embed(a, NULL, NULL, tok, WB + 1, m.cfg.dim);
    assert_int_equal(BACKEND_CUDA.kernels->sync(a, &err), KV_EFAIL);
    printf("# a: %s\n", err.msg);
    kv_err_clear(&err);
    assert_int_equal(BACKEND_CUDA.kernels->sync(b, &err), KV_OK);
    double *cs = calloc((size_t)(m.cfg.n_layers * m.cfg.n_heads * WT), sizeof(double));
    assert_int_equal(BACKEND_CUDA.colsum(b, cs, &err), KV_EFAIL); /* b was prepared without column sums */
    kv_err_clear(&err);
    assert_true(BACKEND_CUDA.peak_bytes(b) > 0);
    backend_close(&BACKEND_CUDA, a);
    backend_close(&BACKEND_CUDA, b);
    unsetenv("KVTRACE_CUDA_LIB");
    free(ref), free(la), free(lb), free(dref), free(cs);
    model_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_of_backends),
        cmocka_unit_test(cuda_refusals_before_any_work),
        cmocka_unit_test(two_cuda_instances_at_once),
        cmocka_unit_test(budget_of_llama_8b),
        cmocka_unit_test(budget_grows_with_tokens_not_squared),
        cmocka_unit_test(missing_library),
        cmocka_unit_test(library_table_and_no_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
