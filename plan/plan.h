/* plan: how a configuration (policy, allocator, budget, prefill chunk) runs, decided in one place
 * from what its policy and allocator declare (docs/sim.md#the-run-plan).
 *
 * The engines (sim's replay, capture --evict's in-model run, fidelity, features, fit) ask the plan
 * and never a policy's or an allocator's declarations themselves: which inputs a run reads (and so
 * what sim loads from a trace or an in-model run keeps), how its streams are laid out (one per kv
 * head, one per layer for a layer-scope policy, joint under a dynamic allocator, an allocator's
 * streaming heads), how many rows a stream's cache holds, and every refusal, each reason with one
 * message whatever the verb. */
#ifndef KV_PLAN_H
#define KV_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "allocators/alloc.h"
#include "core/kv_error.h"
#include "policies/policy.h"

/* ---- what the configurations of a run read ---- */
typedef struct {
    bool attention;        /* the chunk's attention over the candidates */
    bool kvzip;            /* the KVzip pass's rows (/attention/kvzip; capture --kvzip) */
    bool wo;               /* the layers' W_o (/wo; capture --record wo) */
    bool future;           /* what a model run never has (offline only: sim) */
    int64_t query_window;  /* the latest query positions read (the most over the run) */
    bool head_scores;      /* an allocator ranks the heads (--head-scores, or the trace's colsum) */
} plan_inputs;

/* What one policy configuration reads (its declarations: docs/policies.md#what-a-policy-declares). */
plan_inputs plan_policy_inputs(const policy_config *pc);
/* The union over a run's policies and allocators (either list may be empty). */
plan_inputs plan_run_inputs(const policy_config *pcs, int n_pc, const alloc_config *acs, int n_ac);

/* Whether an allocator reads head scores, and whether it can rank the heads from a trace's column
 * sums when no --head-scores file is given (plan_rank_heads: out[L*K] from colsum[L][H][T]). */
bool plan_reads_head_scores(const alloc_config *ac);
bool plan_ranks_from_trace(const alloc_config *ac);
void plan_rank_heads(const alloc_config *ac, const float *colsum, int64_t L, int64_t H, int64_t K, int64_t T,
                     double *out);

/* Whether the configuration keeps one set for all kv heads of a layer (tova:scope=layer). */
bool plan_layer_scope(const policy_config *pc);
/* Whether the policy ever evicts (full never does: its cache holds every position). */
bool plan_evicts(const policy_config *pc);

/* ---- how its streams are laid out ---- */
typedef enum {
    PLAN_STREAMS,      /* each stream on its own with its capacity (static allocators) */
    PLAN_JOINT_LAYER,  /* the layer's streams together (a layer-wide dynamic allocator, adakv) */
    PLAN_JOINT_MODEL,  /* every stream of the model in lock step (cake, global) */
} plan_scope;
plan_scope plan_scope_of(const policy_config *pc, const alloc_config *ac, int64_t H, int64_t K);
/* Whether the allocator's scope is the whole model (PLAN_JOINT_MODEL whatever the policy). */
bool plan_model_wide(const alloc_config *ac);

/* One stream of layer l: kv heads g0 .. g0+ng-1, its capacity, and the policy it runs instead of
 * the configuration's (an allocator's streaming head: own_policy set). */
typedef struct {
    int64_t g0, ng, cap;
    bool own_policy;
    policy_config own;
} plan_stream;
/* The streams of layer l (PLAN_STREAMS: *n of them, at most K, into out[]). */
int plan_layer_streams(const policy_config *pc, const alloc_config *ac, int64_t N, int64_t L, int64_t H, int64_t K,
                       int64_t l, plan_stream *out, int64_t *n, kv_err *err);

/* The rows a stream's cache holds: what it keeps plus a chunk of B, at most T (every position for a
 * policy that never evicts). */
int64_t plan_cache_rows(const policy_config *pc, int64_t keep, int64_t B, int64_t T);
/* The most positions one stream can hold after a step: N, a static allocator's largest capacity,
 * or a dynamic scope's total less one for each other stream (*most). */
int plan_stream_most(const policy_config *pc, const alloc_config *ac, int64_t N, int64_t L, int64_t H, int64_t K,
                     int64_t *most, kv_err *err);
/* The width of a (layer, kv head)'s row of kept positions in sim's results: T for a policy that
 * never evicts, else the scope's total (dynamic) or the largest capacity (static), at most T;
 * -1 with err set on an allocator's failure. caps: K scratch values. */
int64_t plan_results_width(const policy_config *pc, const alloc_config *ac, int64_t N, int64_t L, int64_t K,
                           int64_t T, int64_t *caps, kv_err *err);

/* ---- refusals, one message per reason (KV_EUSAGE, naming the verb) ---- */
/* A policy whose query window is negative (a plug-in's bug; an in-model run keeps that many
 * queries). A window beyond the run's positions is not refused: an engine keeps at most T. */
int plan_check_query_window(const policy_config *pc, kv_err *err);
/* A policy that reads the future, inside a model (`where`: "--evict", "--policies", "policy"). */
int plan_check_online(const policy_config *pc, const char *verb, const char *where, kv_err *err);
/* An allocator that ranks across heads with a policy whose scores do not compare (verb NULL: the
 * message without a verb's prefix, for an engine that several verbs run). */
int plan_check_pair(const policy_config *pc, const alloc_config *ac, const char *verb, kv_err *err);
/* --head-scores against the allocators: given, some allocator must read it; not given, every one
 * that needs it must find its ranking in the source (a trace's colsum: has_ranking). `opt` is the
 * verb's option naming the allocators ("--allocators", "--allocator"). */
int plan_check_head_scores(const alloc_config *acs, int n_ac, bool given, bool has_ranking, const char *verb,
                           const char *opt, kv_err *err);
/* What a trace lacks for the run's policies (KV_EINPUT naming the file and the first policy that
 * reads it): the KVzip rows. */
int plan_check_trace(const policy_config *pcs, int n_pc, bool has_kvzip, const char *path, kv_err *err);
/* A configuration that reads W_o on a source without it runs as its policy declares it should then
 * (criticalkv: wo=absent), relabelled so that results say so (*changed: it was). */
int plan_without_wo(policy_config *pc, bool *changed, kv_err *err);

/* The allocator a run has when none is given. */
int plan_default_allocator(alloc_config *out, kv_err *err);

#endif
