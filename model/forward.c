/* The model walk over one chunk (see forward.h). */
#include "model/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/weights.h"
#include "core/finite.h"
#include "core/progress.h"

int forward_init(forward_state *s, const kv_model *m, const forward_kernels *kern, void *kctx, int64_t cap,
                 int64_t max_chunk, kv_err *err)
{
    return forward_init_cache(s, m, kern, kctx, cap, cap, max_chunk, err);
}

/* Buffers in the kernels' memory (device memory for a device table). */
static int alloc_kernel_buffers(forward_state *s, size_t B, size_t T, kv_err *err)
{
    const model_config *c = &s->m->cfg;
    const forward_kernels *k = s->kern;
    void *ctx = s->kctx;
    const size_t D = (size_t)c->head_dim, HD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    const size_t cache = (size_t)c->n_layers * KD * T;
    if (!(s->k_cache = k->alloc(ctx, cache, sizeof(float), "key cache", err)) ||
        !(s->v_cache = k->alloc(ctx, cache, sizeof(float), "value cache", err)) ||
        !(s->rope_tab = k->alloc(ctx, (size_t)s->n_pos * D, sizeof(float), "rope table", err)) ||
        !(s->x = k->alloc(ctx, B * (size_t)c->dim, sizeof(float), "activations", err)) ||
        !(s->xb = k->alloc(ctx, B * (size_t)c->dim, sizeof(float), "activations", err)) ||
        !(s->q = k->alloc(ctx, B * HD, sizeof(float), "queries", err)) ||
        !(s->k = k->alloc(ctx, B * KD, sizeof(float), "keys", err)) ||
        !(s->v = k->alloc(ctx, B * KD, sizeof(float), "values", err)) ||
        !(s->att = k->alloc(ctx, B * HD, sizeof(float), "attention output", err)) ||
        !(s->stats = k->alloc(ctx, 2 * B * (size_t)c->n_heads, sizeof(float), "attention statistics", err)) ||
        !(s->gate = k->alloc(ctx, B * (size_t)c->ffn_dim, sizeof(float), "ffn", err)) ||
        !(s->up = k->alloc(ctx, B * (size_t)c->ffn_dim, sizeof(float), "ffn", err)) ||
        !(s->logits_k = k->alloc(ctx, B * (size_t)c->vocab_size, sizeof(float), "logits", err)))
        return err->code;
    return KV_OK;
}

/* The RoPE table, filled on the host and uploaded where the kernels' memory is not the host's. */
static int fill_rope_table(forward_state *s, kv_err *err)
{
    const model_config *c = &s->m->cfg;
    if (s->kern->host_memory) {
        rope_table_fill_scaled(s->rope_tab, s->n_pos, c->head_dim, c->rope_theta, s->m->rope_div);
        return KV_OK;
    }
    float *tab = kv_calloc((size_t)(s->n_pos * c->head_dim), sizeof(float), "rope table", err);
    if (!tab) return err->code;
    rope_table_fill_scaled(tab, s->n_pos, c->head_dim, c->rope_theta, s->m->rope_div);
    int rc = s->kern->upload(s->kctx, s->rope_tab, tab, sizeof(float) * (size_t)(s->n_pos * c->head_dim), err);
    free(tab);
    return rc;
}

int forward_init_cache(forward_state *s, const kv_model *m, const forward_kernels *kern, void *kctx, int64_t n_pos,
                       int64_t cap, int64_t max_chunk, kv_err *err)
{
    memset(s, 0, sizeof *s);
    const model_config *c = &m->cfg;
    if (n_pos < 1 || cap < 1 || max_chunk < 1)
        return kv_fail(err, KV_EUSAGE, "forward: need at least one token and a chunk of at least one");
    if (cap < n_pos && (!kern->compact || !kern->host_rows))
        return kv_fail(err, KV_EUSAGE, "forward: this backend has no compact/host_rows kernels, so it cannot "
                       "evict inside the run (a cache of %lld rows for %lld positions)", (long long)cap,
                       (long long)n_pos);
    s->m = m;
    s->kern = kern;
    s->kctx = kctx;
    s->n_pos = n_pos;
    s->cap = cap = cap < n_pos ? cap : n_pos;
    s->max_chunk = max_chunk = max_chunk < cap ? max_chunk : cap;
    const size_t B = (size_t)max_chunk, T = (size_t)cap, LK = (size_t)(c->n_layers * c->n_kv_heads);
    int rc = alloc_kernel_buffers(s, B, T, err);
    if (!rc && (!(s->cache_len = kv_calloc(LK, sizeof(int64_t), "cache lengths", err)) ||
                !(s->cache_pos = kv_calloc(LK * T, sizeof(int64_t), "cache positions", err)) ||
                !(s->cache_peak = kv_calloc(LK, sizeof(int64_t), "cache lengths", err)) ||
                (!kern->attend_layer && (!(s->p = kv_calloc(B * T, sizeof(float), "attention weights", err)) ||
                                         !(s->lse = kv_calloc(B * (size_t)c->n_heads, sizeof(double),
                                                              "log-sum-exps", err))))))
        rc = err->code;
    if (!rc && m->wtype != MODEL_W_F32) { /* 16-bit matrices: widened a tile at a time on the host */
        const int64_t in = c->dim > c->ffn_dim ? c->dim : c->ffn_dim;
        s->wtile_n = (kern->workers ? kern->workers(kctx) : 1) * FORWARD_WTILE * in;
        if (!kern->matmul16 || !kern->host_memory)
            rc = kv_fail(err, KV_EUSAGE, "forward: these kernels take float32 weights only (the model's are %s)",
                         weights_name(m->wtype));
        else if (!(s->wtile = kv_calloc((size_t)s->wtile_n, sizeof(float), "weight tile", err)))
            rc = err->code;
    }
    if (!rc) {
        s->logits = kern->host_memory ? s->logits_k
                                      : kv_calloc(B * (size_t)c->vocab_size, sizeof(float), "logits", err);
        rc = s->logits ? fill_rope_table(s, err) : err->code;
    }
    if (rc) forward_free(s);
    return rc;
}

void forward_free(forward_state *s)
{
    if (s->kern) { /* a state that got as far as its kernels */
        float *kmem[] = {s->k_cache, s->v_cache, s->rope_tab, s->x, s->xb, s->q, s->k, s->v, s->att, s->stats,
                         s->gate, s->up, s->logits_k};
        for (size_t i = 0; i < sizeof kmem / sizeof kmem[0]; i++) s->kern->release(s->kctx, kmem[i]);
        if (s->logits != s->logits_k) free(s->logits);
    }
    free(s->cache_len), free(s->cache_pos), free(s->cache_peak), free(s->p), free(s->lse), free(s->wtile);
    memset(s, 0, sizeof *s);
}

/* Device kernels run asynchronously: wait for them before reading the clock
 * (a failure stays with the table and is reported at the chunk's end). */
static void settle(const forward_state *s)
{
    kv_err ignored = {0};
    if (!s->kern->host_memory) (void)s->kern->sync(s->kctx, &ignored);
}

/* The matmul kernel for W of type t (matmul16 for 16 bits), timed and
 * counted (2 n in out operations). */
static void timed_matmul_t(forward_state *s, const float *x, const model_mat *w, model_wtype t, float *y, int64_t n,
                           int64_t in, int64_t out)
{
    double t0 = kv_now_seconds();
    if (t == MODEL_W_F32) s->kern->matmul(s->kctx, x, w, y, n, in, out);
    else s->kern->matmul16(s->kctx, x, w, t, y, n, in, out, s->wtile, s->wtile_n);
    settle(s);
    s->gemm_seconds += kv_now_seconds() - t0;
    s->gemm_flops += 2.0 * (double)n * (double)in * (double)out;
}

/* The same for one of the model's matrices (of its type). */
static void timed_matmul(forward_state *s, const float *x, const model_mat *w, float *y, int64_t n, int64_t in,
                         int64_t out)
{
    timed_matmul_t(s, x, w, s->m->wtype, y, n, in, out);
}

/* Start of kv head g's rows in a cache of layer l: [cap][D]. */
static float *cache_head(const forward_state *s, float *cache, int64_t l, int64_t g)
{
    const model_config *c = &s->m->cfg;
    return cache + ((size_t)l * (size_t)c->n_kv_heads + (size_t)g) * (size_t)s->cap * (size_t)c->head_dim;
}

const float *forward_cache_rows(const forward_state *s, int64_t layer, int64_t kv_head, int values, float *host)
{
    const int64_t lg = layer * s->m->cfg.n_kv_heads + kv_head;
    return s->kern->host_rows(s->kctx, cache_head(s, values ? s->v_cache : s->k_cache, layer, kv_head),
                              s->cache_len[lg], s->m->cfg.head_dim, host);
}

void forward_cache_keep(forward_state *s, int64_t layer, int64_t kv_head, const int64_t *keep, int64_t n_keep)
{
    const int64_t lg = layer * s->m->cfg.n_kv_heads + kv_head;
    KV_ASSERT(n_keep <= s->cache_len[lg]);
    s->kern->compact(s->kctx, cache_head(s, s->k_cache, layer, kv_head), cache_head(s, s->v_cache, layer, kv_head),
                     keep, n_keep, s->m->cfg.head_dim);
    int64_t *pos = s->cache_pos + lg * s->cap; /* host bookkeeping: which position each row holds */
    for (int64_t i = 0; i < n_keep; i++) pos[i] = pos[keep[i]];
    s->rows -= s->cache_len[lg] - n_keep;
    s->cache_len[lg] = n_keep;
}

/* Appends the chunk's rows of kv head g (positions pos0..) to its cache of
 * layer l; returns the rows cached before them. */
static int64_t cache_append(forward_state *s, int64_t l, int64_t g, int64_t pos0, int64_t n)
{
    const model_config *c = &s->m->cfg;
    const int64_t D = c->head_dim, K = c->n_kv_heads, lg = l * K + g, c0 = s->cache_len[lg];
    float *kc = cache_head(s, s->k_cache, l, g), *vc = cache_head(s, s->v_cache, l, g);
    s->kern->copy_rows(s->kctx, kc + c0 * D, D, s->k + g * D, K * D, n, D);
    s->kern->copy_rows(s->kctx, vc + c0 * D, D, s->v + g * D, K * D, n, D);
    for (int64_t r = 0; r < n; r++) s->cache_pos[lg * s->cap + c0 + r] = pos0 + r;
    s->cache_len[lg] = c0 + n;
    if (s->cache_peak[lg] < c0 + n) s->cache_peak[lg] = c0 + n;
    s->rows += n;
    if (s->rows_peak < s->rows) s->rows_peak = s->rows;
    return c0;
}

/* ---- overflow checks ----------------------------------------------------
 * (docs/reliability.md#numbers-that-overflow-finite-inputs-non-finite-arithmetic)
 * Finite weights can still overflow float32 (huge weights, huge products):
 * the walk stops with KV_EINPUT naming where, before any observer records a
 * non-finite value. Host tables check q/k/v after each layer's projections,
 * each head's weights before the observers see them, and the residual stream
 * after each layer (one pass each, far below the layer's products); a device
 * table checks the chunk's logits (which come to the host anyway) and, only
 * when they are not finite, reads the chunk's cached keys and values back
 * layer by layer to say where the overflow began. */

static int overflow(kv_err *err, const char *what, int64_t l, const char *unit, int64_t h, int64_t pos)
{
    char at[96] = "";
    if (unit) snprintf(at, sizeof at, ", %s %lld", unit, (long long)h);
    return kv_fail(err, KV_EINPUT, "the model overflows float32: its %s are not finite (inf or NaN) at layer %lld%s, "
                   "position %lld (finite weights too large for this input)", what, (long long)l, at, (long long)pos);
}

/* Rows [n][heads*D] of positions len.. (host memory): the first inf or NaN, named. */
static int check_heads(const forward_state *s, const float *a, int64_t n, int64_t heads, int64_t l, const char *what,
                       kv_err *err)
{
    const int64_t D = s->m->cfg.head_dim, i = kv_first_nonfinite(a, n * heads * D);
    return i < 0 ? KV_OK : overflow(err, what, l, "head", (i / D) % heads, s->len + i / (heads * D));
}

/* A device table: the first (layer, kv head) whose cached rows of this chunk
 * (positions >= len) hold inf or NaN; KV_OK when none does. */
static int locate_in_caches(forward_state *s, kv_err *err)
{
    const model_config *c = &s->m->cfg;
    const int64_t D = c->head_dim, K = c->n_kv_heads;
    float *host = kv_calloc((size_t)(s->cap * D), sizeof(float), "cache rows", err);
    int rc = host ? KV_OK : err->code;
    for (int64_t l = 0; !rc && l < c->n_layers; l++)
        for (int64_t g = 0; !rc && g < K; g++)
            for (int values = 0; !rc && values < 2; values++) {
                const int64_t lg = l * K + g, len = s->cache_len[lg], *pos = s->cache_pos + lg * s->cap;
                int64_t r0 = 0;
                while (r0 < len && pos[r0] < s->len) r0++;
                if (r0 == len) continue;
                float *cache = cache_head(s, values ? s->v_cache : s->k_cache, l, g) + r0 * D;
                rc = s->kern->download(s->kctx, host, cache, sizeof(float) * (size_t)((len - r0) * D), err);
                const int64_t i = rc ? -1 : kv_first_nonfinite(host, (len - r0) * D);
                if (i >= 0) rc = overflow(err, values ? "values" : "keys", l, "kv head", g, pos[r0 + i / D]);
            }
    free(host);
    return rc;
}

/* The chunk's logits (host memory), after the walk: the first inf or NaN,
 * traced back to its layer on a device table. */
static int check_logits(forward_state *s, int64_t r0, int64_t n, kv_err *err)
{
    const int64_t V = s->m->cfg.vocab_size, i = kv_first_nonfinite(s->logits + r0 * V, (n - r0) * V);
    if (i < 0) return KV_OK;
    int rc = s->kern->host_memory ? KV_OK : locate_in_caches(s, err);
    return rc ? rc : overflow(err, "logits", s->m->cfg.n_layers - 1, NULL, 0, s->len + r0 + i / V);
}

/* q, k, v of the chunk's rows: projections, biases, per-head q/k norms, RoPE. */
static void qkv_block(forward_state *s, const model_layer *w, int64_t n)
{
    const model_config *c = &s->m->cfg;
    const int64_t D = c->head_dim, H = c->n_heads, K = c->n_kv_heads;
    s->kern->rmsnorm(s->kctx, s->xb, s->x, w->attn_norm, n, c->dim, c->norm_eps);
    timed_matmul(s, s->xb, w->wq, s->q, n, c->dim, H * D);
    timed_matmul(s, s->xb, w->wk, s->k, n, c->dim, K * D);
    timed_matmul(s, s->xb, w->wv, s->v, n, c->dim, K * D);
    if (w->bq) s->kern->add_bias(s->kctx, s->q, w->bq, n, H * D);
    if (w->bk) s->kern->add_bias(s->kctx, s->k, w->bk, n, K * D);
    if (w->bv) s->kern->add_bias(s->kctx, s->v, w->bv, n, K * D);
    /* rows of D: the norm is per head (in place: the kernel reads a row before writing it) */
    if (w->q_norm) s->kern->rmsnorm(s->kctx, s->q, s->q, w->q_norm, n * H, D, c->norm_eps);
    if (w->k_norm) s->kern->rmsnorm(s->kctx, s->k, s->k, w->k_norm, n * K, D, c->norm_eps);
    s->kern->rope(s->kctx, s->q, n, H, D, s->len, s->rope_tab, c->rope);
    s->kern->rope(s->kctx, s->k, n, K, D, s->len, s->rope_tab, c->rope);
}

/* A device table: every head of layer l in one call, after all kv heads'
 * rows are appended (their caches are as long as each other: no eviction). */
static int attend_layer(forward_state *s, int64_t l, int64_t n, bool stats, kv_err *err)
{
    const model_config *c = &s->m->cfg;
    const int64_t D = c->head_dim, H = c->n_heads, K = c->n_kv_heads;
    int64_t c0 = 0;
    for (int64_t g = 0; g < K; g++) {
        const int64_t cg = cache_append(s, l, g, s->len, n);
        if (g > 0 && cg != c0) return kv_fail(err, KV_EFAIL, "forward: a device table needs equal cache lengths");
        c0 = cg;
    }
    double t0 = kv_now_seconds();
    s->kern->attend_layer(s->kctx, l, s->q, cache_head(s, s->k_cache, l, 0), cache_head(s, s->v_cache, l, 0), s->cap,
                          H, K, D, c0, n, s->att, stats ? s->stats : NULL);
    settle(s);
    s->attn_seconds += kv_now_seconds() - t0;
    s->attn_flops += 4.0 * (double)H * (double)n * (double)(c0 + n) * (double)D; /* q.k and p.v */
    return KV_OK;
}

/* Attention block of layer l: q/k/v, cache append, GQA over each kv head's
 * cache (its own length once eviction ran), output projection added to the
 * residual stream; then the evictor may shrink the layer's caches. */
static int attention_block(forward_state *s, int64_t l, int64_t n, const forward_observer *obs, kv_err *err)
{
    const model_config *c = &s->m->cfg;
    const model_layer *w = &s->m->layers[l];
    const int64_t D = c->head_dim, H = c->n_heads, K = c->n_kv_heads, G = H / K, pos0 = s->len;
    const forward_evictor *ev = s->ev;
    qkv_block(s, w, n);
    int rc = KV_OK;
    if (s->kern->host_memory && ((rc = check_heads(s, s->q, n, H, l, "queries", err)) ||
                                 (rc = check_heads(s, s->k, n, K, l, "keys", err)) ||
                                 (rc = check_heads(s, s->v, n, K, l, "values", err))))
        return rc;
    if (obs && obs->on_qkv) rc = obs->on_qkv(obs->ctx, l, pos0, n, s->q, s->k, s->v, err);
    if (ev && ev->on_queries) ev->on_queries(ev->ctx, l, pos0, n, s->q);
    for (int64_t g = 0; !rc && g < K; g++)
        if (s->cache_len[l * K + g] + n > s->cap)
            return kv_fail(err, KV_EFAIL, "forward: the cache of layer %lld, kv head %lld holds %lld of %lld rows: "
                           "no room for a chunk of %lld", (long long)l, (long long)g,
                           (long long)s->cache_len[l * K + g], (long long)s->cap, (long long)n);
    const bool want_ref = obs && obs->on_output, want_lse = want_ref && !s->kern->attend_layer;
    if (!rc && s->kern->attend_layer) rc = attend_layer(s, l, n, want_ref, err);
    for (int64_t g = 0; !rc && !s->kern->attend_layer && g < K; g++) {
        const int64_t c0 = cache_append(s, l, g, pos0, n);
        const float *kc = cache_head(s, s->k_cache, l, g), *vc = cache_head(s, s->v_cache, l, g);
        for (int64_t h = g * G; !rc && h < (g + 1) * G; h++) {
            double t0 = kv_now_seconds();
            s->kern->attend(s->kctx, s->q + h * D, H * D, kc, vc, c0, n, D, s->p, s->att + h * D, H * D,
                            want_lse ? s->lse + h * n : NULL, want_lse ? s->stats + h * n : NULL);
            s->attn_seconds += kv_now_seconds() - t0;
            s->attn_flops += 4.0 * (double)n * (double)(c0 + n) * (double)D; /* q.k and p.v */
            const int64_t bad = kv_first_nonfinite(s->p, n * (c0 + n));
            if (bad >= 0) rc = overflow(err, "attention weights", l, "head", h, pos0 + bad / (c0 + n));
            if (!rc && obs && obs->on_attention) rc = obs->on_attention(obs->ctx, l, h, c0, n, s->p, err);
            if (!rc && ev && ev->on_attention) ev->on_attention(ev->ctx, l, h, c0, n, s->p);
        }
    }
    if (!rc && want_lse) /* host tables: m (the kernel wrote it) and the sum exp(lse - m) in [1, n] */
        for (int64_t i = 0; i < H * n; i++) s->stats[H * n + i] = (float)exp(s->lse[i] - (double)s->stats[i]);
    if (!rc && want_ref) rc = obs->on_output(obs->ctx, l, pos0, n, s->att, s->stats, err);
    if (!rc && ev && ev->after_layer) rc = ev->after_layer(ev->ctx, s, l, n, err);
    if (rc) return rc;
    /* x += att . wo^T (through xb: the matmul kernel overwrites its output) */
    timed_matmul_t(s, s->att, w->wo, MODEL_W_F32, s->xb, n, H * D, c->dim); /* W_o: float32 always (model.h) */
    s->kern->add(s->kctx, s->x, s->xb, n * c->dim);
    return KV_OK;
}

static void ffn_block(forward_state *s, int64_t l, int64_t n)
{
    const model_config *c = &s->m->cfg;
    const model_layer *w = &s->m->layers[l];
    s->kern->rmsnorm(s->kctx, s->xb, s->x, w->ffn_norm, n, c->dim, c->norm_eps);
    timed_matmul(s, s->xb, w->w_gate, s->gate, n, c->dim, c->ffn_dim);
    timed_matmul(s, s->xb, w->w_up, s->up, n, c->dim, c->ffn_dim);
    s->kern->swiglu(s->kctx, s->gate, s->up, n * c->ffn_dim);
    timed_matmul(s, s->gate, w->w_down, s->xb, n, c->ffn_dim, c->dim);
    s->kern->add(s->kctx, s->x, s->xb, n * c->dim);
}

int forward_chunk(forward_state *s, const int32_t *tokens, int64_t n, const forward_observer *obs,
                  kv_err *err)
{
    const kv_model *m = s->m;
    const model_config *c = &m->cfg;
    if (n < 1 || n > s->max_chunk || s->len + n > s->n_pos)
        return kv_fail(err, KV_EFAIL, "forward: chunk of %lld at position %lld exceeds the run's %lld positions "
                       "(or the chunk of %lld)", (long long)n, (long long)s->len, (long long)s->n_pos,
                       (long long)s->max_chunk);
    for (int64_t r = 0; r < n; r++)
        if (tokens[r] < 0 || tokens[r] >= c->vocab_size)
            return kv_fail(err, KV_EINPUT, "token id %d at position %lld is outside the vocabulary [0, %lld)",
                           tokens[r], (long long)(s->len + r), (long long)c->vocab_size);
    if (m->wtype == MODEL_W_F32) s->kern->embed(s->kctx, s->x, m->tok_embd, tokens, n, c->dim);
    else /* host memory (forward_init checked): the rows widened */
        for (int64_t r = 0; r < n; r++)
            weights_widen(m->tok_embd, m->wtype, (size_t)tokens[r] * (size_t)c->dim, (size_t)c->dim, s->x + r * c->dim);
    for (int64_t l = 0; l < c->n_layers; l++) {
        int rc = attention_block(s, l, n, obs, err);
        if (rc) return rc;
        ffn_block(s, l, n);
        const int64_t bad = s->kern->host_memory ? kv_first_nonfinite(s->x, n * c->dim) : -1;
        if (bad >= 0) return overflow(err, "activations (the residual stream)", l, NULL, 0, s->len + bad / c->dim);
    }
    if (s->skip_logits && s->last_logits_only && s->kern->host_memory) { /* the layers checked x already */
        int rc = obs && obs->on_logits ? obs->on_logits(obs->ctx, s->len, n, NULL, err) : KV_OK;
        if (!rc) s->len += n, s->steps++;
        return rc;
    }
    /* the rows that get logits: all, or the last (the next token's) */
    const int64_t r0 = s->last_logits_only ? n - 1 : 0, V = c->vocab_size;
    s->kern->rmsnorm(s->kctx, s->xb + r0 * c->dim, s->x + r0 * c->dim, m->output_norm, n - r0, c->dim, c->norm_eps);
    timed_matmul(s, s->xb + r0 * c->dim, m->output, s->logits_k + r0 * V, n - r0, c->dim, V);
    int rc = s->kern->sync(s->kctx, err); /* a device kernel's failure surfaces here, once per chunk */
    if (!rc && !s->kern->host_memory)
        rc = s->kern->download(s->kctx, s->logits + r0 * V, s->logits_k + r0 * V, sizeof(float) * (size_t)((n - r0) * V),
                               err);
    if (!rc) rc = check_logits(s, r0, n, err);
    if (!rc && obs && obs->on_logits) rc = obs->on_logits(obs->ctx, s->len, n, s->logits, err);
    if (!rc) s->len += n, s->steps++;
    return rc;
}
