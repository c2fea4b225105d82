/* The in-model eviction engine (see evict.h): steps 2-4 of the eviction step
 * (docs/sim.md#the-eviction-step-step-by-step) on the model's caches, through
 * policy_step as sim/replay.c calls it. */
#include "capture/evict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

int64_t evict_cache_rows(const policy_config *pc, int64_t budget, int64_t B, int64_t T)
{
    return plan_cache_rows(pc, budget, B, T);
}

int evict_alloc_rows(const policy_config *pc, const alloc_config *ac, int64_t budget, const model_config *cfg,
                     int64_t B, int64_t T, int64_t *rows, int64_t *width, kv_err *err)
{
    const int64_t L = cfg->n_layers, H = cfg->n_heads, K = cfg->n_kv_heads;
    int64_t M = budget;
    int rc = ac ? plan_check_pair(pc, ac, NULL, err) : KV_OK;
    if (!rc && ac) rc = alloc_check(ac, budget, L, K, err);
    if (!rc && ac) rc = plan_stream_most(pc, ac, budget, L, H, K, &M, err);
    if (rc) return rc;
    *width = M;
    *rows = plan_cache_rows(pc, M, B, T);
    return KV_OK;
}

/* Stream i's policy: duo's streaming heads run spc. */
static const policy_config *pc_of(const evict_engine *e, int64_t i)
{
    return e->own && e->own[i] ? &e->spc : &e->pc;
}

void evict_free(evict_engine *e)
{
    for (int64_t i = 0; e->state && i < e->L * e->streams; i++)
        if (e->state[i] && pc_of(e, i)->iface->destroy) pc_of(e, i)->iface->destroy(e->state[i]);
    free(e->state), free(e->own), free(e->caps), free(e->attn), free(e->hk), free(e->hv);
    for (int64_t x = 0; e->step && x < e->n_bufs; x++) policy_step_buf_free(&e->step[x]);
    free(e->step), free(e->steps), free(e->views), free(e->cc), free(e->ctx), free(e->counts), free(e->kept);
    alloc_buf_free(&e->ab);
    free(e->qbuf), free(e->q_end), free(e->q_count);
    memset(e, 0, sizeof *e);
}

bool evict_step_evicts(const evict_engine *e, int64_t end)
{
    return !e->until || end <= e->until;
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
    evict_engine *e = ctx;
    if (!e->attention) return;
    const int64_t x = (e->model ? l * e->streams : 0) + h / e->heads_per_stream; /* model: every layer's kept */
    policy_attn_add(e->attn + x * e->B * e->cap, p, n * (n_cached + n), h % e->heads_per_stream == 0);
}

/* The policy's view of stream x of layer l after a chunk of n (the candidates
 * of step 2, docs/sim.md#the-eviction-step-step-by-step), its host copies in
 * slot `slot`; the budget is the stream's capacity (N under uniform and dynamic
 * allocators), as sim's. */
static policy_view view_of(evict_engine *e, const forward_state *s, int64_t l, int64_t x, int64_t n, int64_t slot)
{
    const int64_t g0 = x * e->kv_per_stream, lg = l * e->K + g0, cols = s->cache_len[lg];
    policy_view v = {.n = cols, .D = e->D, .pos = s->cache_pos + lg * s->cap, .budget = e->caps[l * e->streams + x],
                     .now = s->len + n - 1, .layer = l, .kv_head = g0, .step = s->steps, .q_heads = e->G,
                     .rope = e->rope};
    if (e->layers)
        v.wo = e->layers[l].wo, v.wo_dim = e->dim, v.wo_ld = e->H * e->D, v.q_head0 = g0 * e->G;
    /* keys and values: the stream's first kv head (a layer-scope policy sees the layer's first, as in sim) */
    v.keys = forward_cache_rows(s, l, g0, 0, e->hk + slot * e->cap * e->D);
    v.values = forward_cache_rows(s, l, g0, 1, e->hv + slot * e->cap * e->D);
    if (e->qwin > 0) {
        v.queries = e->qbuf + (l * e->H + g0 * e->G) * e->qrows * e->D;
        v.T = e->qrows, v.q0 = e->q_end[l] - e->q_count[l];
    }
    if (e->attention) {
        float *acc = e->attn + ((e->model ? l * e->streams : 0) + x) * e->B * e->cap;
        policy_attn_divide(acc, n * cols, e->heads_per_stream);
        v.attn = acc, v.n_queries = n;
    }
    return v;
}

/* policy_step's compaction: the kept rows of every kv head of the stream. */
static void keep_rows(void *ctx, const int64_t *keep, int64_t kept)
{
    const evict_stream *c = ctx;
    for (int64_t g = c->g0; g < c->g0 + c->ng; g++) forward_cache_keep(c->s, c->l, g, keep, kept);
}

/* A dynamic allocator's step over the streams of layers l0 .. l0+nl-1
 * together: a layer's (adakv, sim_replay_scope's) or the model's (cake,
 * global: sim_replay_scope's). */
static int scope_step(evict_engine *e, forward_state *s, int64_t l0, int64_t nl, int64_t n, kv_err *err)
{
    const int64_t S = nl * e->streams;
    for (int64_t i = 0; i < S; i++) {
        const int64_t l = l0 + i / e->streams, x = i % e->streams;
        e->views[i] = view_of(e, s, l, x, n, i);
        e->cc[i] = (evict_stream){s, l, x * e->kv_per_stream, e->kv_per_stream};
    }
    const alloc_scope_args args = {.pc = &e->pc, .ac = &e->ac, .n_streams = S,
                                   .states = e->state + l0 * e->streams, .views = e->views, .bufs = e->steps,
                                   .compact = keep_rows, .ctx = e->ctx, .budget = e->budget,
                                   .total = S * e->budget, .ab = &e->ab, .counts = e->counts,
                                   .per_layer = e->streams};
    bool evicted = false;
    int rc = alloc_scope_step(&args, e->kept, &evicted, err);
    for (int64_t i = 0; !rc && i < S; i++) e->evictions += e->kept[i] < e->views[i].n;
    return rc;
}

static int after_layer(void *ctx, forward_state *s, int64_t l, int64_t n, kv_err *err)
{
    evict_engine *e = ctx;
    if (!evict_step_evicts(e, s->len + n)) return KV_OK; /* past the context: the cache keeps every row */
    if (e->model) return l == e->L - 1 ? scope_step(e, s, 0, e->L, n, err) : KV_OK; /* at the chunk's end */
    if (e->joint) return scope_step(e, s, l, 1, n, err);
    for (int64_t x = 0; x < e->streams; x++) {
        const int64_t i = l * e->streams + x;
        policy_view v = view_of(e, s, l, x, n, 0);
        evict_stream c = {s, l, x * e->kv_per_stream, e->kv_per_stream};
        int64_t kept;
        int rc = policy_step(pc_of(e, i), e->state[i], &v, &e->step[0], keep_rows, &c, &kept, err);
        if (rc) return rc;
        e->evictions += kept < v.n;
    }
    return KV_OK;
}

/* ---- setup ---------------------------------------------------------------- */

/* The per-step buffers of the n_bufs streams whose views live at once. */
static int alloc_step_buffers(evict_engine *e, kv_err *err)
{
    const size_t nb = (size_t)e->n_bufs, cap = (size_t)e->cap, D = (size_t)e->D;
    if (!(e->hk = kv_calloc(nb * cap * D, sizeof(float), "cache keys", err)) ||
        !(e->hv = kv_calloc(nb * cap * D, sizeof(float), "cache values", err)) ||
        !(e->step = kv_calloc(nb, sizeof *e->step, "eviction steps", err)) ||
        !(e->steps = kv_calloc(nb, sizeof *e->steps, "eviction steps", err)) ||
        !(e->views = kv_calloc(nb, sizeof *e->views, "eviction steps", err)) ||
        !(e->cc = kv_calloc(nb, sizeof *e->cc, "eviction steps", err)) ||
        !(e->ctx = kv_calloc(nb, sizeof *e->ctx, "eviction steps", err)) ||
        !(e->counts = kv_calloc(nb, sizeof *e->counts, "eviction steps", err)) ||
        !(e->kept = kv_calloc(nb, sizeof *e->kept, "eviction steps", err)) ||
        (e->joint && alloc_buf_init(&e->ab, e->n_bufs * e->cap, err)))
        return err->code;
    for (int64_t x = 0; x < e->n_bufs; x++) {
        if (policy_step_buf_init(&e->step[x], e->cap, err)) return err->code;
        e->steps[x] = &e->step[x], e->ctx[x] = &e->cc[x];
    }
    return KV_OK;
}

static int alloc_buffers(evict_engine *e, kv_err *err)
{
    const size_t cap = (size_t)e->cap, D = (size_t)e->D;
    if (!(e->state = kv_calloc((size_t)(e->L * e->streams), sizeof(void *), "policy states", err)) ||
        !(e->caps = kv_calloc((size_t)(e->L * e->streams), sizeof(int64_t), "capacities", err)) ||
        alloc_step_buffers(e, err) ||
        !(e->q_end = kv_calloc((size_t)e->L, sizeof(int64_t), "query window", err)) ||
        !(e->q_count = kv_calloc((size_t)e->L, sizeof(int64_t), "query window", err)))
        return err->code;
    if (e->attention &&
        !(e->attn = kv_calloc((size_t)(e->n_attn * e->B) * cap, sizeof(float), "attention", err)))
        return err->code;
    if (e->qwin > 0 &&
        !(e->qbuf = kv_calloc((size_t)(e->L * e->H * e->qrows) * D, sizeof(float), "query window", err)))
        return err->code;
    return KV_OK;
}

/* Each stream's capacity and policy as the plan lays them out (plan_layer_streams: a layer-scope
 * stream gets the mean of its kv heads' capacities, an allocator's streaming heads run their own
 * policy), as sim's replay has them. */
static int fill_caps(evict_engine *e, kv_err *err)
{
    plan_stream *st = kv_calloc((size_t)e->K, sizeof *st, "allocator", err);
    int rc = st ? KV_OK : err->code;
    for (int64_t l = 0; !rc && l < e->L; l++) {
        int64_t n;
        rc = plan_layer_streams(&e->pc, &e->ac, e->budget, e->L, e->H, e->K, l, st, &n, err);
        for (int64_t x = 0; !rc && x < n; x++) {
            e->caps[l * e->streams + x] = st[x].cap;
            if (!st[x].own_policy) continue;
            if (!e->own && !(e->own = kv_calloc((size_t)(e->L * e->streams), sizeof *e->own, "allocator", err))) {
                rc = err->code;
                break;
            }
            e->own[l * e->streams + x] = true, e->spc = st[x].own;
        }
    }
    free(st);
    return rc;
}

int evict_init_alloc(evict_engine *e, const policy_config *pc, const alloc_config *ac, int64_t budget,
                     const model_config *cfg, int64_t B, int64_t cap, kv_err *err)
{
    memset(e, 0, sizeof *e);
    int rc0 = plan_check_online(pc, "in-model eviction", "policy", err);
    if (!rc0) rc0 = plan_check_query_window(pc, err);
    if (rc0) return rc0;
    if (budget < 1) return kv_fail(err, KV_EUSAGE, "eviction budget must be at least 1, got %lld", (long long)budget);
    int rc = ac ? KV_OK : plan_default_allocator(&e->ac, err);
    if (rc) return rc;
    if (ac) e->ac = *ac;
    int64_t rows;
    if ((rc = evict_alloc_rows(pc, &e->ac, budget, cfg, B, cap, &rows, &e->width, err))) return rc;
    e->pc = *pc, e->budget = budget, e->B = B, e->cap = cap;
    e->L = cfg->n_layers, e->H = cfg->n_heads, e->K = cfg->n_kv_heads, e->D = cfg->head_dim, e->G = e->H / e->K;
    const policy_streams ps = policy_streams_of(pc, e->H, e->K);
    e->streams = ps.per_layer, e->kv_per_stream = ps.kv_heads, e->heads_per_stream = ps.q_heads;
    const plan_scope scope = plan_scope_of(pc, &e->ac, e->H, e->K);
    e->model = scope == PLAN_JOINT_MODEL;
    e->joint = scope != PLAN_STREAMS;
    e->n_bufs = e->model ? e->L * e->streams : e->joint ? e->streams : 1;
    e->n_attn = e->model ? e->L * e->streams : e->streams;
    const plan_inputs in = plan_run_inputs(pc, 1, &e->ac, 1);
    e->attention = in.attention;
    e->qwin = in.query_window < cap ? in.query_window : cap; /* never more queries than the run has positions */
    e->qrows = e->qwin + B;
    rc = alloc_buffers(e, err);
    if (!rc) rc = fill_caps(e, err);
    for (int64_t i = 0; !rc && i < e->L * e->streams; i++)
        if (pc_of(e, i)->iface->create) rc = pc_of(e, i)->iface->create(pc_of(e, i), &e->state[i], err);
    if (rc) {
        evict_free(e);
        return rc;
    }
    e->hooks = (forward_evictor){.ctx = e, .on_queries = on_queries, .on_attention = on_attention,
                                 .after_layer = after_layer};
    return KV_OK;
}

int evict_init(evict_engine *e, const policy_config *pc, int64_t budget, const model_config *cfg, int64_t B,
               int64_t cap, kv_err *err)
{
    return evict_init_alloc(e, pc, NULL, budget, cfg, B, cap, err);
}

void evict_snapshot(const evict_engine *e, const forward_state *s, int32_t *out)
{
    const int64_t N = e->width;
    for (int64_t lg = 0; lg < e->L * e->K; lg++) {
        const int64_t len = s->cache_len[lg] < N ? s->cache_len[lg] : N;
        const int64_t *pos = s->cache_pos + lg * s->cap;
        for (int64_t i = 0; i < N; i++) out[lg * N + i] = i < len ? (int32_t)pos[i] : -1;
    }
}
