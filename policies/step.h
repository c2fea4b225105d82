/* step: the eviction step on one stream
 * (docs/sim.md#the-eviction-step-step-by-step), written once for both engines:
 * sim's replay (sim/replay.c) and eviction inside the model run
 * (capture/evict.c).
 *
 * The engine owns the cache. After each chunk it hands the step the stream's
 * candidates C = kept set ∪ chunk (ascending positions) as a policy_view, the
 * attention already averaged over the stream's query heads when the policy
 * needs it; the step then
 *   3. lets the policy observe the chunk (every chunk, evicting or not);
 *   4. when |C| > N (and the policy evicts at all), asks it for scores,
 *      keeps exactly N by policy_select, and has the engine compact its cache
 *      to them through its callback (sim moves its host rows, the model run
 *      calls forward_cache_keep for each kv head of the stream).
 * Plain arrays and callbacks: the step knows neither files nor its callers.
 *
 * A stream is the set of kv heads that share one kept set: each kv head on
 * its own, or all of a layer's for a policy with layer scope
 * (tova:scope=layer); policy_streams says which. The attention a policy sees
 * is the mean of the chunk's weights over the stream's query heads, formed
 * here for both engines so that they hand the policy the same floats. */
#ifndef KV_POLICY_STEP_H
#define KV_POLICY_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "policies/policy.h"

/* The streams of a layer of H query heads and K kv heads under pc. */
typedef struct {
    int64_t per_layer;   /* streams per layer: K, or 1 with layer scope */
    int64_t kv_heads;    /* kv heads in one stream: 1, or K; stream x starts at kv head x * kv_heads */
    int64_t q_heads;     /* query heads whose attention one stream averages: H / K, or H */
} policy_streams;

policy_streams policy_streams_of(const policy_config *pc, int64_t H, int64_t K);

/* The attention mean over a stream's query heads, m = n_queries·|C| floats
 * per head: the first head's weights copied (first), each later one added,
 * in head order, then divided by the number of heads. policy_attn_mean does
 * all of it for nb head blocks stored one after the other ([nb][m]). */
void policy_attn_add(float *acc, const float *head, int64_t m, bool first);
void policy_attn_divide(float *acc, int64_t m, int64_t heads);
void policy_attn_mean(float *mean, const float *blocks, int64_t nb, int64_t m);

/* The engine's scratch for the steps of a stream (any number of streams in
 * turn), and what the steps' scoring cost, summed. */
typedef struct {
    double *scores;        /* [cap] one per candidate */
    int64_t *keep;         /* [cap] the kept candidates' indices, ascending */
    int64_t *scratch;      /* [cap] policy_select's */
    int64_t calls;         /* score() calls (steps that evicted) */
    int64_t candidates;    /* candidates scored, over all calls */
    double score_ns;       /* wall time inside score(), monotonic clock */
} policy_step_buf;

/* Scratch for up to cap candidates, counters at zero. */
int policy_step_buf_init(policy_step_buf *b, int64_t cap, kv_err *err);
void policy_step_buf_free(policy_step_buf *b);

/* The engine's compaction: keep candidates keep[0..kept) of the view (indices,
 * ascending, keep[i] >= i), in that order, and drop the rest. */
typedef void (*policy_compact_fn)(void *ctx, const int64_t *keep, int64_t kept);

/* Steps 3 and 4 on the candidates of v (v->budget = N; at most b's cap of
 * them) for the stream whose policy state is `state`. *kept (kept may be
 * NULL): the candidates left, v->n when nothing was evicted. KV_OK, or the
 * policy's error (out of memory) with nothing compacted. */
int policy_step(const policy_config *pc, void *state, const policy_view *v, policy_step_buf *b,
                policy_compact_fn compact, void *ctx, int64_t *kept, kv_err *err);

#endif
