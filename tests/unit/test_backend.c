/* The CUDA backend's host side, on a machine without a GPU: the device-
 * memory budget (numbers of a known shape, refusal with the numbers), the
 * loader's errors (library missing; present but no usable device), and the
 * table of build/libkvtrace_cuda.so complete when nvcc built it. */
#include "testutil.h"

#include "model/cuda_budget.h"
#include "core/model_shapes.h"

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
    if (!built_library(path, sizeof path)) {
        printf("# skip: %s not built (no nvcc)\n", path);
        return;
    }
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(budget_of_llama_8b),
        cmocka_unit_test(budget_grows_with_tokens_not_squared),
        cmocka_unit_test(missing_library),
        cmocka_unit_test(library_table_and_no_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
