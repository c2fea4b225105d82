/* The CUDA backend's loader and the device-memory budget (backend.h). */
#include "model/backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The library beside the running executable, into buf; false if unknown. */
static bool beside_exe(char *buf, size_t cap)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = '\0';
    return snprintf(buf, cap, "%s/%s", exe, BACKEND_CUDA_LIB) < (int)cap;
}

static void *try_open(const char *path, char *why, size_t cap)
{
    /* never unloaded: cudart and libstdc++ keep process-lifetime state (and a
     * leak checker would see it as lost once the mapping went away) */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, cap, "%s", e ? e : "dlopen failed");
    }
    return h;
}

int backend_load_cuda(backend_cuda *b, const char *lib, kv_err *err)
{
    memset(b, 0, sizeof *b);
    char why[1024] = "", cand[4096];
    const char *env = getenv(BACKEND_CUDA_ENV);
    if (!lib && env && *env) lib = env;
    if (lib) {
        snprintf(b->path, sizeof b->path, "%s", lib);
        b->dl = try_open(lib, why, sizeof why);
    } else if (beside_exe(cand, sizeof cand) && access(cand, F_OK) == 0) {
        snprintf(b->path, sizeof b->path, "%s", cand);
        b->dl = try_open(cand, why, sizeof why);
    } else {
        snprintf(b->path, sizeof b->path, "%s", BACKEND_CUDA_LIB);
        b->dl = try_open(BACKEND_CUDA_LIB, why, sizeof why);
    }
    if (!b->dl)
        return kv_fail(err, KV_EFAIL, "--device cuda: cannot load the CUDA backend %s: %s (it is built by make where "
                       "nvcc is found; set %s to its path, and put CUDA's lib64 on LD_LIBRARY_PATH)",
                       b->path, why, BACKEND_CUDA_ENV);
    kvcuda_get_api_fn get = NULL;
    *(void **)&get = dlsym(b->dl, "kvcuda_get_api");
    b->api = get ? get(KVCUDA_ABI) : NULL;
    if (!b->api || b->api->size != sizeof(kvcuda_api)) {
        backend_close_cuda(b);
        return kv_fail(err, KV_EFAIL, "--device cuda: %s is not a CUDA backend of this kvtrace (ABI %d): rebuild it "
                       "with make", lib ? lib : BACKEND_CUDA_LIB, (int)KVCUDA_ABI);
    }
    return KV_OK;
}

int backend_open_cuda(backend_cuda *b, const char *lib, int device, kv_err *err)
{
    int rc = backend_load_cuda(b, lib, err);
    if (rc) return rc;
    kv_err e = {0};
    rc = b->api->open(device, &b->ctx, &b->info, &e);
    if (rc) {
        backend_close_cuda(b);
        return kv_fail(err, KV_EFAIL, "--device cuda: %s", e.msg);
    }
    return KV_OK;
}

void backend_close_cuda(backend_cuda *b)
{
    if (b->ctx && b->api) b->api->close(b->ctx);
    if (b->dl) dlclose(b->dl);
    memset(b, 0, sizeof *b);
}

int backend_dtype_size(kvcuda_dtype dt)
{
    return dt == KVCUDA_F32 ? 4 : 2;
}

/* Parameters of one layer: matrix elements and float32 vector elements. */
static void layer_params(const model_config *c, const model_layer *w, uint64_t *mat, uint64_t *vec)
{
    const uint64_t dim = (uint64_t)c->dim, ffn = (uint64_t)c->ffn_dim;
    const uint64_t HD = (uint64_t)(c->n_heads * c->head_dim), KD = (uint64_t)(c->n_kv_heads * c->head_dim);
    *mat = HD * dim + 2 * KD * dim + dim * HD + 3 * ffn * dim;
    *vec = 2 * dim;
    if (w && w->bq) *vec += HD + 2 * KD;
    if (w && w->q_norm) *vec += 2 * (uint64_t)c->head_dim;
}

void backend_budget_compute(const kv_model *m, int64_t T, int64_t B, kvcuda_dtype wt, bool colsum,
                            backend_budget *out)
{
    const model_config *c = &m->cfg;
    const uint64_t es = (uint64_t)backend_dtype_size(wt), f = sizeof(float);
    const uint64_t dim = (uint64_t)c->dim, ffn = (uint64_t)c->ffn_dim, V = (uint64_t)c->vocab_size;
    const uint64_t H = (uint64_t)c->n_heads, K = (uint64_t)c->n_kv_heads, D = (uint64_t)c->head_dim;
    const uint64_t t = (uint64_t)T, b = (uint64_t)(B < T ? B : T);
    memset(out, 0, sizeof *out);
    uint64_t mat = 0, vec = 0;
    for (int64_t l = 0; l < c->n_layers; l++) {
        uint64_t lm, lv;
        layer_params(c, m->layers ? &m->layers[l] : NULL, &lm, &lv);
        mat += lm, vec += lv;
    }
    mat += V * dim * (m->output && m->output == m->tok_embd ? 1 : 2);
    vec += dim;
    out->weights = mat * es + vec * f;
    out->kv_cache = 2 * (uint64_t)c->n_layers * K * t * D * f;
    /* x, xb, q, k, v, att, gate, up, logits; 16-bit copy of a product's input;
     * row statistics; tokens; the RoPE table; the recording's two device
     * twins of q, k, v; cuBLAS's workspace and slack */
    uint64_t widest = ffn > dim ? ffn : dim;
    widest = widest > H * D ? widest : H * D;
    out->scratch = b * (2 * dim + 2 * H * D + 2 * K * D + 2 * ffn + V) * f + b * widest * 2 + 2 * H * b * f + b * 4 +
                   t * D * f + 2 * b * (H + 2 * K) * D * f + ((uint64_t)256 << 20);
    out->colsum = colsum ? (uint64_t)c->n_layers * H * t * sizeof(double) : 0;
    out->total = out->weights + out->kv_cache + out->scratch + out->colsum;
}

int backend_budget_check(const backend_budget *b, uint64_t free_bytes, uint64_t total_bytes, const char *device,
                         kv_err *err)
{
    const double G = 1024.0 * 1024.0 * 1024.0;
    if (b->total <= free_bytes) return KV_OK;
    return kv_fail(err, KV_EFAIL, "--device cuda: the capture needs %.2f GiB of device memory (weights %.2f + KV "
                   "cache %.2f + scratch %.2f + column sums %.2f GiB) but %s has %.2f GiB free of %.2f GiB: use a "
                   "shorter sequence, 16-bit weights (--weights bf16), --attention none, or a smaller chunk",
                   b->total / G, b->weights / G, b->kv_cache / G, b->scratch / G, b->colsum / G, device,
                   free_bytes / G, total_bytes / G);
}
