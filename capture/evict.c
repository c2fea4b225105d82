/* The in-model eviction engine (see evict.h): SPEC §4's steps 2-4 on the
 * model's caches, through policy_step as sim/replay.c calls it. */
#include "capture/evict.h"

#include <stdlib.h>
#include <string.h>

int64_t evict_cache_rows(const policy_config *pc, int64_t budget, int64_t B, int64_t T)
{
    if (pc->iface->never_evicts || budget + B > T) return T;
    return budget + B;
}

void evict_free(evict_engine *e)
{
    for (int64_t i = 0; e->state && i < e->L * e->streams; i++)
        if (e->state[i] && e->pc.iface->destroy) e->pc.iface->destroy(e->state[i]);
    free(e->state), free(e->attn), free(e->hk), free(e->hv);
    policy_step_buf_free(&e->step);
    free(e->qbuf), free(e->q_end), free(e->q_count);
    memset(e, 0, sizeof *e);
}

/* ---- hooks the walk calls --------------------------------------------- */

/* Appends the chunk's queries of every head to the layer's window buffer,
 * keeping the latest qwin positions. */
static void on_queries(void *ctx, int64_t l, int64_t pos0, int64_t n, const float *q)
{
    evict_engine *e = ctx;
    if (e->qwin == 0) return;
    const int64_t D = e->D, H = e->H, R = e->qrows;
    int64_t count = e->q_end[l] == pos0 ? e->q_count[l] : 0; /* chunks arrive in order; else start over */
    for (int64_t h = 0; h < H; h++) { /* count <= qwin and n <= B: the chunk fits behind them (R = qwin + B) */
        float *buf = e->qbuf + (l * H + h) * R * D;
        for (int64_t r = 0; r < n; r++) memcpy(buf + (count + r) * D, q + (r * H + h) * D, sizeof(float) * (size_t)D);
        if (count + n > e->qwin) /* keep the latest qwin */
            memmove(buf, buf + (count + n - e->qwin) * D, sizeof(float) * (size_t)(e->qwin * D));
    }
    count = count + n > e->qwin ? e->qwin : count + n;
    e->q_count[l] = count, e->q_end[l] = pos0 + n;
}

/* Adds the head's weights to its stream's attention (heads arrive in order);
 * view_of divides by their number: policy_attn_*, as sim forms the mean. */
static void on_attention(void *ctx, int64_t l, int64_t h, int64_t n_cached, int64_t n, const float *p)
{
    (void)l;
    evict_engine *e = ctx;
    if (!e->pc.iface->needs_attention) return;
    const int64_t x = h / e->heads_per_stream;
    policy_attn_add(e->attn + x * e->B * e->cap, p, n * (n_cached + n), h % e->heads_per_stream == 0);
}

/* The policy's view of stream x of layer l after a chunk of n (SPEC §4 step 2's candidates). */
static policy_view view_of(evict_engine *e, const forward_state *s, int64_t l, int64_t x, int64_t n)
{
    const int64_t g0 = x * e->kv_per_stream, lg = l * e->K + g0, cols = s->cache_len[lg];
    policy_view v = {.n = cols, .D = e->D, .pos = s->cache_pos + lg * s->cap, .budget = e->budget,
                     .now = s->len + n - 1, .layer = l, .kv_head = g0, .step = s->steps, .q_heads = e->G,
                     .rope = &e->rope};
    /* keys and values: the stream's first kv head (a layer-scope policy sees the layer's first, as in sim) */
    v.keys = forward_cache_rows(s, l, g0, 0, e->hk);
    v.values = forward_cache_rows(s, l, g0, 1, e->hv);
    if (e->qwin > 0) {
        v.queries = e->qbuf + (l * e->H + g0 * e->G) * e->qrows * e->D;
        v.T = e->qrows, v.q0 = e->q_end[l] - e->q_count[l];
    }
    if (e->pc.iface->needs_attention) {
        float *acc = e->attn + x * e->B * e->cap;
        policy_attn_divide(acc, n * cols, e->heads_per_stream);
        v.attn = acc, v.n_queries = n;
    }
    return v;
}

/* policy_step's compaction: the kept rows of every kv head of the stream. */
typedef struct {
    forward_state *s;
    int64_t l, g0, ng;
} stream_caches;

static void keep_rows(void *ctx, const int64_t *keep, int64_t kept)
{
    const stream_caches *c = ctx;
    for (int64_t g = c->g0; g < c->g0 + c->ng; g++) forward_cache_keep(c->s, c->l, g, keep, kept);
}

static int after_layer(void *ctx, forward_state *s, int64_t l, int64_t n, kv_err *err)
{
    evict_engine *e = ctx;
    for (int64_t x = 0; x < e->streams; x++) {
        policy_view v = view_of(e, s, l, x, n);
        stream_caches c = {s, l, x * e->kv_per_stream, e->kv_per_stream};
        int64_t kept;
        int rc = policy_step(&e->pc, e->state[l * e->streams + x], &v, &e->step, keep_rows, &c, &kept, err);
        if (rc) return rc;
        e->evictions += kept < v.n;
    }
    return KV_OK;
}

/* ---- setup ---------------------------------------------------------------- */

static int alloc_buffers(evict_engine *e, kv_err *err)
{
    const size_t cap = (size_t)e->cap, D = (size_t)e->D;
    if (!(e->state = kv_calloc((size_t)(e->L * e->streams), sizeof(void *), "policy states", err)) ||
        !(e->hk = kv_calloc(cap * D, sizeof(float), "cache keys", err)) ||
        !(e->hv = kv_calloc(cap * D, sizeof(float), "cache values", err)) ||
        policy_step_buf_init(&e->step, e->cap, err) ||
        !(e->q_end = kv_calloc((size_t)e->L, sizeof(int64_t), "query window", err)) ||
        !(e->q_count = kv_calloc((size_t)e->L, sizeof(int64_t), "query window", err)))
        return err->code;
    if (e->pc.iface->needs_attention &&
        !(e->attn = kv_calloc((size_t)(e->streams * e->B) * cap, sizeof(float), "attention", err)))
        return err->code;
    if (e->qwin > 0 &&
        !(e->qbuf = kv_calloc((size_t)(e->L * e->H * e->qrows) * D, sizeof(float), "query window", err)))
        return err->code;
    return KV_OK;
}

int evict_init(evict_engine *e, const policy_config *pc, int64_t budget, const model_config *cfg, int64_t B,
               int64_t cap, kv_err *err)
{
    memset(e, 0, sizeof *e);
    if (pc->iface->offline_only)
        return kv_fail(err, KV_EUSAGE, "%s reads the future (full-cache attention of later queries): it is "
                       "offline only (kvtrace sim), not an in-model policy", pc->iface->name);
    if (budget < 1) return kv_fail(err, KV_EUSAGE, "eviction budget must be at least 1, got %lld", (long long)budget);
    e->pc = *pc, e->budget = budget, e->B = B, e->cap = cap;
    e->rope = (policy_rope){.style = cfg->rope, .theta = cfg->rope_theta, .scaling = cfg->rope_scaling};
    e->L = cfg->n_layers, e->H = cfg->n_heads, e->K = cfg->n_kv_heads, e->D = cfg->head_dim, e->G = e->H / e->K;
    const policy_streams ps = policy_streams_of(pc, e->H, e->K);
    e->streams = ps.per_layer, e->kv_per_stream = ps.kv_heads, e->heads_per_stream = ps.q_heads;
    e->qwin = pc->iface->query_window ? pc->iface->query_window(pc) : 0;
    e->qrows = e->qwin + B;
    int rc = alloc_buffers(e, err);
    for (int64_t i = 0; !rc && pc->iface->create && i < e->L * e->streams; i++)
        rc = pc->iface->create(pc, &e->state[i], err);
    if (rc) {
        evict_free(e);
        return rc;
    }
    e->hooks = (forward_evictor){.ctx = e, .on_queries = on_queries, .on_attention = on_attention,
                                 .after_layer = after_layer};
    return KV_OK;
}

void evict_snapshot(const evict_engine *e, const forward_state *s, int32_t *out)
{
    const int64_t N = e->budget;
    for (int64_t lg = 0; lg < e->L * e->K; lg++) {
        const int64_t len = s->cache_len[lg] < N ? s->cache_len[lg] : N;
        const int64_t *pos = s->cache_pos + lg * s->cap;
        for (int64_t i = 0; i < N; i++) out[lg * N + i] = i < len ? (int32_t)pos[i] : -1;
    }
}
