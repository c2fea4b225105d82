/* sim_alloc: what a run's allocators need before any work (docs/allocators.md,
 * docs/sim.md): the per-head importance of headkv and duo (--head-scores
 * FILE, or duo's ranking from the trace's column sums), the checks that
 * pair an allocator with the policies (global needs comparable scores),
 * and the
 * memory estimate of the lock-step replay of model-wide allocators. */
#include "sim/sim_alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/parallel.h"
#include "plan/plan.h"

static int read_colsum(const sim_opts *o, trace *tr, const alloc_config *ac, float **colsum, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    const int64_t L = m->n_layers, H = m->n_heads, T = m->n_tokens;
    if (!trace_has(tr, TRACE_COLSUM))
        return kv_fail(err, KV_EINPUT, "%s: has no /attention/colsum to rank %s's heads by: give --head-scores "
                       "FILE (kvtrace analyze writes one), or capture with --attention colsum", o->trace,
                       ac->iface->name);
    if (!(*colsum = kv_calloc((size_t)(L * H * T), sizeof(float), "column sums", err))) return err->code;
    int rc = KV_OK;
    for (int64_t l = 0; !rc && l < L; l++)
        for (int64_t h = 0; !rc && h < H; h++) rc = trace_read_head(tr, TRACE_COLSUM, l, h, *colsum + (l * H + h) * T, err);
    return rc;
}

/* The policies an allocator cannot pair with, refused with one line (plan_check_pair). */
static int check_pairs(const sim_opts *o, const alloc_config *ac, kv_err *err)
{
    int rc = KV_OK;
    for (int p = 0; !rc && p < o->n_policies; p++) rc = plan_check_pair(&o->policies[p], ac, "sim", err);
    return rc;
}

int sim_alloc_prepare(sim_alloc_plan *ap, sim_opts *o, trace *tr, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    const int64_t LK = m->n_layers * m->n_kv_heads;
    memset(ap, 0, sizeof *ap);
    if (o->n_allocators > SIM_MAX_ALLOCATORS)
        return cli_usage(err, "sim", "--allocators lists %d (at most %d)", o->n_allocators, SIM_MAX_ALLOCATORS);
    float *colsum = NULL;
    /* without a file sim ranks the heads from the trace (read_colsum says when it cannot) */
    int rc = plan_check_head_scores(o->allocators, o->n_allocators, o->head_scores != NULL, true, "sim",
                                    "--allocators", err);
    for (int a = 0; !rc && a < o->n_allocators; a++) {
        ap->allocs[a] = o->allocators[a];
        alloc_config *ac = &ap->allocs[a];
        rc = check_pairs(o, ac, err);
        if (rc || !plan_reads_head_scores(ac)) continue;
        if (o->head_scores && !ap->file) {
            if (!(ap->file = kv_calloc((size_t)LK, sizeof(double), "head scores", err))) rc = err->code;
            if (!rc) rc = alloc_head_scores_read(o->head_scores, m->n_layers, m->n_kv_heads, ap->file, err);
        }
        if (!rc && ap->file) ac->head_scores = ap->file;
        if (rc || ap->file || !plan_ranks_from_trace(ac)) continue;
        if (!colsum) rc = read_colsum(o, tr, ac, &colsum, err);
        if (!rc && !(ap->scores[a] = kv_calloc((size_t)LK, sizeof(double), "head scores", err))) rc = err->code;
        if (!rc) {
            plan_rank_heads(ac, colsum, m->n_layers, m->n_heads, m->n_kv_heads, m->n_tokens, ap->scores[a]);
            ac->head_scores = ap->scores[a];
        }
    }
    free(colsum);
    if (!rc) o->allocators = ap->allocs;
    return rc;
}

void sim_alloc_plan_free(sim_alloc_plan *ap)
{
    for (int a = 0; a < SIM_MAX_ALLOCATORS; a++) free(ap->scores[a]);
    free(ap->file);
}

static double sim_lockstep_bytes(const sim_opts *o, const trace_meta *m, int *n_model)
{
    const double L = (double)m->n_layers, H = (double)m->n_heads, K = (double)m->n_kv_heads;
    const double T = (double)m->n_tokens, D = (double)m->head_dim, G = H / K;
    int64_t chunk = 0; /* the largest prefill chunk swept */
    for (int k = 0; k < sim_n_chunks(o); k++)
        if (sim_cfg_chunk(o, k * o->n_budgets) > chunk) chunk = sim_cfg_chunk(o, k * o->n_budgets);
    const double B = (double)(chunk > o->decode_chunk ? chunk : o->decode_chunk), S = L * K;
    double per_cfg = 0;
    *n_model = 0;
    for (int a = 0; a < o->n_allocators; a++) {
        if (!plan_model_wide(&o->allocators[a])) continue;
        for (int p = 0; p < o->n_policies; p++)
            for (int b = 0; b < o->n_budgets; b++) {
                const double cap = fmin(T, S * (double)o->budgets[b] + B);
                /* per stream: positions, keys, values, scores and selection, queries, outputs,
                 * attention and its mean, errors and recalls, positions evaluated, log-det */
                const double stream = cap * (8 + 8 * D + 24 + (G + 1) * B * 4) + 8 * G * B * D +
                                      16 * G * T + 8 * T + 8 * D * D;
                per_cfg = fmax(per_cfg, S * stream + 16 * S * cap);
                *n_model += sim_n_chunks(o);
            }
    }
    if (!*n_model) return 0;
    const int threads = kv_threads(o->threads);
    const double at_once = fmin((double)threads, (double)*n_model);
    /* every layer's queries, keys, values and full-cache reference, plus the configurations running at once */
    return L * ((H + 2 * K) * T * D * 4 + H * T * (D * 4 + 8)) + at_once * per_cfg;
}

int sim_lockstep_check(const sim_opts *o, const trace_meta *m, kv_err *err)
{
    int n_model;
    const double need = sim_lockstep_bytes(o, m, &n_model), gib = 1024.0 * 1024.0 * 1024.0;
    const double limit = o->max_memory_gib > 0 ? o->max_memory_gib : SIM_MAX_MEMORY_GIB;
    if (need / gib <= limit) return KV_OK;
    return cli_usage(err, "sim", "the lock-step replay of %d model-wide configuration(s) (cake, global: all %lld "
                     "layers at once) needs about %.2f GiB > --max-memory %g GiB (%lld layers x %lld positions; "
                     "fewer --threads, smaller budgets or a larger --max-memory)", n_model, (long long)m->n_layers,
                     need / gib, limit, (long long)m->n_layers, (long long)m->n_tokens);
}

/* A trace captured with eviction inside the model (capture_mode = evict):
 * one line on stderr saying what that means for the replay, then sim runs.
 * A warning about what the numbers mean, so printed even under --quiet
 * (docs/sim.md). */
void sim_note_evict(const sim_opts *o, const trace_meta *m)
{
    if (strcmp(m->capture_mode, "evict") != 0) return;
    fprintf(stderr,
            "kvtrace sim: note: %s was captured with eviction inside the model (%s%s%s, budget %lld): its keys, "
            "values and queries after the first eviction were computed from that policy's cache, so every "
            "policy here is replayed (and `full` measured) on that run, not on an unevicted one\n",
            o->trace, m->evict_policy, m->evict_params[0] ? ":" : "", m->evict_params, (long long)m->evict_budget);
}

/* Before a large replay
 * (docs/reliability.md#context-length-and-the-cost-of-a-run): its cost in one
 * line on stderr (unless --quiet) when it will likely take over a minute or a
 * GiB. Floating-point operations: the full-cache reference, 4 D per (query
 * head, query, visible key), i.e. 2 L H D T^2; each configuration's metrics, 4
 * D per (query head, query, candidate) with at most N + B candidates (more for
 * `full`); policy scoring is left out (it is usually smaller; pairwise keydiff
 * adds O(N^2 D) per step). Memory: one layer's queries, keys and values plus
 * the per-query statistics; results.h5: the final caches. Minutes assume 50
 * GFLOP/s per thread, a modest CPU core. */
void sim_print_cost(const sim_opts *o, const trace_meta *m, bool recorded)
{
    const double L = (double)m->n_layers, H = (double)m->n_heads, K = (double)m->n_kv_heads;
    const double D = (double)m->head_dim, T = (double)m->n_tokens;
    double flops = recorded ? 0 : 2 * L * H * D * T * T, kept = 0; /* a recorded reference is read, not computed */
    const double runs = (double)o->n_policies * o->n_allocators;
    for (int k = 0; k < sim_n_chunks(o); k++)
        for (int b = 0; b < o->n_budgets; b++) {
            const double visible = fmin(T / 2, (double)(o->budgets[b] + sim_cfg_chunk(o, k * o->n_budgets)));
            flops += runs * 4 * L * H * D * T * visible;
            kept += runs * fmin(T, (double)o->budgets[b]);
        }
    const double n_cfg = runs * sim_n_chunks(o) * o->n_budgets;
    const double memory = 4 * (H + 2 * K) * T * D + 16 * n_cfg * L * H * T / fmax(1, (double)o->eval_stride);
    const double results = 4 * L * K * kept + 8 * n_cfg * L * K;
    const double gib = 1024.0 * 1024.0 * 1024.0, minutes = flops / 50e9 / 60 / fmax(1, o->threads);
    if (o->quiet || (minutes < 1 && memory < gib && results < gib)) return;
    fprintf(stderr, "kvtrace: sim: %.0f configurations over %lld positions: about %.3g TFLOP (~%.0f min at 50 "
            "GFLOP/s per thread), peak memory ~%.2f GiB, results.h5 ~%.2f GiB\n", n_cfg, (long long)m->n_tokens,
            flops / 1e12, minutes, memory / gib, results / gib);
}
