/* The model walk over one chunk (see forward.h). */
#include "capture/forward.h"

#include <stdlib.h>
#include <string.h>

#include "core/progress.h"

int forward_init(forward_state *s, const kv_model *m, const forward_kernels *kern, int64_t cap,
                 int64_t max_chunk, kv_err *err)
{
    memset(s, 0, sizeof *s);
    const model_config *c = &m->cfg;
    if (cap < 1 || max_chunk < 1)
        return kv_fail(err, KV_EUSAGE, "forward: need at least one token and a chunk of at least one");
    s->m = m;
    s->kern = *kern;
    s->cap = cap;
    s->max_chunk = max_chunk = max_chunk < cap ? max_chunk : cap;
    const size_t B = (size_t)max_chunk, T = (size_t)cap, D = (size_t)c->head_dim;
    const size_t HD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    const size_t cache = (size_t)c->n_layers * KD * T;
    if (!(s->k_cache = kv_calloc(cache, sizeof(float), "key cache", err)) ||
        !(s->v_cache = kv_calloc(cache, sizeof(float), "value cache", err)) ||
        !(s->rope_tab = kv_calloc(T * D, sizeof(float), "rope table", err)) ||
        !(s->x = kv_calloc(B * (size_t)c->dim, sizeof(float), "activations", err)) ||
        !(s->xb = kv_calloc(B * (size_t)c->dim, sizeof(float), "activations", err)) ||
        !(s->q = kv_calloc(B * HD, sizeof(float), "queries", err)) ||
        !(s->k = kv_calloc(B * KD, sizeof(float), "keys", err)) ||
        !(s->v = kv_calloc(B * KD, sizeof(float), "values", err)) ||
        !(s->att = kv_calloc(B * HD, sizeof(float), "attention output", err)) ||
        !(s->gate = kv_calloc(B * (size_t)c->ffn_dim, sizeof(float), "ffn", err)) ||
        !(s->up = kv_calloc(B * (size_t)c->ffn_dim, sizeof(float), "ffn", err)) ||
        !(s->p = kv_calloc(B * T, sizeof(float), "attention weights", err)) ||
        !(s->logits = kv_calloc(B * (size_t)c->vocab_size, sizeof(float), "logits", err))) {
        forward_free(s);
        return err->code;
    }
    rope_table_fill_scaled(s->rope_tab, cap, c->head_dim, c->rope_theta, m->rope_div);
    return KV_OK;
}

void forward_free(forward_state *s)
{
    free(s->k_cache), free(s->v_cache), free(s->rope_tab), free(s->x), free(s->xb);
    free(s->q), free(s->k), free(s->v), free(s->att), free(s->gate), free(s->up), free(s->p);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

/* The matmul kernel, timed and counted (2 n in out operations). */
static void timed_matmul(forward_state *s, const float *x, const float *w, float *y, int64_t n, int64_t in,
                         int64_t out)
{
    double t0 = kv_now_seconds();
    s->kern.matmul(x, w, y, n, in, out);
    s->gemm_seconds += kv_now_seconds() - t0;
    s->gemm_flops += 2.0 * (double)n * (double)in * (double)out;
}

/* Start of kv head g's rows in a cache of layer l: [cap][D]. */
static float *cache_head(const forward_state *s, float *cache, int64_t l, int64_t g)
{
    const model_config *c = &s->m->cfg;
    return cache + ((size_t)l * (size_t)c->n_kv_heads + (size_t)g) * (size_t)s->cap * (size_t)c->head_dim;
}

/* q, k, v of the chunk's rows: projections, biases, per-head q/k norms, RoPE. */
static void qkv_block(forward_state *s, const model_layer *w, int64_t n)
{
    const model_config *c = &s->m->cfg;
    const int64_t D = c->head_dim, H = c->n_heads, K = c->n_kv_heads;
    s->kern.rmsnorm(s->xb, s->x, w->attn_norm, n, c->dim, c->norm_eps);
    timed_matmul(s, s->xb, w->wq, s->q, n, c->dim, H * D);
    timed_matmul(s, s->xb, w->wk, s->k, n, c->dim, K * D);
    timed_matmul(s, s->xb, w->wv, s->v, n, c->dim, K * D);
    if (w->bq) s->kern.add_bias(s->q, w->bq, n, H * D);
    if (w->bk) s->kern.add_bias(s->k, w->bk, n, K * D);
    if (w->bv) s->kern.add_bias(s->v, w->bv, n, K * D);
    /* rows of D: the norm is per head (in place: the kernel reads a row before writing it) */
    if (w->q_norm) s->kern.rmsnorm(s->q, s->q, w->q_norm, n * H, D, c->norm_eps);
    if (w->k_norm) s->kern.rmsnorm(s->k, s->k, w->k_norm, n * K, D, c->norm_eps);
    s->kern.rope(s->q, n, H, D, s->len, s->rope_tab, c->rope);
    s->kern.rope(s->k, n, K, D, s->len, s->rope_tab, c->rope);
}

/* Attention block of layer l: q/k/v, cache append, GQA, output projection
 * added to the residual stream. */
static int attention_block(forward_state *s, int64_t l, int64_t n, const forward_observer *obs, kv_err *err)
{
    const model_config *c = &s->m->cfg;
    const model_layer *w = &s->m->layers[l];
    const int64_t D = c->head_dim, H = c->n_heads, K = c->n_kv_heads, G = H / K, pos0 = s->len;
    qkv_block(s, w, n);
    int rc = obs && obs->on_qkv ? obs->on_qkv(obs->ctx, l, pos0, n, s->q, s->k, s->v, err) : KV_OK;
    for (int64_t g = 0; !rc && g < K; g++) {
        float *kc = cache_head(s, s->k_cache, l, g), *vc = cache_head(s, s->v_cache, l, g);
        for (int64_t r = 0; r < n; r++) {
            memcpy(kc + (pos0 + r) * D, s->k + (r * K + g) * D, sizeof(float) * (size_t)D);
            memcpy(vc + (pos0 + r) * D, s->v + (r * K + g) * D, sizeof(float) * (size_t)D);
        }
        for (int64_t h = g * G; !rc && h < (g + 1) * G; h++) {
            double t0 = kv_now_seconds();
            s->kern.attend(s->q + h * D, H * D, kc, vc, pos0, n, D, s->p, s->att + h * D, H * D);
            s->attn_seconds += kv_now_seconds() - t0;
            s->attn_flops += 4.0 * (double)n * (double)(pos0 + n) * (double)D; /* q.k and p.v */
            if (obs && obs->on_attention) rc = obs->on_attention(obs->ctx, l, h, pos0, n, s->p, err);
        }
    }
    if (rc) return rc;
    /* x += att . wo^T (through xb: the matmul kernel overwrites its output) */
    timed_matmul(s, s->att, w->wo, s->xb, n, H * D, c->dim);
    for (int64_t i = 0; i < n * c->dim; i++) s->x[i] += s->xb[i];
    return KV_OK;
}

static void ffn_block(forward_state *s, int64_t l, int64_t n)
{
    const model_config *c = &s->m->cfg;
    const model_layer *w = &s->m->layers[l];
    s->kern.rmsnorm(s->xb, s->x, w->ffn_norm, n, c->dim, c->norm_eps);
    timed_matmul(s, s->xb, w->w_gate, s->gate, n, c->dim, c->ffn_dim);
    timed_matmul(s, s->xb, w->w_up, s->up, n, c->dim, c->ffn_dim);
    s->kern.swiglu(s->gate, s->up, n * c->ffn_dim);
    timed_matmul(s, s->gate, w->w_down, s->xb, n, c->ffn_dim, c->dim);
    for (int64_t i = 0; i < n * c->dim; i++) s->x[i] += s->xb[i];
}

int forward_chunk(forward_state *s, const int32_t *tokens, int64_t n, const forward_observer *obs,
                  kv_err *err)
{
    const kv_model *m = s->m;
    const model_config *c = &m->cfg;
    if (n < 1 || n > s->max_chunk || s->len + n > s->cap)
        return kv_fail(err, KV_EFAIL, "forward: chunk of %lld at position %lld exceeds the cache of %lld",
                       (long long)n, (long long)s->len, (long long)s->cap);
    for (int64_t r = 0; r < n; r++) {
        if (tokens[r] < 0 || tokens[r] >= c->vocab_size)
            return kv_fail(err, KV_EINPUT, "token id %d at position %lld is outside the vocabulary [0, %lld)",
                           tokens[r], (long long)(s->len + r), (long long)c->vocab_size);
        memcpy(s->x + r * c->dim, m->tok_embd + (size_t)tokens[r] * (size_t)c->dim,
               sizeof(float) * (size_t)c->dim);
    }
    for (int64_t l = 0; l < c->n_layers; l++) {
        int rc = attention_block(s, l, n, obs, err);
        if (rc) return rc;
        ffn_block(s, l, n);
    }
    s->kern.rmsnorm(s->xb, s->x, m->output_norm, n, c->dim, c->norm_eps);
    timed_matmul(s, s->xb, m->output, s->logits, n, c->dim, c->vocab_size);
    int rc = obs && obs->on_logits ? obs->on_logits(obs->ctx, s->len, n, s->logits, err) : KV_OK;
    if (!rc) s->len += n;
    return rc;
}
