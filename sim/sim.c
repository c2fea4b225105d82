#include "sim/sim.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "trace/trace.h"
#include "policies/step.h"
#include "results/results_h5.h"
#include "sim/reference.h"
#include "sim/replay.h"
#include "sim/results.h"

typedef struct {
    float *q, *k, *v;      /* [H][T][D], [K][T][D], [K][T][D] */
} layer_bufs;

/* Reads one layer's queries, keys and values (on this thread: all HDF5 I/O here). */
static int load_layer(trace *tr, int64_t l, layer_bufs *b, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    const int64_t T = m->n_tokens, D = m->head_dim;
    int rc = KV_OK;
    for (int64_t h = 0; !rc && h < m->n_heads; h++) rc = trace_read_head(tr, TRACE_QUERIES, l, h, b->q + h * T * D, err);
    for (int64_t g = 0; !rc && g < m->n_kv_heads; g++) {
        rc = trace_read_head(tr, TRACE_KEYS, l, g, b->k + g * T * D, err);
        if (!rc) rc = trace_read_head(tr, TRACE_VALUES, l, g, b->v + g * T * D, err);
    }
    return rc;
}

/* One work item: configuration c over the stream of kv heads g0 .. g0+ng-1. */
typedef struct {
    int c;
    int64_t g0, ng;
} sim_item;

typedef struct {
    const sim_opts *o;
    const sim_layer *ly;
    sim_results *res;
    int64_t layer;
    const sim_item *items;
    int *rc;               /* [n_items] */
    kv_err *errs;          /* [n_items] */
    double *replay_ns, *metrics_ns; /* [n_items] */
} task_ctx;

static void run_task(void *ctx_, int item, int thread)
{
    (void)thread;
    task_ctx *t = ctx_;
    sim_results *r = t->res;
    const sim_item *it = &t->items[item];
    const int64_t K = r->K, G = r->H / r->K, l = t->layer;
    const int c = it->c;
    const policy_config *pc = &t->o->policies[c / t->o->n_budgets];
    const int64_t budget = t->o->budgets[c % t->o->n_budgets];
    double *logdet = r->logdet + ((size_t)c * (size_t)r->L + (size_t)l) * (size_t)K + (size_t)it->g0;
    sim_result out = {
        .stats = r->stats + (((size_t)c * (size_t)r->L + (size_t)l) * (size_t)r->H + (size_t)(it->g0 * G)) * N_PHASES,
        .retained = malloc(sizeof(int64_t) * (size_t)r->T),
        .logdet = logdet,
    };
    if (!out.retained) {
        t->rc[item] = kv_fail(&t->errs[item], KV_EFAIL, "sim: out of memory");
        return;
    }
    t->rc[item] = sim_replay(t->ly, pc, budget, l, it->g0, it->ng, &out, &t->errs[item]);
    if (!t->rc[item]) {
        for (int64_t g = it->g0; g < it->g0 + it->ng; g++) {
            int64_t *dst = r->retained[c] + (l * K + g) * r->width[c];
            for (int64_t i = 0; i < r->width[c]; i++) dst[i] = i < out.n_retained ? out.retained[i] : RESULTS_PAD;
        }
        /* timing: one slot per (configuration, first kv head of the stream) */
        r->calls[(size_t)c * (size_t)K + (size_t)it->g0] += out.calls;
        r->candidates[(size_t)c * (size_t)K + (size_t)it->g0] += out.candidates;
        r->score_ns[(size_t)c * (size_t)K + (size_t)it->g0] += out.score_ns;
        t->replay_ns[item] = out.replay_ns, t->metrics_ns[item] = out.metrics_ns;
    }
    free(out.retained);
}

/* The work items of a layer, in a fixed order: per configuration, one stream
 * per kv head, or one for the whole layer when the policy has layer scope. */
static int make_items(const sim_opts *o, int n_cfg, int64_t H, int64_t K, sim_item *items)
{
    int n = 0;
    for (int c = 0; c < n_cfg; c++) {
        const policy_streams st = policy_streams_of(&o->policies[c / o->n_budgets], H, K);
        for (int64_t x = 0; x < st.per_layer; x++) items[n++] = (sim_item){c, x * st.kv_heads, st.kv_heads};
    }
    return n;
}

static int run_layer(const sim_opts *o, trace *tr, int64_t l, layer_bufs *b, sim_results *res, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    double t0 = kv_now_seconds();
    int rc = load_layer(tr, l, b, err);
    if (rc) return rc;
    double t1 = kv_now_seconds();
    res->load_s += t1 - t0;
    sim_reference ref = {0};
    const int threads = o->threads > 0 ? o->threads : kv_cpu_count();
    if (sim_reference_compute(&ref, b->q, b->k, b->v, m->n_tokens, m->head_dim, m->n_heads, m->n_kv_heads,
                              threads) != 0) {
        sim_reference_free(&ref);
        return kv_fail(err, KV_EFAIL, "sim: out of memory for the full-cache reference");
    }
    int64_t bad_h, bad_pos;
    if (sim_reference_nonfinite(&ref, &bad_h, &bad_pos)) {
        sim_reference_free(&ref);
        return kv_fail(err, KV_EINPUT, "%s: layer %lld, head %lld, position %lld: the full-cache attention is "
                       "not finite (inf or NaN: float32 scores overflow) although the trace's values are finite "
                       "(keys, queries or values too large)", o->trace, (long long)l, (long long)bad_h,
                       (long long)bad_pos);
    }
    sim_layer ly = {.T = m->n_tokens, .D = m->head_dim, .H = m->n_heads, .K = m->n_kv_heads,
                    .prompt_len = m->prompt_len, .q = b->q, .k = b->k, .v = b->v, .ref = &ref,
                    .chunk = o->chunk, .decode_chunk = o->decode_chunk, .eval_stride = o->eval_stride};
    res->reference_s += kv_now_seconds() - t1;
    const int max_items = res->n_cfg * (int)m->n_kv_heads;
    sim_item *items = calloc((size_t)max_items, sizeof *items);
    int *rcs = calloc((size_t)max_items, sizeof *rcs);
    kv_err *errs = calloc((size_t)max_items, sizeof *errs);
    double *times = calloc((size_t)max_items * 2, sizeof *times);
    if (!items || !rcs || !errs || !times) rc = kv_fail(err, KV_EFAIL, "sim: out of memory");
    const int n_items = rc ? 0 : make_items(o, res->n_cfg, m->n_heads, m->n_kv_heads, items);
    if (!rc) {
        task_ctx t = {o, &ly, res, l, items, rcs, errs, times, times + n_items};
        kv_parallel_for(n_items, threads, run_task, &t);
        for (int i = 0; i < n_items && !rc; i++) /* the first failure in item order: deterministic */
            if (rcs[i]) /* the replay's input errors (overflow) name the trace here */
                rc = rcs[i] == KV_EINPUT ? kv_fail(err, rcs[i], "%s: %s", o->trace, errs[i].msg)
                                         : kv_fail(err, rcs[i], "%s", errs[i].msg);
        for (int i = 0; i < n_items; i++) res->replay_s += times[i] * 1e-9, res->metrics_s += times[n_items + i] * 1e-9;
    }
    free(items), free(rcs), free(errs), free(times);
    sim_reference_free(&ref);
    return rc;
}

static int check_trace(const sim_opts *o, trace *tr, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    if (!trace_has(tr, TRACE_QUERIES))
        return kv_fail(err, KV_EINPUT, "%s: has no /queries dataset; sim needs the queries (capture with "
                       "--record keys,values,queries)", o->trace);
    if (m->head_dim > 4096 || m->n_tokens > ((int64_t)1 << 28))
        return kv_fail(err, KV_EINPUT, "%s: T = %lld, D = %lld is beyond what sim handles", o->trace,
                       (long long)m->n_tokens, (long long)m->head_dim);
    return KV_OK;
}

/* A trace captured with eviction inside the model (capture_mode = evict):
 * one line on stderr saying what that means for the replay, then sim runs.
 * A warning about what the numbers mean, so printed even under --quiet
 * (docs/sim.md). */
static void note_evict_trace(const sim_opts *o, const trace_meta *m)
{
    if (strcmp(m->capture_mode, "evict") != 0) return;
    fprintf(stderr,
            "kvtrace sim: note: %s was captured with eviction inside the model (%s%s%s, budget %lld): its keys, "
            "values and queries after the first eviction were computed from that policy's cache, so every "
            "policy here is replayed (and `full` measured) on that run, not on an unevicted one\n",
            o->trace, m->evict_policy, m->evict_params[0] ? ":" : "", m->evict_params, (long long)m->evict_budget);
}

/* Before a large replay (issue #15): its cost in one line on stderr (unless
 * --quiet) when it will likely take over a minute or a GiB. Floating-point
 * operations: the full-cache reference, 4 D per (query head, query, visible
 * key), i.e. 2 L H D T^2; each configuration's metrics, 4 D per (query head,
 * query, candidate) with at most N + B candidates (more for `full`); policy
 * scoring is left out (it is usually smaller; pairwise keydiff adds O(N^2 D)
 * per step). Memory: one layer's queries, keys and values plus the per-query
 * statistics; results.h5: the final caches. Minutes assume 50 GFLOP/s per
 * thread, a modest CPU core. */
static void print_cost(const sim_opts *o, const trace_meta *m)
{
    const double L = (double)m->n_layers, H = (double)m->n_heads, K = (double)m->n_kv_heads;
    const double D = (double)m->head_dim, T = (double)m->n_tokens;
    double flops = 2 * L * H * D * T * T, kept = 0;
    for (int b = 0; b < o->n_budgets; b++) {
        const double visible = fmin(T / 2, (double)(o->budgets[b] + o->chunk));
        flops += (double)o->n_policies * 4 * L * H * D * T * visible;
        kept += (double)o->n_policies * fmin(T, (double)o->budgets[b]);
    }
    const double n_cfg = (double)o->n_policies * o->n_budgets;
    const double memory = 4 * (H + 2 * K) * T * D + 16 * n_cfg * L * H * T / fmax(1, (double)o->eval_stride);
    const double results = 4 * L * K * kept + 8 * n_cfg * L * K;
    const double gib = 1024.0 * 1024.0 * 1024.0, minutes = flops / 50e9 / 60 / fmax(1, o->threads);
    if (o->quiet || (minutes < 1 && memory < gib && results < gib)) return;
    fprintf(stderr, "kvtrace: sim: %.0f configurations over %lld positions: about %.3g TFLOP (~%.0f min at 50 "
            "GFLOP/s per thread), peak memory ~%.2f GiB, results.h5 ~%.2f GiB\n", n_cfg, (long long)m->n_tokens,
            flops / 1e12, minutes, memory / gib, results / gib);
}

int sim_run(const sim_opts *o, sim_stats *summary, kv_err *err)
{
    trace *tr = NULL;
    const char *inputs[] = {o->trace};
    int rc = outfile_check_inputs(o->output, inputs, 1, err);
    if (!rc) rc = trace_open(o->trace, &tr, err);
    if (!rc) rc = check_trace(o, tr, err);
    if (rc) {
        trace_close(tr);
        return rc;
    }
    const trace_meta *m = trace_get_meta(tr);
    note_evict_trace(o, m);
    print_cost(o, m);
    const int64_t T = m->n_tokens, D = m->head_dim, H = m->n_heads, K = m->n_kv_heads;
    kv_blas_single_threaded(); /* tasks run in parallel; BLAS inside each stays serial */
    sim_results res;
    layer_bufs b = {0};
    kv_outfile out;
    rc = sim_results_alloc(&res, o, m->n_layers, H, K, T, err);
    if (!rc && (!(b.q = kv_calloc((size_t)(H * T * D), sizeof(float), "queries", err)) ||
                !(b.k = kv_calloc((size_t)(K * T * D), sizeof(float), "keys", err)) ||
                !(b.v = kv_calloc((size_t)(K * T * D), sizeof(float), "values", err))))
        rc = err->code;
    bool dir_started = false;
    if (!rc) rc = outdir_begin(&out, o->output, o->force, err), dir_started = rc == KV_OK;
    kv_progress prog;
    const double started = kv_now_seconds();
    progress_start(&prog, "sim", m->n_layers, o->quiet && !o->progress);
    progress_stage(&prog, "layers");
    for (int64_t l = 0; !rc && l < m->n_layers; l++) {
        rc = run_layer(o, tr, l, &b, &res, err);
        progress_update(&prog, l + 1);
    }
    progress_end(&prog);
    res.wall_s = kv_now_seconds() - started;
    if (!rc) rc = sim_results_write(&res, o, out.tmp_path, err);
    if (!rc) rc = outdir_commit(&out, err);
    else if (dir_started) outdir_abort(&out);
    for (int c = 0; !rc && summary && c < res.n_cfg; c++) {
        double logdet_mean;
        sim_results_summarize(&res, c, PHASE_ALL, &summary[c], &logdet_mean);
    }
    free(b.q), free(b.k), free(b.v);
    sim_results_free(&res);
    trace_close(tr);
    return rc;
}
