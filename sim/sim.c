#include "sim/sim.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/outfile.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "trace/trace.h"
#include "plan/plan.h"
#include "results/results_h5.h"
#include "sim/reference.h"
#include "sim/replay.h"
#include "sim/results.h"
#include "sim/sim_alloc.h"
#include "sim/sim_trace.h"
#include "study/study.h"

typedef struct {
    float *q, *k, *v;      /* [H][T][D], [K][T][D], [K][T][D] */
    float *kvzip;          /* [H][T] when a policy reads /attention/kvzip, else NULL */
    float *wo;             /* [wo_dim][H*D] the layer's /wo, when a configuration reads it (wants_wo) */
    double *span_full;     /* [n_spans][H][T] the full cache's weight on each span (sim_spans_full), NULL: none */
} layer_bufs;

/* What the run's configurations read (the plan: W_o unless relabel_wo turned it off, the kvzip rows). */
static plan_inputs run_inputs(const sim_opts *o)
{
    return plan_run_inputs(o->policies, o->n_policies, o->allocators, o->n_allocators);
}

/* Reads one layer's queries, keys and values, its kvzip rows and W_o when asked
 * (on this thread: all HDF5 I/O here). */
static int load_layer(trace *tr, int64_t l, layer_bufs *b, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    const int64_t T = m->n_tokens, D = m->head_dim;
    int rc = KV_OK;
    for (int64_t h = 0; !rc && b->kvzip && h < m->n_heads; h++)
        rc = trace_read_head(tr, TRACE_KVZIP, l, h, b->kvzip + h * T, err);
    for (int64_t h = 0; !rc && h < m->n_heads; h++) rc = trace_read_head(tr, TRACE_QUERIES, l, h, b->q + h * T * D, err);
    for (int64_t g = 0; !rc && g < m->n_kv_heads; g++) {
        rc = trace_read_head(tr, TRACE_KEYS, l, g, b->k + g * T * D, err);
        if (!rc) rc = trace_read_head(tr, TRACE_VALUES, l, g, b->v + g * T * D, err);
    }
    return rc;
}

/* One work item: configuration c over the stream of kv heads g0 .. g0+ng-1
 * with capacity cap (replayed under `own` instead of the configuration's
 * policy when use_own: duo's streaming heads), or (joint) all the layer's kv
 * heads under a layer-wide dynamic allocator, or (model) every stream of
 * the model in lock step under a model-wide one. */
typedef struct {
    int c;
    int64_t g0, ng, cap;
    bool joint, model;
    plan_stream stream;    /* its stream's layout (own_policy: an allocator's streaming head) */
} sim_item;

/* A task: items order[first .. first + n), replayed together (n > 1: one stream's budgets of a
 * configuration whose policy shares work between them, in lock step: sim_replay_group). */
typedef struct {
    int first, n;
} sim_task;

typedef struct {
    const sim_opts *o;
    const sim_layer *ly;
    sim_results *res;
    int64_t layer;
    const sim_item *items;
    const sim_task *tasks;
    const int *order;      /* [n_items] the items, task by task */
    int *rc;               /* [n_items] */
    kv_err *errs;          /* [n_items] */
    double *replay_ns, *metrics_ns; /* [n_items] */
} task_ctx;

/* The item's result slots: the statistics, per-head arrays and step records of its heads. */
static sim_result item_result(const sim_results *r, const sim_item *it, int64_t l, int64_t *retained)
{
    const int64_t K = r->K, G = r->H / r->K;
    const size_t at = ((size_t)it->c * (size_t)r->L + (size_t)l) * (size_t)K + (size_t)it->g0; /* [c][l][g0] */
    return (sim_result){
        .stats = r->stats + (((size_t)it->c * (size_t)r->L + (size_t)l) * (size_t)r->H + (size_t)(it->g0 * G)) *
                 N_PHASES,
        .retained = retained, .n_retained = r->head_budget + at, .kept_mean = r->head_mean + at,
        .kept_hash = r->kept_hash + at,
        .step_cand = r->step_cand ? r->step_cand + at * (size_t)r->n_steps : NULL,
        .step_kept = r->step_kept ? r->step_kept + at * (size_t)r->n_steps : NULL,
        .n_steps = r->n_steps, .logdet = r->logdet + at,
        .span_ret = r->span_ret ? r->span_ret + at * (size_t)r->n_spans : NULL,
        .span_recall = r->span_recall ? r->span_recall + at * (size_t)r->n_spans : NULL,
    };
}

/* A replayed item's kept positions (retained [ng][T]) and scoring counters into the results. */
static void item_done(task_ctx *t, int item, const sim_result *out, const int64_t *retained)
{
    sim_results *r = t->res;
    const sim_item *it = &t->items[item];
    const int64_t K = r->K, l = t->layer;
    const int c = it->c;
    for (int64_t x = 0; x < it->ng; x++) {
        int64_t *dst = r->retained[c] + (l * K + it->g0 + x) * r->width[c];
        const int64_t n = out->n_retained[x];
        KV_ASSERT(n <= r->width[c]);
        for (int64_t i = 0; i < r->width[c]; i++) dst[i] = i < n ? retained[x * r->T + i] : RESULTS_PAD;
    }
    /* timing: one slot per (configuration, first kv head of the stream) */
    r->calls[(size_t)c * (size_t)K + (size_t)it->g0] += out->calls;
    r->candidates[(size_t)c * (size_t)K + (size_t)it->g0] += out->candidates;
    r->score_ns[(size_t)c * (size_t)K + (size_t)it->g0] += out->score_ns;
    t->replay_ns[item] = out->replay_ns, t->metrics_ns[item] = out->metrics_ns;
}

static void run_task(void *ctx_, int task, int thread)
{
    (void)thread;
    task_ctx *t = ctx_;
    sim_results *r = t->res;
    const int n = t->tasks[task].n, *mem = t->order + t->tasks[task].first;
    const sim_item *it = &t->items[mem[0]]; /* the stream, policy, allocator and chunk of every member */
    const int64_t l = t->layer;
    const policy_config *pc = sim_cfg_policy(t->o, it->c);
    int64_t *retained = malloc(sizeof(int64_t) * (size_t)(r->T * it->ng * n));
    int64_t *budgets = malloc(sizeof(int64_t) * 2 * (size_t)n), *caps = budgets ? budgets + n : NULL;
    sim_result *outs = malloc(sizeof *outs * (size_t)n);
    /* the layers as this configuration sees them: its own prefill chunk (--chunks) */
    const int64_t n_ly = it->model ? r->L : 1;
    sim_layer *ly = malloc(sizeof *ly * (size_t)n_ly);
    kv_err *err = &t->errs[mem[0]];
    int rc = KV_OK;
    if (!retained || !budgets || !outs || !ly) rc = kv_fail(err, KV_EFAIL, "sim: out of memory");
    for (int64_t x = 0; !rc && x < n_ly; x++) ly[x] = t->ly[x], ly[x].chunk = sim_cfg_chunk(t->o, it->c);
    for (int i = 0; !rc && i < n; i++) {
        outs[i] = item_result(r, &t->items[mem[i]], l, retained + (size_t)i * (size_t)(r->T * it->ng));
        budgets[i] = sim_cfg_budget(t->o, t->items[mem[i]].c), caps[i] = t->items[mem[i]].cap;
    }
    const alloc_config *ac = sim_cfg_alloc(t->o, it->c);
    if (!rc && (it->model || it->joint)) /* one item: a scope of streams under a dynamic allocator */
        rc = sim_replay_scope(ly, it->model ? r->L : 1, pc, ac, budgets[0], it->model ? 0 : l, &outs[0], err);
    else if (!rc)
        rc = sim_replay_group(ly, it->stream.own_policy ? &it->stream.own : pc, n, budgets, caps, l, it->g0, it->ng,
                              outs, err);
    for (int i = 0; i < n; i++) {
        t->rc[mem[i]] = rc;
        if (rc) t->errs[mem[i]] = *err;
        else item_done(t, mem[i], &outs[i], outs[i].retained);
    }
    free(ly), free(outs), free(budgets), free(retained);
}

/* Whether item a may share a task: a plain stream (no dynamic scope, no allocator's own policy)
 * of a policy that shares work between budgets (policy_iface.share_create). */
static bool may_group(const sim_opts *o, const sim_item *a)
{
    return !a->joint && !a->model && !a->stream.own_policy && sim_cfg_policy(o, a->c)->iface->share_create;
}

/* Whether items a and b (a may_group) are one stream's budgets of one configuration (policy,
 * allocator, chunk): one task. */
static bool same_group(const sim_opts *o, const sim_item *a, const sim_item *b)
{
    return may_group(o, b) && sim_cfg_policy(o, a->c) == sim_cfg_policy(o, b->c) &&
           sim_cfg_alloc(o, a->c) == sim_cfg_alloc(o, b->c) && sim_cfg_chunk(o, a->c) == sim_cfg_chunk(o, b->c) &&
           a->g0 == b->g0 && a->ng == b->ng;
}

/* A lock-step task holds every member's replay at once: at most 16 budgets whose capacities sum
 * to at most 2^15 rows (a budget above that runs alone, as ever), so a group never holds more than
 * 16 replays' fixed buffers and the rows one replay of 2^15 rows would hold. */
enum { SIM_GROUP_MAX = 16, SIM_GROUP_ROWS = 1 << 15 };

/* The tasks over n items (order and tasks: [n]): each item with the later ones of its group
 * (same_group, within SIM_GROUP_MAX and SIM_GROUP_ROWS; none when !group), in item order; returns
 * the number of tasks. */
static int make_tasks(const sim_opts *o, const sim_item *items, int n, bool group, int *order, sim_task *tasks,
                      uint8_t *taken)
{
    int nt = 0, k = 0;
    memset(taken, 0, (size_t)n);
    for (int i = 0; i < n; i++) {
        if (taken[i]) continue;
        tasks[nt] = (sim_task){.first = k, .n = 1};
        taken[i] = 1, order[k++] = i;
        int64_t rows = items[i].cap;
        for (int j = i + 1; group && may_group(o, &items[i]) && j < n && tasks[nt].n < SIM_GROUP_MAX; j++)
            if (!taken[j] && items[j].cap <= SIM_GROUP_ROWS - rows && same_group(o, &items[i], &items[j]))
                taken[j] = 1, order[k++] = j, tasks[nt].n++, rows += items[j].cap;
        nt++;
    }
    return nt;
}

/* The work items of layer l, in a fixed order: per configuration, its streams as the plan lays
 * them out (plan_layer_streams: one per kv head, or one for the layer under a layer-scope policy,
 * with an allocator's streaming heads), or one joint item for the layer under a layer-wide dynamic
 * allocator. Model-wide scopes have their own pass (run_lockstep). Only the configurations c with
 * want[c] (all: want NULL). */
static int make_items(const sim_opts *o, int n_cfg, const uint8_t *want, int64_t L, int64_t l, int64_t H, int64_t K,
                      plan_stream *streams, sim_item *items, kv_err *err)
{
    int n = 0;
    for (int c = 0; c < n_cfg; c++) {
        if (want && !want[c]) continue;   /* another unit's configuration (sim_study.c) */
        const policy_config *pc = sim_cfg_policy(o, c);
        const alloc_config *ac = sim_cfg_alloc(o, c);
        const int64_t N = sim_cfg_budget(o, c);
        const plan_scope scope = plan_scope_of(pc, ac, H, K);
        if (scope == PLAN_JOINT_MODEL) continue;
        if (scope == PLAN_JOINT_LAYER) {
            items[n++] = (sim_item){.c = c, .g0 = 0, .ng = K, .cap = N, .joint = true};
            continue;
        }
        int64_t ns;
        if (plan_layer_streams(pc, ac, N, L, H, K, l, streams, &ns, err)) return -1;
        for (int64_t x = 0; x < ns; x++)
            items[n++] = (sim_item){.c = c, .g0 = streams[x].g0, .ng = streams[x].ng, .cap = streams[x].cap,
                                    .stream = streams[x]};
    }
    return n;
}

/* Reads layer l into b and its full-cache reference into ref (from the
 * trace's /attention/out and /attention/lse when it has them, else
 * computed); ly
 * then describes it (on this thread: all HDF5 I/O here). */
static int prepare_layer(const sim_opts *o, trace *tr, int64_t l, layer_bufs *b, sim_reference *ref, sim_layer *ly,
                         sim_results *res, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    double t0 = kv_now_seconds();
    int rc = load_layer(tr, l, b, err);
    if (!rc && b->wo) rc = trace_read_wo(tr, l, b->wo, err);
    if (rc) return rc;
    double t1 = kv_now_seconds();
    res->load_s += t1 - t0;
    const int threads = kv_threads(o->threads);
    if (sim_reference_recorded(tr)) { /* recorded at capture (or by synth): read, not recomputed */
        if ((rc = sim_reference_read(ref, tr, l, err))) return rc;
    } else if (sim_reference_compute(ref, b->q, b->k, b->v, m->n_tokens, m->head_dim, m->n_heads, m->n_kv_heads,
                                     threads) != 0) {
        return kv_fail(err, KV_EFAIL, "sim: out of memory for the full-cache reference");
    }
    int64_t bad_h, bad_pos;
    if (sim_reference_nonfinite(ref, &bad_h, &bad_pos))
        return kv_fail(err, KV_EINPUT, "%s: layer %lld, head %lld, position %lld: the full-cache attention is "
                       "not finite (inf or NaN: float32 scores overflow) although the trace's values are finite "
                       "(keys, queries or values too large)", o->trace, (long long)l, (long long)bad_h,
                       (long long)bad_pos);
    *ly = (sim_layer){.T = m->n_tokens, .D = m->head_dim, .H = m->n_heads, .K = m->n_kv_heads,
                      .prompt_len = m->prompt_len, .q = b->q, .k = b->k, .v = b->v, .kvzip = b->kvzip, .ref = ref,
                      .chunk = o->chunk, .decode_chunk = o->decode_chunk, .eval_stride = o->eval_stride,
                      .rope = {.theta = m->rope_theta, .div = m->rope_freq_factors},
                      .wo = b->wo, .wo_dim = b->wo ? m->wo_dim : 0};
    rope_style_parse(m->rope_style, &ly->rope.style); /* trace_open checked it */
    free(b->span_full), b->span_full = NULL;
    ly->spans = res->spans, ly->n_spans = res->n_spans;
    int rc2 = res->n_spans ? sim_spans_full(ly, &b->span_full, err) : KV_OK;
    ly->span_full = b->span_full;
    res->reference_s += kv_now_seconds() - t1;
    return rc2;
}

/* Runs n work items on threads over ly (one layer, or every layer for the
 * model-wide items); the first failure in item order is the error. */
static int run_items(const sim_opts *o, const sim_layer *ly, sim_results *res, int64_t l, const sim_item *items,
                     int n_items, kv_err *err)
{
    int rc = KV_OK;
    int *rcs = calloc((size_t)n_items + 1, sizeof *rcs);
    kv_err *errs = calloc((size_t)n_items + 1, sizeof *errs);
    double *times = calloc((size_t)n_items * 2 + 1, sizeof *times);
    int *order = calloc((size_t)n_items + 1, sizeof *order);
    sim_task *tasks = calloc((size_t)n_items + 1, sizeof *tasks);
    uint8_t *taken = calloc((size_t)n_items + 1, 1);
    if (!rcs || !errs || !times || !order || !tasks || !taken) rc = kv_fail(err, KV_EFAIL, "sim: out of memory");
    if (!rc) {
        /* grouping saves arithmetic but not wall time when it leaves threads idle: then every item alone
         * (the results are the same either way) */
        const int threads = kv_threads(o->threads);
        int n_tasks = make_tasks(o, items, n_items, true, order, tasks, taken);
        if (n_tasks < threads && n_tasks < n_items) n_tasks = make_tasks(o, items, n_items, false, order, tasks, taken);
        task_ctx t = {o, ly, res, l, items, tasks, order, rcs, errs, times, times + n_items};
        kv_parallel_for(n_tasks, threads, run_task, &t);
        for (int i = 0; i < n_items && !rc; i++) /* the first failure in item order: deterministic */
            if (rcs[i]) /* the replay's input errors (overflow) name the trace here */
                rc = rcs[i] == KV_EINPUT ? kv_fail(err, rcs[i], "%s: %s", o->trace, errs[i].msg)
                                         : kv_fail(err, rcs[i], "%s", errs[i].msg);
        for (int i = 0; i < n_items; i++) res->replay_s += times[i] * 1e-9, res->metrics_s += times[n_items + i] * 1e-9;
    }
    free(rcs), free(errs), free(times), free(order), free(tasks), free(taken);
    return rc;
}

static int run_layer(const sim_opts *o, trace *tr, int64_t l, const uint8_t *want, layer_bufs *b, sim_results *res,
                     kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    sim_reference ref = {0};
    sim_layer ly;
    int rc = prepare_layer(o, tr, l, b, &ref, &ly, res, err);
    const int max_items = res->n_cfg * (int)m->n_kv_heads;
    sim_item *items = rc ? NULL : calloc((size_t)max_items, sizeof *items);
    plan_stream *streams = rc ? NULL : calloc((size_t)m->n_kv_heads, sizeof *streams);
    if (!rc && (!items || !streams)) rc = kv_fail(err, KV_EFAIL, "sim: out of memory");
    const int n_items =
        rc ? 0 : make_items(o, res->n_cfg, want, m->n_layers, l, m->n_heads, m->n_kv_heads, streams, items, err);
    if (n_items < 0) rc = err->code;
    if (!rc && n_items) rc = run_items(o, &ly, res, l, items, n_items, err);
    free(items), free(streams);
    sim_reference_free(&ref);
    return rc;
}

/* One layer's buffers for the run: queries, keys, values, and the kvzip rows and W_o when a
 * configuration reads them (the per-layer pass holds one, the lock-step pass one per layer). */
static int layer_bufs_alloc(const sim_opts *o, const trace_meta *m, layer_bufs *b, kv_err *err)
{
    const int64_t H = m->n_heads, K = m->n_kv_heads, T = m->n_tokens, D = m->head_dim;
    const plan_inputs in = run_inputs(o);
    if (!(b->q = kv_calloc((size_t)(H * T * D), sizeof(float), "queries", err)) ||
        !(b->k = kv_calloc((size_t)(K * T * D), sizeof(float), "keys", err)) ||
        !(b->v = kv_calloc((size_t)(K * T * D), sizeof(float), "values", err)) ||
        (in.kvzip && !(b->kvzip = kv_calloc((size_t)(H * T), sizeof(float), "KVzip rows", err))) ||
        (m->wo_dim > 0 && in.wo && !(b->wo = kv_calloc((size_t)(m->wo_dim * H * D), sizeof(float), "W_o", err))))
        return err->code;
    return KV_OK;
}

static void layer_bufs_free(layer_bufs *b)
{
    free(b->q), free(b->k), free(b->v), free(b->kvzip), free(b->wo), free(b->span_full);
}

/* The model-wide configurations (cake, global) after the per-layer pass:
 * every layer read and its reference computed, kept at once, then one item
 * per configuration replays all L·K streams in lock step (memory about L
 * times one layer's; estimated and refused above --max-memory before any
 * work, sim_lockstep_check). Only the configurations c with want[c] (all: want NULL). */
static int run_lockstep(const sim_opts *o, trace *tr, const uint8_t *want, sim_results *res, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    const int64_t L = m->n_layers;
    int n_items = 0, rc = KV_OK;
    sim_item *items = calloc((size_t)res->n_cfg, sizeof *items);
    layer_bufs *b = calloc((size_t)L, sizeof *b);
    sim_reference *refs = calloc((size_t)L, sizeof *refs);
    sim_layer *lys = calloc((size_t)L, sizeof *lys);
    if (!items || !b || !refs || !lys) rc = kv_fail(err, KV_EFAIL, "sim: out of memory");
    for (int c = 0; !rc && c < res->n_cfg; c++)
        if (plan_scope_of(sim_cfg_policy(o, c), sim_cfg_alloc(o, c), m->n_heads, m->n_kv_heads) == PLAN_JOINT_MODEL &&
            (!want || want[c]))
            items[n_items++] = (sim_item){.c = c, .g0 = 0, .ng = L * m->n_kv_heads, .cap = sim_cfg_budget(o, c),
                                          .model = true};
    for (int64_t l = 0; !rc && n_items && l < L; l++) {
        rc = layer_bufs_alloc(o, m, &b[l], err);
        if (!rc) rc = prepare_layer(o, tr, l, &b[l], &refs[l], &lys[l], res, err);
    }
    if (!rc && n_items) rc = run_items(o, lys, res, 0, items, n_items, err);
    for (int64_t l = 0; b && refs && l < L; l++)
        layer_bufs_free(&b[l]), sim_reference_free(&refs[l]);
    free(items), free(b), free(refs), free(lys);
    return rc;
}

static int check_trace(const sim_opts *o, trace *tr, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    if (!trace_has(tr, TRACE_QUERIES))
        return kv_fail(err, KV_EINPUT, "%s: has no /queries dataset; sim needs the queries (capture with "
                       "--record keys,values,queries)", o->trace);
    int rc = plan_check_trace(o->policies, o->n_policies, trace_has(tr, TRACE_KVZIP), o->trace, err);
    if (rc) return rc;
    if (m->head_dim > 4096 || m->n_tokens > ((int64_t)1 << 28))
        return kv_fail(err, KV_EINPUT, "%s: T = %lld, D = %lld is beyond what sim handles", o->trace,
                       (long long)m->n_tokens, (long long)m->head_dim);
    return KV_OK;
}

/* The run's own copy of the options: the default allocator when none was given,
 * budgets given as fractions of T turned into N = ⌊f·T⌋ (at least 1 row is
 * refused below that), and every allocator's check of every budget. */
struct sim_plan {
    sim_opts o;
    alloc_config default_alloc;
    int64_t budgets[256];
    sim_alloc_plan ap;     /* the allocators with their head scores */
    policy_config policies[CLI_LIST_MAX]; /* the run's copy, relabelled (relabel_wo) */
};

/* A configuration reading W_o on a trace without /wo runs as its policy declares (plan_without_wo:
 * criticalkv's wo=absent, ‖v‖₁ alone), relabelled so that results.csv says which runs had no W_o;
 * two configurations that become the same run are refused. */
static int relabel_wo(const trace_meta *m, sim_plan *p, kv_err *err)
{
    if (p->o.n_policies > CLI_LIST_MAX) return KV_OK; /* not from the command line: no relabelling */
    memcpy(p->policies, p->o.policies, sizeof *p->policies * (size_t)p->o.n_policies);
    p->o.policies = p->policies;
    for (int c = 0; m->wo_dim == 0 && c < p->o.n_policies; c++) {
        policy_config *pc = &p->policies[c];
        char before[sizeof pc->canonical];
        snprintf(before, sizeof before, "%s", pc->canonical);
        bool changed = false;
        int rc = plan_without_wo(pc, &changed, err);
        if (rc) return rc;
        if (!changed) continue;
        for (int d = 0; d < p->o.n_policies; d++)
            if (d != c && p->policies[d].iface == pc->iface && strcmp(p->policies[d].canonical, pc->canonical) == 0)
                return cli_usage(err, "sim", "--policies: %s:%s is %s:%s on this trace (it has no /wo: capture "
                                 "--record wo), given twice", pc->iface->name, before, pc->iface->name, pc->canonical);
    }
    return KV_OK;
}

static int plan(const sim_opts *o, trace *tr, sim_plan *p, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    p->o = *o;
    int rc0 = relabel_wo(m, p, err);
    if (rc0) return rc0;
    if (!o->n_allocators) {
        int rc = plan_default_allocator(&p->default_alloc, err);
        if (rc) return rc;
        p->o.allocators = &p->default_alloc, p->o.n_allocators = 1;
    }
    if (o->n_budgets > 256) return cli_usage(err, "sim", "--budgets lists %d budgets (at most 256)", o->n_budgets);
    for (int b = 0; b < o->n_budgets; b++) {
        const double f = o->budget_fractions ? o->budget_fractions[b] : NAN;
        p->budgets[b] = isnan(f) ? o->budgets[b] : (int64_t)floor(f * (double)m->n_tokens + 1e-9);
        if (p->budgets[b] < 1)
            return cli_usage(err, "sim", "--budgets %g%% of T = %lld tokens is less than one row", f * 100,
                             (long long)m->n_tokens);
    }
    p->o.budgets = p->budgets;
    int rc = sim_alloc_prepare(&p->ap, &p->o, tr, err);
    if (rc) return rc;
    for (int a = 0; a < p->o.n_allocators; a++)
        for (int b = 0; b < o->n_budgets; b++) {
            if ((rc = alloc_check(&p->o.allocators[a], p->budgets[b], m->n_layers, m->n_kv_heads, err))) return rc;
        }
    return sim_lockstep_check(&p->o, m, err);
}

void sim_trace_free(trace_run *t)
{
    if (t->has_res) sim_results_free(&t->res);
    if (t->p) sim_alloc_plan_free(&t->p->ap);
    free(t->p);
    memset(t, 0, sizeof *t);
}

const sim_opts *sim_trace_opts(const trace_run *t)
{
    return &t->p->o;
}

int sim_trace_prepare(const sim_opts *opts, trace_run *t, kv_err *err)
{
    trace *tr = NULL;
    int rc = trace_open(opts->trace, &tr, err);
    if (!rc) rc = check_trace(opts, tr, err);
    if (!rc && !(t->p = kv_calloc(1, sizeof *t->p, "sim", err))) rc = err->code;
    if (!rc) rc = plan(opts, tr, t->p, err);
    const sim_opts *o = rc ? NULL : &t->p->o;
    const trace_meta *m = trace_get_meta(tr);
    int64_t n_steps = 0; /* --step-counts takes one chunk; the most steps of any otherwise (unused) */
    for (int k = 0; o && k < sim_n_chunks(o); k++) {
        const sim_layer shape = {.T = m->n_tokens, .prompt_len = m->prompt_len,
                                 .chunk = sim_cfg_chunk(o, k * o->n_budgets), .decode_chunk = o->decode_chunk};
        if (sim_replay_steps(&shape) > n_steps) n_steps = sim_replay_steps(&shape);
    }
    if (!rc) rc = sim_results_alloc(&t->res, o, m->n_layers, m->n_heads, m->n_kv_heads, m->n_tokens, n_steps, err);
    t->has_res = !rc;
    int64_t n_spans = 0;
    const trace_span *spans = rc ? NULL : trace_spans(tr, &n_spans);
    if (!rc) rc = sim_spans_alloc(&t->res, spans, n_spans, err);
    trace_close(tr);
    return rc;
}

/* A trace being replayed: open, one layer's buffers, the progress over its layers. */
struct sim_replayer {
    trace *tr;
    trace_run *t;
    layer_bufs b;
    kv_progress prog;
};

int sim_trace_begin(const sim_opts *opts, const char *id, bool study, trace_run *t, sim_replayer **out, kv_err *err)
{
    sim_replayer *rp = kv_calloc(1, sizeof *rp, "sim", err);
    if (!rp) return err->code;
    rp->t = t;
    int rc = trace_open(opts->trace, &rp->tr, err);
    if (rc) {
        free(rp);
        return rc;
    }
    const sim_opts *o = &t->p->o;
    const trace_meta *m = trace_get_meta(rp->tr);
    sim_note_evict(o, m);
    sim_print_cost(o, m, sim_reference_recorded(rp->tr));
    kv_blas_single_threaded(); /* tasks run in parallel; BLAS inside each stays serial */
    *out = rp;
    rc = layer_bufs_alloc(o, m, &rp->b, err);
    snprintf(t->stage, sizeof t->stage, "%s%slayers", study ? id : "", study ? ": " : "");
    progress_start(&rp->prog, "sim", m->n_layers, o->quiet && !o->progress);
    progress_stage(&rp->prog, t->stage);
    return rc;
}

/* Each pass adds its own wall time: a unit's file holds its pass's (sim_study.c). */
int sim_trace_layer(sim_replayer *rp, int64_t l, const uint8_t *want, kv_err *err)
{
    const double t0 = kv_now_seconds();
    const int rc = run_layer(&rp->t->p->o, rp->tr, l, want, &rp->b, &rp->t->res, err);
    progress_update(&rp->prog, l + 1);
    rp->t->res.wall_s += kv_now_seconds() - t0;
    return rc;
}

int sim_trace_lockstep(sim_replayer *rp, const uint8_t *want, kv_err *err)
{
    const double t0 = kv_now_seconds();
    const int rc = run_lockstep(&rp->t->p->o, rp->tr, want, &rp->t->res, err);
    rp->t->res.wall_s += kv_now_seconds() - t0;
    return rc;
}

void sim_trace_end(sim_replayer *rp)
{
    if (!rp) return;
    progress_end(&rp->prog);
    layer_bufs_free(&rp->b);
    trace_close(rp->tr);
    free(rp);
}
