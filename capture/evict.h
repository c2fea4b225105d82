/* evict: eviction inside the model run (docs/fidelity.md), which writes a
 * capture_mode=evict trace (docs/trace.md#root-attributes).
 *
 * The same replay semantics as sim
 * (docs/sim.md#the-eviction-step-step-by-step), applied to the model's own
 * caches: after every chunk, per layer and kv head (one stream per layer for a
 * layer-scope policy, e.g. tova:scope=layer), the candidates are the cache rows
 * (the old kept set plus the chunk, ascending positions), the policy observes
 * the chunk's attention (mean over the stream's query heads, as sim forms it),
 * and when there are more than N it scores them and policy_select keeps exactly
 * N; the walk's kernel table compacts the cache to them. The policies are
 * policies/'s, called through the same policy_view as sim's, so the first
 * eviction of a run is the one sim makes on the full-cache trace.
 *
 * Memory: the caches hold at most N + B rows (forward_init_cache with
 * evict_cache_rows), the engine O(streams·B·(N+B)) floats plus, for policies
 * that read past queries (snapkv), the latest query_window() queries per
 * layer and head. Nothing grows with T.
 *
 * Allocators (docs/allocators.md, allocators/alloc.h; evict_init_alloc): a
 * static one gives each stream its own capacity (the stream evicts when its
 * candidates exceed it, through policy_step with that capacity as the view's
 * budget, as sim_replay does; duo's streaming heads run streaming:sinks=S
 * instead of the policy, as sim's do); a dynamic one with layer scope (adakv)
 * evicts a layer's K streams together through alloc_scope_step, as
 * sim_replay_scope does, once the walk has attended the layer; one with the
 * whole model as its scope (cake, global) defers every layer's eviction to the
 * chunk's end (after the walk attended the last layer: a layer's eviction only
 * affects later chunks, so the result is the one of evicting it right away) and
 * then evicts the L·K streams together, as sim_replay_scope does; its views
 * (host copies, attention) are then L× one layer's. Every cache is allocated at
 * the most rows any stream can hold plus B (evict_alloc_rows), at most T; the
 * rows in use (forward_state.rows) stay at most L·K·N + L·K·B (the whole-model
 * scope reaches it: every layer holds its chunk at once). */
#ifndef KV_CAPTURE_EVICT_H
#define KV_CAPTURE_EVICT_H

#include <stdbool.h>
#include <stdint.h>

#include "model/forward.h"
#include "allocators/alloc.h"
#include "policies/policy.h"
#include "policies/step.h"

/* policy_step's compaction target: the caches of one stream's kv heads. */
typedef struct {
    forward_state *s;
    int64_t l, g0, ng;
} evict_stream;

typedef struct {
    policy_config pc;
    alloc_config ac;         /* the allocator (uniform when none was given) */
    int64_t budget;          /* N */
    int64_t L, H, K, D, G, B, cap;
    int64_t streams;         /* per layer: K, or 1 for a layer-scope policy (policy_streams_of) */
    int64_t kv_per_stream;   /* 1, or K for a layer-scope policy */
    int64_t heads_per_stream;/* G, or H for a layer-scope policy */
    void **state;            /* [L][streams] policy states (NULL: stateless) */
    int64_t *caps;           /* [L][streams] each stream's capacity: the allocator's (static), N (dynamic) */
    bool joint;              /* a layer's streams evict together (a dynamic allocator, per kv head streams) */
    bool model;              /* every layer's streams evict together at the chunk's end (a model-wide allocator) */
    bool attention;          /* the policy reads the chunk's attention (the plan's inputs) */
    policy_config spc;       /* an allocator's streaming heads' policy (plan_layer_streams) */
    bool *own;               /* [L][streams] the stream runs spc (a streaming head); NULL: none does */
    int64_t width;           /* the most rows a (layer, kv head) keeps: the snapshot's width */
    int64_t n_bufs;          /* streams whose views live at once: L·streams (model), streams (joint), else 1 */
    int64_t n_attn;          /* streams whose attention lives at once: L·streams (model), else streams */
    float *attn;             /* [n_attn][B][cap] the chunk's attention, summed then averaged over a stream's heads */
    float *hk, *hv;          /* [n_bufs][cap][D] host copies of caches (when the backend's is not host memory) */
    policy_step_buf *step;   /* [n_bufs] scores and selection [cap] (one: shared by the streams in turn) */
    policy_step_buf **steps; /* [n_bufs] -> step[x] (alloc_scope_step's) */
    policy_view *views;      /* [n_bufs] */
    evict_stream *cc;        /* [n_bufs] compaction targets */
    void **ctx;              /* [n_bufs] -> cc[x] */
    alloc_buf ab;            /* joint: the allocator's scratch, streams·cap */
    int64_t *counts, *kept;  /* [n_bufs] */
    int64_t qwin, qrows;     /* query positions the policy or the allocator reads; rows per head of qbuf (qwin + B) */
    float *qbuf;             /* [L][H][qrows][D] the latest queries, oldest first */
    int64_t *q_end, *q_count;/* [L] the buffer holds positions q_end - q_count .. q_end - 1 */
    int64_t evictions;       /* policy_select calls that dropped something */
    int64_t until;           /* steps ending after this position do not evict (0: every step does; run.h) */
    rope_spec rope;          /* the model's RoPE, handed to the policy (set after evict_init; theta 0: none) */
    const model_layer *layers; /* the host model's layers (their W_o: policy_view.wo), set with rope; NULL: none */
    int64_t dim;             /* the model's width (W_o's rows) */
    forward_evictor hooks;   /* to put in forward_state.ev */
} evict_engine;

/* Rows each (layer, kv head) cache needs for a run of T positions in chunks
 * of up to B under `pc` at budget N: min(T, N + B), or T for `full`. */
int64_t evict_cache_rows(const policy_config *pc, int64_t budget, int64_t B, int64_t T);

/* The same under allocator ac (NULL: uniform) for model shape cfg:
 * min(T, M + B) with M the most rows one stream can keep (static: its
 * largest capacity; adakv: K·N − (K − 1), every other head keeping one;
 * cake, global: S·N − (S − 1) over the model's S streams); *width = M. The
 * allocator's KV_EUSAGE (N too small for its formula, no head ranking, a
 * policy whose scores global cannot compare) before any work. */
int evict_alloc_rows(const policy_config *pc, const alloc_config *ac, int64_t budget, const model_config *cfg,
                     int64_t B, int64_t T, int64_t *rows, int64_t *width, kv_err *err);

/* An engine for model shape cfg, chunks of up to B, caches of `cap` rows
 * (evict_alloc_rows'), under allocator ac (NULL: uniform). An offline-only
 * policy (oracle) or an allocator the walk cannot run is a KV_EUSAGE error. */
int evict_init_alloc(evict_engine *e, const policy_config *pc, const alloc_config *ac, int64_t budget,
                     const model_config *cfg, int64_t B, int64_t cap, kv_err *err);

/* evict_init_alloc under the uniform allocator. */
int evict_init(evict_engine *e, const policy_config *pc, int64_t budget, const model_config *cfg, int64_t B,
               int64_t cap, kv_err *err);

void evict_free(evict_engine *e);

/* Whether the step whose last position is end - 1 evicts: every step, or
 * with `until` set (run.h's evict_until) only those ending at or before it. */
bool evict_step_evicts(const evict_engine *e, int64_t end);

/* The caches' positions now, per layer and kv head, ascending, padded with
 * -1 to the width W (N under uniform): out [L][K][W] (the /evict/retained
 * snapshot). A cache holding more than W (the `full` policy) is truncated
 * to its first W. */
void evict_snapshot(const evict_engine *e, const forward_state *s, int32_t *out);

#endif
