/* kvtrace/allocator.h: the budget-allocator interface, public and versioned
 * (the same ABI as kvtrace/policy.h: KVTRACE_POLICY_ABI, struct sizes).
 *
 * A policy scores candidates; an allocator decides how many of them each
 * stream (layer, kv head) keeps, given the total L·K·N that `--budgets N`
 * stands for. Every allocator kvtrace runs implements alloc_iface: the seven
 * built in (allocators/ in the source tree, which includes this header) and
 * those a plug-in adds (`--plugin FILE.so`, docs/plugins.md). Two kinds:
 * - static: `capacities` gives each stream of a layer a fixed capacity; the
 *   capacities are each >= 1 and sum to exactly L·K·N over the model;
 * - dynamic: the streams of a scope (a layer's K, or the model's L·K) share
 *   the scope's total, and `shares` splits it at every evicting step from the
 *   step's scores: each share in [1, n[x]], the shares summing to the total.
 * The host checks both for a plug-in's allocator and stops the run (one line
 * naming the plug-in, exit 3) when they do not hold.
 *
 * The ABI rules are policy.h's: fields are only ever appended to alloc_config,
 * alloc_scope, alloc_buf and alloc_iface, a new field's zero means "as
 * before", the host reads a plug-in's alloc_iface up to the size it was built
 * with (zeroing the rest) and a plug-in reads the prefix of the structs the
 * host gives it. A plug-in lists its allocators with KVTRACE_PLUGIN_LISTS
 * below (KVTRACE_PLUGIN, policy.h, lists policies only). */
#ifndef KVTRACE_ALLOCATOR_PUBLIC_H
#define KVTRACE_ALLOCATOR_PUBLIC_H

#include <stdbool.h>
#include <stdint.h>

#include "kvtrace/error.h"
#include "kvtrace/policy.h"

/* static; dynamic with a layer's K streams as the scope (adakv); dynamic with
 * the whole model's L·K streams as the scope (cake, global: the layers are
 * replayed in lock step, docs/sim.md) */
typedef enum { ALLOC_STATIC, ALLOC_DYNAMIC_LAYER, ALLOC_DYNAMIC_MODEL } alloc_kind;

/* Where an allocator's per-head importance comes from: none; a
 * `--head-scores FILE` only (headkv); that file or, without it, the trace's
 * full-cache column sums (duo). */
typedef enum { ALLOC_SCORES_NONE, ALLOC_SCORES_FILE, ALLOC_SCORES_FILE_OR_TRACE } alloc_scores_from;

/* The most streams a dynamic scope may have (L·K for a model-wide one). */
enum { ALLOC_MAX_STREAMS = 1024 };

typedef struct alloc_iface alloc_iface;

/* A parsed "name:key=value:..." with every parameter filled (defaults too). */
typedef struct alloc_config {
    const alloc_iface *iface;
    int n;
    double num[POLICY_MAX_PARAMS];    /* PARAM_NUMBER values, in the order of params[] */
    int choice[POLICY_MAX_PARAMS];    /* PARAM_CHOICE: index into the choices */
    char canonical[256];
    /* [L][K] per-(layer, kv head) importance, higher = more important (headkv,
     * duo: scores_from), set by the engine before the first capacities; NULL for the others */
    const double *head_scores;
} alloc_config;

/* One evicting step of a dynamic scope: the candidates of its S streams. */
typedef struct {
    int64_t n_streams;             /* S */
    const int64_t *n;              /* [S] candidates per stream */
    const double *const *scores;   /* [S] -> [n[x]] the policy's scores (higher keeps, +INFINITY protected) */
    const int64_t *const *pos;     /* [S] -> [n[x]] their positions, ascending */
    int64_t budget;                /* N, the average per stream */
    int64_t total;                 /* the scope's total S·N, < Σ n[x] */
    bool comparable;               /* the policy's scores compare across streams (policy_iface) */
    /* [S] each stream's view of the step (its keys, positions, the trace's
     * queries: cake's window attention), and the streams per layer */
    const policy_view *views;
    int64_t per_layer;
} alloc_scope;

/* Scratch the host gives a dynamic allocator, for scopes of up to `cap` candidates in all. */
typedef struct {
    int64_t *order;    /* [cap] e.g. each stream's candidates in its own rank order, one stream after another */
    int64_t *scratch;  /* [cap] */
    int64_t cap;
    double *weight;    /* [ALLOC_MAX_STREAMS] e.g. per-stream weights */
    double *work;      /* [3·cap] */
    float *row;        /* [cap] */
} alloc_buf;

struct alloc_iface {
    const char *name;
    const char *summary;
    policy_param params[POLICY_MAX_PARAMS];   /* sorted by key; the first without a key ends them */
    alloc_kind kind;
    alloc_scores_from scores_from;
    bool per_head;          /* static capacities differ between the kv heads of a layer (headkv, duo);
                               false: the host checks that a layer's K capacities are equal */
    bool needs_queries;     /* dynamic: shares read the trace's queries in the views (cake's window) */
    bool needs_comparable;  /* only for policies whose scores compare across layers and heads (global) */
    /* optional: whether stream (layer, g) is a streaming head (it then keeps
     * the `sinks` first positions and the most recent, whatever the policy: duo) */
    bool (*streaming)(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t g);
    /* static: the capacity of every stream of layer `layer` (K of them) for
     * average N over L layers; KV_EUSAGE with one line when N is too small
     * for the allocator's formula */
    int (*capacities)(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                      kv_err *err);
    /* dynamic: how many each stream of the scope keeps (counts[S], each in
     * [1, n[x]], summing to s->total); each stream then keeps its own top
     * counts[x] by the selection rule (highest scores, ties to the later
     * position). KV_OK, or an error in err (out of memory): the run stops */
    int (*shares)(const alloc_config *ac, const alloc_scope *s, alloc_buf *b, int64_t *counts, kv_err *err);
    /* with needs_queries: how many of the latest query positions the shares read (cake's window);
     * an in-model engine keeps that many. NULL: none */
    int64_t (*query_window)(const alloc_config *ac);
    /* with scores_from ALLOC_SCORES_FILE_OR_TRACE: the heads' scores out[L*K] from the full cache's
     * column sums colsum[L][H][T] (/attention/colsum: duo's share of attention away from its sinks
     * and recent window). NULL: only a file gives them */
    void (*rank_from_colsum)(const alloc_config *ac, const float *colsum, int64_t L, int64_t H, int64_t K, int64_t T,
                             double *out);
};

/* Both plug-in symbols for NULL-terminated lists of policies and allocators
 * (either may be NULL), at file scope, once per plug-in:
 *   static const policy_iface *const my_policies[] = {&mypolicy, NULL};
 *   static const alloc_iface *const my_allocators[] = {&myalloc, NULL};
 *   KVTRACE_PLUGIN_LISTS(my_policies, my_allocators) */
#define KVTRACE_PLUGIN_LISTS(POLICIES, ALLOCATORS)                                                      \
    const uint32_t kvtrace_plugin_abi = KVTRACE_POLICY_ABI;                                             \
    const kvtrace_plugin *kvtrace_plugin_tables(const kvtrace_host *host)                               \
    {                                                                                                   \
        static const kvtrace_plugin tables = {                                                          \
            KVTRACE_POLICY_ABI, sizeof(policy_config), sizeof(policy_view), sizeof(policy_iface),       \
            POLICIES, sizeof(alloc_config), sizeof(alloc_scope), sizeof(alloc_buf), sizeof(alloc_iface), \
            ALLOCATORS};                                                                                \
        (void)host;                                                                                     \
        return &tables;                                                                                 \
    }

#endif
