/* evict: eviction inside the model run (issue #9, SPEC §3 capture_mode=evict).
 *
 * The same replay semantics as sim (SPEC §4), applied to the model's own
 * caches: after every chunk, per layer and kv head (one stream per layer for
 * a layer-scope policy, e.g. tova:scope=layer), the candidates are the cache
 * rows (the old kept set plus the chunk, ascending positions), the policy
 * observes the chunk's attention (mean over the stream's query heads, as sim
 * forms it), and when there are more than N it scores them and policy_select
 * keeps exactly N; the walk's kernel table compacts the cache to them. The
 * policies are policies/'s, called through the same policy_view as sim's, so
 * the first eviction of a run is the one sim makes on the full-cache trace.
 *
 * Memory: the caches hold at most N + B rows (forward_init_cache with
 * evict_cache_rows), the engine O(streams·B·(N+B)) floats plus, for policies
 * that read past queries (snapkv), the latest query_window() queries per
 * layer and head. Nothing grows with T. */
#ifndef KV_CAPTURE_EVICT_H
#define KV_CAPTURE_EVICT_H

#include <stdint.h>

#include "model/forward.h"
#include "policies/policy.h"
#include "policies/step.h"

typedef struct {
    policy_config pc;
    int64_t budget;          /* N */
    int64_t L, H, K, D, G, B, cap;
    int64_t streams;         /* per layer: K, or 1 for a layer-scope policy (policy_streams_of) */
    int64_t kv_per_stream;   /* 1, or K for a layer-scope policy */
    int64_t heads_per_stream;/* G, or H for a layer-scope policy */
    void **state;            /* [L][streams] policy states (NULL: stateless) */
    float *attn;             /* [streams][B][cap] the chunk's attention, summed then averaged over a stream's heads */
    float *hk, *hv;          /* [cap][D] host copies of one cache (when the backend's is not host memory) */
    policy_step_buf step;    /* scores and selection [cap], shared by the streams in turn */
    int64_t qwin, qrows;     /* query positions the policy reads; rows per head of qbuf (qwin + B) */
    float *qbuf;             /* [L][H][qrows][D] the latest queries, oldest first */
    int64_t *q_end, *q_count;/* [L] the buffer holds positions q_end - q_count .. q_end - 1 */
    int64_t evictions;       /* policy_select calls that dropped something */
    forward_evictor hooks;   /* to put in forward_state.ev */
    policy_rope rope;        /* the model's RoPE (cfg's; the caller sets freq_factors to kv_model.rope_div) */
} evict_engine;

/* Rows each (layer, kv head) cache needs for a run of T positions in chunks
 * of up to B under `pc` at budget N: min(T, N + B), or T for `full`. */
int64_t evict_cache_rows(const policy_config *pc, int64_t budget, int64_t B, int64_t T);

/* An engine for model shape cfg, chunks of up to B, caches of `cap` rows.
 * An offline-only policy (oracle) is a KV_EUSAGE error. */
int evict_init(evict_engine *e, const policy_config *pc, int64_t budget, const model_config *cfg, int64_t B,
               int64_t cap, kv_err *err);

void evict_free(evict_engine *e);

/* The caches' positions now, per layer and kv head, ascending, padded with
 * -1 to N: out [L][K][N] (the /evict/retained snapshot). A cache holding
 * more than N (the `full` policy) is truncated to its first N. */
void evict_snapshot(const evict_engine *e, const forward_state *s, int32_t *out);

#endif
