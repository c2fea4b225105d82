/* alloc: budget allocators. A policy scores candidates; an
 * allocator decides how many of them each stream (layer, kv head) keeps,
 * given the total L·K·N that `--budgets N` stands for (N is the average per
 * stream). docs/allocators.md has the formulas, papers and choices.
 *
 * Two kinds:
 * - static (uniform, pyramid, headkv, duo): a fixed capacity per stream, the capacities
 *   summing to L·K·N; a stream evicts when its candidates exceed its
 *   capacity, exactly as with a uniform N of its own, so the streams stay
 *   independent (and uniform costs nothing: every capacity is N). Once every
 *   stream is full the total is exactly L·K·N.
 * - dynamic (adakv): the streams of a scope (a layer: its K kv heads) share
 *   the scope's total K·N and the shares are recomputed at every step from
 *   that step's scores. The scope evicts when its candidates exceed its
 *   total; each stream then keeps its share, at least 1 and at most its
 *   candidates, and the shares add up to exactly the total
 *   (alloc_scope_step).
 *
 * Allocators see plain arrays, like policies; both engines (sim's replay,
 * capture/evict.c's in-model run) call the same functions. Parameters are parsed as
 * a policy's are (name[:key=value...], canonical "key=value:..." sorted by
 * key, policy_params_parse). */
#ifndef KV_POLICY_ALLOC_H
#define KV_POLICY_ALLOC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
/* the interface itself (alloc_kind, alloc_config, alloc_scope, alloc_buf, alloc_iface) is the
 * public, versioned header plug-ins build against: the built-ins use the same one (docs/plugins.md) */
#include "kvtrace/allocator.h"
#include "policies/policy.h"
#include "policies/step.h"

/* The registry (alloc_registry.c), NULL-terminated, in listing order. */
const alloc_iface *const *alloc_all(void);

/* The same with allocators beside the registry (a plug-in's, alloc_plugin.h: a NULL-terminated
 * table the caller owns; NULL: none), found by name after the registry's. */
int alloc_parse_in(const alloc_iface *const *user, const char *spec, alloc_config *out, kv_err *err);
/* A comma-separated list of them (as policy_parse_list): one configuration twice is refused. */
int alloc_parse_list_in(const alloc_iface *const *user, const char *verb, const char *list, alloc_config *out,
                        int max, int *n, kv_err *err);
double alloc_num(const alloc_config *ac, const char *key);
/* The allocator every verb uses when none is given (uniform: N for every head). */
int alloc_default(alloc_config *out, kv_err *err);
/* The policy an allocator's streaming heads run (ac->iface->streaming: duo's), whatever the run's:
 * StreamingLLM keeping the allocator's own sinks= first positions. */
int alloc_streaming_policy(const alloc_config *ac, policy_config *out, kv_err *err);
/* What `kvtrace policies` prints of an allocator (alloc_describe.c). */
void alloc_describe(FILE *f, const alloc_iface *ai);
/* "uniform", or "pyramid:beta=20:window=32" (the label of results' allocator column). */
void alloc_label(const alloc_config *ac, char *buf, size_t cap);
/* Whether the configuration is the uniform allocator (today's behaviour). */
bool alloc_is_uniform(const alloc_config *ac);

/* Checks that N suits the allocator for a model of L layers and K kv heads
 * (KV_EUSAGE, one line), before any work. */
int alloc_check(const alloc_config *ac, int64_t N, int64_t L, int64_t K, kv_err *err);
/* Static: the capacities of layer `layer`'s K streams (alloc_check first).
 * Dynamic: N for each (the average; the shares vary by step). */
int alloc_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                     kv_err *err);

/* Reads a head-importance CSV (alloc_scores.c): header `layer,kv_head,score`
 * (further columns ignored), one row per (layer, kv head) of an L x K model,
 * each exactly once, scores finite and >= 0, not all 0; into scores[L*K].
 * Anything else is KV_EINPUT naming the file and row. */
int alloc_head_scores_read(const char *path, int64_t L, int64_t K, double *scores, kv_err *err);

/* The capacity of each of layer `layer`'s K/ng streams when a stream holds
 * ng kv heads with one kept set (a layer-scope policy: ng = K): ng = 1, or
 * heads that are alike (uniform, pyramid), give the heads' own; per-head
 * allocators (headkv, duo) give each stream the mean of its heads'
 * capacities, rounded by largest remainder over the model's streams (ties
 * to the lower stream) so that the total stays exactly L·K·N. */
int alloc_stream_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t ng, int64_t layer,
                            int64_t *cap, kv_err *err);

int alloc_buf_init(alloc_buf *b, int64_t cap, kv_err *err);
void alloc_buf_free(alloc_buf *b);

/* Steps 3 and 4 for a dynamic scope of S streams (alloc_scope_step): each
 * stream observes its chunk; when Σ n > total, each is scored, the allocator
 * gives the shares, and each stream keeps its top share through its own
 * compaction callback. kept[x] (may be NULL): what each stream holds after.
 * A policy error stops the step before anything is compacted. */
typedef struct {
    const policy_config *pc;
    const alloc_config *ac;
    int64_t n_streams;
    void *const *states;           /* [S] the policy's per-stream state */
    const policy_view *views;      /* [S] (views[x].budget is ignored) */
    policy_step_buf *const *bufs;  /* [S] */
    policy_compact_fn compact;
    void *const *ctx;              /* [S] */
    int64_t budget, total;         /* N and the scope's total */
    alloc_buf *ab;
    int64_t *counts;               /* [S] scratch */
    int64_t per_layer;             /* streams per layer (K, or 1 for a layer-scope policy) */
} alloc_scope_args;

int alloc_scope_step(const alloc_scope_args *a, int64_t *kept, bool *evicted, kv_err *err);

#endif
