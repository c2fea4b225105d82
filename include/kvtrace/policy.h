/* kvtrace/policy.h: the eviction-policy interface, public and versioned.
 *
 * Every policy kvtrace runs implements policy_iface: the twenty built in
 * (policies/ in the source tree, which includes this header) and those a
 * plug-in adds (`--plugin FILE.so` in sim, capture --evict and fidelity;
 * docs/plugins.md). At each eviction step the engine hands the policy the
 * candidates C = cache ∪ chunk as plain arrays (policy_view) and asks for one
 * score per candidate: higher keeps, +INFINITY protects; the engine keeps
 * exactly N (the highest scores, ties towards the later position) and owns
 * the cache. Scores must never be NaN (a plug-in's NaN stops the run).
 *
 * The ABI. A plug-in exports two symbols (KVTRACE_PLUGIN below writes both):
 *   const uint32_t kvtrace_plugin_abi;           = KVTRACE_POLICY_ABI it was built with
 *   const kvtrace_plugin *kvtrace_plugin_tables(const kvtrace_host *host);
 * The host loads it only when the ABI numbers are equal and the struct sizes
 * the plug-in was built with are no larger than its own. Fields are only ever
 * appended to policy_config, policy_view and policy_iface, and a new field's
 * zero means "as before": the host reads a plug-in's policy_iface up to the
 * size it was built with and zeroes the rest, and a plug-in reads the prefix
 * of the view and configuration it knows. Any other change (a field moved, an
 * array resized) bumps KVTRACE_POLICY_ABI.
 *
 * A plug-in may also add budget allocators (kvtrace/allocator.h, the same
 * ABI and rules; KVTRACE_PLUGIN_LISTS there lists both kinds).
 *
 * Nothing here needs a symbol from the kvtrace binary: a plug-in is plain C
 * against this header (and kvtrace/error.h, kvtrace/rope.h,
 * kvtrace/allocator.h), linked with nothing of ours. */
#ifndef KVTRACE_POLICY_PUBLIC_H
#define KVTRACE_POLICY_PUBLIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtrace/error.h"
#include "kvtrace/rope.h"

#define KVTRACE_POLICY_ABI 1u

enum { POLICY_MAX_PARAMS = 8 };

typedef enum { PARAM_NUMBER, PARAM_CHOICE } policy_param_kind;

typedef struct {
    const char *key;
    policy_param_kind kind;
    const char *def;       /* default, as text */
    const char *choices;   /* PARAM_CHOICE: "norm|raw|pairwise" */
    double min, max;       /* PARAM_NUMBER: allowed range (inclusive) */
    const char *doc;
    bool integer;          /* PARAM_NUMBER: whole numbers only (sinks, seed) */
    bool policy_valued;    /* PARAM_CHOICE of policy names (a wrapper's base): also takes an alias of one
                              (policy_aliases), its full configuration then in policy_config.base */
} policy_param;

/* A named set of parameter values (snapkv:preset=paper): `preset=NAME` in a
 * spec stands for its "key=value:..." items, each unless the spec gives that
 * key itself; the canonical name shows the values, never the preset. */
enum { POLICY_MAX_PRESETS = 4 };
typedef struct {
    const char *name;
    const char *params;    /* "key=value:key=value" */
    const char *doc;       /* where the values come from */
} policy_preset;

/* A parsed "name:key=value:..." with every parameter filled (defaults too). */
typedef struct policy_config {
    const struct policy_iface *iface;
    int n;                                 /* = policy_n_params(iface) */
    double num[POLICY_MAX_PARAMS];         /* PARAM_NUMBER values */
    int choice[POLICY_MAX_PARAMS];         /* PARAM_CHOICE: index into the choices */
    char canonical[256];                   /* "key=value:key=value", sorted by key, defaults filled */
    /* a policy_valued parameter given an alias: that alias's configuration (owned by the alias
     * table, which outlives the configuration); NULL: the named policy with its defaults */
    const struct policy_config *base;
    char alias[64];                        /* the alias this configuration was given as; "" none */
} policy_config;

/* One eviction step, as plain arrays. Positions are ascending. */
typedef struct {
    int64_t n;               /* |C| candidates */
    int64_t D;               /* head dim */
    const int64_t *pos;      /* [n] positions */
    const float *keys;       /* [n][D] */
    const float *values;     /* [n][D] */
    int64_t budget;          /* N */
    int64_t now;             /* last position processed (end of the chunk) */
    int64_t layer, kv_head, step;
    /* with needs_attention: the softmax weights of the chunk's queries (the
     * last n_queries candidates) over the candidates they can see, zero for
     * the rest, averaged over the query heads of the kv group; else NULL */
    const float *attn;       /* [n_queries][n] */
    int64_t n_queries;
    /* the trace's queries of the stream's query heads (snapkv's observation
     * window) and the full-cache log-sum-exp of their rows (oracle's future
     * attention a_ij = exp(q_i.k_j/sqrt(D) - lse_i)); the keys of query head j
     * are `keys` (j < q_heads: one kv head's group, or the layer's first group).
     * Row t of a head holds position q0 + t: sim has every position (q0 = 0);
     * in-model eviction keeps only the latest query_window() positions up to
     * now (q0 > 0 later in a run; T is then the row stride of a head) */
    const float *queries;    /* [q_heads][T][D] */
    const double *lse;       /* [q_heads][T]; NULL in-model (no full-cache run to take it from) */
    int64_t q_heads, T, q0;
    /* the RoPE the queries and keys carry (expected_attention undoes it on
     * the queries; theta 0: unknown) and the prompt's length (qfilter
     * calib=prompt; sim only, 0 in-model) */
    rope_spec rope;
    int64_t prompt_len;
    /* with needs_kvzip: the trace's /attention/kvzip rows of the stream's
     * query heads, [q_heads][T] by position (the largest attention each
     * context key got from the KVzip reconstruction pass); else NULL */
    const float *kvzip;
    /* the layer's output projection W_o [wo_dim][wo_ld] as the model stores it (out = W_o · the
     * heads' outputs one after the other; query head h reads columns h·D .. h·D+D−1), the
     * stream's first query head q_head0 (its q_heads follow); wo NULL: unknown (a trace without
     * /wo: criticalkv) */
    const float *wo;
    int64_t wo_dim, wo_ld, q_head0;
    /* with share_create: the state this stream's replays at the run's other budgets share with
     * this one (sim replays them in lock step); NULL when replayed alone and in-model */
    void *share;
} policy_view;

typedef struct policy_iface {
    const char *name;
    const char *summary;     /* one line; says "reconstruction" for primekv */
    policy_param params[POLICY_MAX_PARAMS];   /* sorted by key; the first without a key ends them */
    policy_preset presets[POLICY_MAX_PRESETS]; /* optional; the first without a name ends them */
    bool never_evicts;       /* full */
    bool needs_attention;    /* v->attn: the chunk's attention (docs/sim.md#attention-for-the-policies) */
    /* optional: per-stream state; NULL create means stateless */
    int (*create)(const policy_config *cfg, void **state, kv_err *err);
    void (*destroy)(void *state);
    /* scores[n] for the candidates of v; higher keeps, +INFINITY protected.
     * KV_OK, or an error in err (out of memory): the engine stops the run */
    int (*score)(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err);
    /* optional, step 3 of docs/sim.md#the-eviction-step-step-by-step: called for every chunk
     * (evicting or not) after the chunk's queries attended; with needs_attention, v->attn holds
     * their weights over the candidates (mean over the kv group). Errors as score's */
    int (*observe)(const policy_config *cfg, void *state, const policy_view *v, kv_err *err);
    /* optional: true when this configuration keeps one set for all kv heads of
     * a layer (tova:scope=layer); the engine then replays the layer's kv heads
     * as one stream and v->attn averages over all the layer's query heads */
    bool (*layer_scope)(const policy_config *cfg);
    /* optional: how many of the latest query positions (up to now) score()
     * reads from v->queries; an in-model engine keeps only these. NULL: none */
    int64_t (*query_window)(const policy_config *cfg);
    /* reads the future (oracle): sim only, refused by in-model eviction */
    bool offline_only;
    /* optional: the same for one configuration (qfilter:calib=prompt reads
     * the whole prompt's queries); callers ask policy_offline_only */
    bool (*offline_for)(const policy_config *cfg);
    /* reads v->kvzip (kvzip): sim refuses it on a trace without /attention/kvzip */
    bool needs_kvzip;
    /* its scores mean the same on every kv head (attention mass, a position, a
     * uniform draw), so a dynamic allocator (adakv) may rank the candidates of
     * different heads against each other directly; otherwise it ranks each
     * head's by their z-score within the head, and global refuses it (docs/allocators.md) */
    bool scores_comparable;
    /* reads v->wo, the layer's output projection (criticalkv): for every configuration, or only
     * those needs_wo_for says (NULL: every one); without_wo is the "key=value" that runs it
     * without W_o (a trace without /wo: sim relabels the configuration so), NULL: none */
    bool needs_wo;
    bool (*needs_wo_for)(const policy_config *cfg);
    const char *without_wo;
    /* optional: state shared by the replays of one stream under one configuration at several
     * budgets. With share_create set, sim may replay a stream's budgets of the configuration in
     * lock step (every budget's step s before any step s + 1, in budget order; not when that would
     * leave threads idle) and then hands each the same share in v->share; the policy may keep there
     * what the budgets' replays would each compute alike, and must give every replay exactly what
     * it computes alone (oracle: the
     * future attention of the keys that join, docs/policies.md#oracles-incremental-form) */
    int (*share_create)(const policy_config *cfg, void **share, kv_err *err);
    void (*share_destroy)(void *share);
} policy_iface;

/* ---- plug-ins ---- */

/* What the host tells a plug-in: its ABI and struct sizes (a plug-in may
 * refuse a host by returning NULL from kvtrace_plugin_tables). */
typedef struct {
    uint32_t abi;
    uint32_t config_size, view_size, iface_size;
    /* the allocator structs (kvtrace/allocator.h) */
    uint32_t alloc_config_size, alloc_scope_size, alloc_buf_size, alloc_iface_size;
} kvtrace_host;

/* What a plug-in gives: its policies and allocators (NULL-terminated lists,
 * either may be NULL; at least one entry in all) and the sizes it was built
 * with (KVTRACE_PLUGIN fills the policies' and leaves the allocators' zero;
 * KVTRACE_PLUGIN_LISTS, kvtrace/allocator.h, fills all). The tables must
 * live as long as the plug-in is loaded (static const). These two structs
 * (kvtrace_host, kvtrace_plugin) are fixed for an ABI: a field added to
 * either bumps KVTRACE_POLICY_ABI. */
struct alloc_iface;
typedef struct {
    uint32_t abi;
    uint32_t config_size, view_size, iface_size;
    const policy_iface *const *policies;
    uint32_t alloc_config_size, alloc_scope_size, alloc_buf_size, alloc_iface_size;
    const struct alloc_iface *const *allocators;
} kvtrace_plugin;

extern const uint32_t kvtrace_plugin_abi;
const kvtrace_plugin *kvtrace_plugin_tables(const kvtrace_host *host);

/* Both exported symbols for the policies given (addresses of policy_iface):
 *   KVTRACE_PLUGIN(&mypolicy, &other)   at file scope, once per plug-in. */
#define KVTRACE_PLUGIN(...)                                                              \
    const uint32_t kvtrace_plugin_abi = KVTRACE_POLICY_ABI;                              \
    const kvtrace_plugin *kvtrace_plugin_tables(const kvtrace_host *host)                \
    {                                                                                    \
        static const policy_iface *const list[] = {__VA_ARGS__, NULL};                   \
        static const kvtrace_plugin tables = {KVTRACE_POLICY_ABI, sizeof(policy_config), \
                                              sizeof(policy_view), sizeof(policy_iface), list, \
                                              0, 0, 0, 0, NULL};                           \
        (void)host;                                                                      \
        return &tables;                                                                  \
    }

#endif
