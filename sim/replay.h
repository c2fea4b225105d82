/* replay: one (policy, budget) configuration over one (layer, kv head)
 * stream of a trace (docs/sim.md#the-eviction-step-step-by-step), with its
 * metrics (docs/sim.md#metrics). */
#ifndef KV_SIM_REPLAY_H
#define KV_SIM_REPLAY_H

#include <stdint.h>

#include "core/kv_error.h"
#include "allocators/alloc.h"
#include "trace/trace.h"
#include "policies/policy.h"
#include "sim/reference.h"

enum { PHASE_PREFILL, PHASE_DECODE, PHASE_ALL, N_PHASES };

/* One layer of a trace, loaded once and shared read-only by every task. */
typedef struct {
    int64_t T, D, H, K, prompt_len;
    const float *q;            /* [H][T][D] */
    const float *k, *v;        /* [K][T][D] */
    const float *kvzip;        /* [H][T] /attention/kvzip, when a policy needs it; else NULL */
    const sim_reference *ref;
    int64_t chunk, decode_chunk, eval_stride;
    rope_spec rope;            /* the trace's RoPE attributes (policy_view.rope) */
    const float *wo;           /* [wo_dim][H*D] the layer's /wo (policy_view.wo), NULL: not read */
    int64_t wo_dim;
    const trace_span *spans;   /* [n_spans] the trace's /spans (sim/spans.c); NULL: none */
    int64_t n_spans;
    const double *span_full;   /* [n_spans][H][T]: the full-cache attention weight query i puts on the span, Σ_{j in
                                  span} a_ij (i >= end; 0 before) */
} sim_layer;

typedef struct {
    int64_t n;                 /* evaluated queries */
    double err_mean, err_p95, recall_mean, recall_min;
} sim_stats;

typedef struct {
    sim_stats *stats;          /* [ng*G][N_PHASES] for the stream's query heads */
    int64_t *retained;         /* [ng][T] each kv head's final cache positions, ascending */
    int64_t *n_retained;       /* [ng] how many (the head_budget column) */
    double *kept_mean;         /* [ng] rows kept after each evicting step, averaged (NaN: none evicted) */
    uint64_t *kept_hash;       /* [ng] a hash of the positions kept after every step, in order (sim's same_as:
                                  two configurations with equal hashes kept the same sets throughout) */
    int32_t *step_cand, *step_kept; /* NULL, or [ng][n_steps]: candidates and rows kept at each step */
    int64_t n_steps;
    double *logdet;            /* [ng] final_logdet of each kv head's retained keys */
    double *span_ret;          /* NULL, or [ng][n_spans]: span retention_mean (docs/sim.md, "Spans"); NaN: no query after */
    double *span_recall;       /* NULL, or [ng][n_spans]: span attn_recall; NaN: no weight under the full cache */
    int64_t calls, candidates; /* policy scoring */
    double score_ns;
    double metrics_ns;         /* step 2: measuring the chunk's queries */
    double replay_ns;          /* the whole replay, metrics and scoring included */
} sim_result;

/* Replays capacity `cap` under `pc` over the stream of kv heads g0 ..
 * g0+ng-1 of layer `layer`, which share one kept set (ng = 1 per kv head;
 * ng = K for a policy with layer scope); `budget` is the run's N (the
 * queries measured are those from min(N, cap) on: earlier ones cannot be
 * affected). `out->stats` must hold ng*G*N_PHASES entries, `out->retained`
 * ng*T positions, the per-head arrays ng. */
int sim_replay(const sim_layer *ly, const policy_config *pc, int64_t budget, int64_t cap, int64_t layer, int64_t g0,
               int64_t ng, sim_result *out, kv_err *err);

/* sim_replay of n budgets (budgets[i], capacities[i] into outs[i]) of one stream under one
 * configuration, in lock step: every budget's step s, in order, before any step s + 1, with the
 * policy's share (policy_iface.share_create) when it has one. Each outs[i] is what sim_replay
 * gives it alone, bit for bit. */
int sim_replay_group(const sim_layer *ly, const policy_config *pc, int n, const int64_t *budgets,
                     const int64_t *capacities, int64_t layer, int64_t g0, int64_t ng, sim_result *outs, kv_err *err);

/* The number of eviction steps (chunks) of a replay over ly. */
int64_t sim_replay_steps(const sim_layer *ly);

/* Replays `budget` under `pc` and the dynamic allocator `ac` over the
 * streams of a scope at once: all K kv heads of each of the n_layers layers
 * lys[0 .. n_layers) (layer0 onwards), each kv head its own stream (or, for
 * a policy with layer scope, each layer one stream of K kv heads), sharing
 * the scope's S·N (S streams; alloc_scope_step) in lock step. n_layers
 * = 1 for a layer-wide allocator (adakv), L for a model-wide one (cake,
 * global: every layer loaded at once). `out` as for sim_replay with ng =
 * n_layers·K kv heads (its arrays are contiguous over the scope's layers). */
int sim_replay_scope(const sim_layer *lys, int64_t n_layers, const policy_config *pc, const alloc_config *ac,
                     int64_t budget, int64_t layer0, sim_result *out, kv_err *err);

#endif
