/* The device-memory budget of a capture on the GPU (cuda_budget.h). */
#include "model/cuda_budget.h"

#include <string.h>

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

void cuda_budget_compute(const kv_model *m, int64_t T, int64_t B, kvcuda_dtype wt, bool colsum, cuda_budget *out)
{
    const model_config *c = &m->cfg;
    const uint64_t es = (uint64_t)cuda_lib_dtype_size(wt), f = sizeof(float);
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
     * row statistics (the scratch's and the walk's); tokens; the RoPE table;
     * the recording's two device twins of q, k, v (or of a chunk's outputs
     * and statistics); cuBLAS's workspace and slack */
    uint64_t widest = ffn > dim ? ffn : dim, twin = (H + 2 * K) * D;
    widest = widest > H * D ? widest : H * D;
    twin = twin > H * (D + 2) ? twin : H * (D + 2);
    out->scratch = b * (2 * dim + 2 * H * D + 2 * K * D + 2 * ffn + V) * f + b * widest * 2 + 4 * H * b * f + b * 4 +
                   t * D * f + 2 * b * twin * f + ((uint64_t)256 << 20);
    out->colsum = colsum ? (uint64_t)c->n_layers * H * t * sizeof(double) : 0;
    out->total = out->weights + out->kv_cache + out->scratch + out->colsum;
}

int cuda_budget_check(const cuda_budget *b, uint64_t free_bytes, uint64_t total_bytes, const char *device,
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
