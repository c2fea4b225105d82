/* policy: the one interface every eviction policy implements (SPEC §5).
 *
 * The engine owns the cache. At each eviction step (policy_step, step.h:
 * sim's replay and the in-model eviction of issue #9 run the same one) the
 * policy gets the candidates C = cache ∪ chunk as plain arrays (no trace
 * handles) and gives one score per candidate; higher = keep, +INFINITY =
 * protected. The step then keeps exactly N (policy_select, select.h): the
 * highest scores, ties broken towards the later position (so with more than
 * N protected, the newest N stay). Scores are doubles, accumulated in double
 * from the stored values.
 *
 * A policy may keep state between steps (per layer and kv head: the engine
 * creates one instance per replayed (layer, kv head) stream) and may observe
 * what the engine computed (issue #5: attention of the chunk's queries).
 * Nothing in a policy aborts: score/observe report a failure (out of memory)
 * in a kv_err, and the engines pass it up. */
#ifndef KV_POLICY_H
#define KV_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "core/rope.h"

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

/* Named configurations (`--alias NAME=policy:key=value...`): a table the caller owns and passes
 * to the parser (no process-wide state). An alias names a policy of the registry (not another
 * alias, so none can recurse), its name is not a policy's, and each is defined once. */
enum { POLICY_MAX_ALIASES = 32 };
typedef struct {
    int n;
    char name[POLICY_MAX_ALIASES][64];
    policy_config cfg[POLICY_MAX_ALIASES];
} policy_aliases;

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
} policy_view;

typedef struct policy_iface {
    const char *name;
    const char *summary;     /* one line; says "reconstruction" for primekv */
    policy_param params[POLICY_MAX_PARAMS];   /* sorted by key; the first without a key ends them */
    policy_preset presets[POLICY_MAX_PRESETS]; /* optional; the first without a name ends them */
    bool never_evicts;       /* full */
    bool needs_attention;    /* issue #5 */
    /* optional: per-stream state; NULL create means stateless */
    int (*create)(const policy_config *cfg, void **state, kv_err *err);
    void (*destroy)(void *state);
    /* scores[n] for the candidates of v; higher keeps, +INFINITY protected.
     * KV_OK, or an error in err (out of memory): the engine stops the run */
    int (*score)(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err);
    /* optional, step 3 of SPEC §4: called for every chunk (evicting or not)
     * after the chunk's queries attended; with needs_attention, v->attn holds
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
} policy_iface;

/* The registry (registry.c): every policy, in a fixed order; NULL-terminated. */
const policy_iface *const *policy_all(void);
const policy_iface *policy_find(const char *name);

/* Parsing (parse.c): "name[:key=value...]"; an unknown name, key, or a bad
 * value is a KV_EUSAGE error that lists what is valid. */
int policy_parse(const char *spec, policy_config *out, kv_err *err);

/* The same with aliases (t NULL: none): "NAME" alone gives the alias's configuration (with
 * `alias` set; no parameters may follow), and a policy_valued parameter (base=) may name an
 * alias of one of its choices. */
int policy_parse_in(const policy_aliases *t, const char *spec, policy_config *out, kv_err *err);

/* Defines an alias from "NAME=policy[:key=value...]" (KV_EUSAGE naming the alias when the name is
 * empty, not [A-Za-z0-9_.-], a policy's or an alias's already, the table is full, the
 * configuration is bad, or it names an alias). Base= may name an alias defined before. */
int policy_alias_add(policy_aliases *t, const char *def, kv_err *err);

/* Sets one parameter of a parsed configuration (checked as the parser checks
 * it) and rebuilds its canonical name: sim relabels criticalkv wo=absent on a
 * trace without /wo. */
int policy_config_set(policy_config *cfg, const char *key, const char *value, kv_err *err);

/* A comma-separated list of policies into out[0..max): *n of them, split
 * by cli_list_split (no empty item, no space). Errors are usage errors:
 * policy_parse's, or of `verb` for a loose list or one configuration given
 * twice after canonicalisation ("keydiff,keydiff:window=0"), naming both
 * spellings, so the repeat is refused before any work. */
int policy_parse_list(const char *verb, const char *list, policy_config *out, int max, int *n, kv_err *err);
int policy_parse_list_in(const policy_aliases *t, const char *verb, const char *list, policy_config *out, int max,
                         int *n, kv_err *err);

/* Parameters (params.c), for the parser and the policy implementations:
 * how many a policy has (its params[] up to the first without a key), the
 * index of `key` (len bytes) or -1, and a configuration's value of `key`. */
int policy_n_params(const policy_iface *pi);
int policy_param_index(const policy_iface *pi, const char *key, size_t len);
/* The same on a bare parameter list (an allocator's, allocators/alloc.h). */
int policy_params_count(const policy_param *params);
int policy_params_index(const policy_param *params, const char *key, size_t len);

/* The parameter part of a spec for any owner of a parameter list (a policy,
 * an allocator): `rest` points into `spec` just after the name (at ':' or
 * the end). Fills num[]/choice[] with defaults, then the given values, and
 * `canonical` (cap bytes) with "key=value:..." sorted by key; errors are
 * KV_EUSAGE naming `owner` and what is valid. */
int policy_params_parse(const char *owner, const policy_param *params, const char *spec, const char *rest,
                        double *num, int *choice, char *canonical, size_t cap, kv_err *err);
double policy_num(const policy_config *cfg, const char *key);
/* pi's configuration with every parameter at its default (canonical left empty): the base of a
 * wrapping policy (chunkkv, criticalkv), which cannot go through the parser (it reads the registry,
 * which lists the wrapper: a loop between files). */
void policy_defaults(const policy_iface *pi, policy_config *out);
/* A wrapper's base (wrap.c): the alias's configuration given as base= (cfg->base), else
 * bases[choice of `base`] with its defaults (bases in the order of the parameter's choices); its
 * state per stream, and observe/score/query_window passed on to it. */
typedef struct {
    policy_config cfg;
    void *state;
} policy_base;
void policy_base_config(const policy_config *cfg, const policy_iface *const *bases, policy_config *out);
int policy_base_open(const policy_config *cfg, const policy_iface *const *bases, policy_base *b, kv_err *err);
void policy_base_close(policy_base *b);
int policy_base_observe(policy_base *b, const policy_view *v, kv_err *err);
int policy_base_score(policy_base *b, const policy_view *v, double *scores, kv_err *err);
int64_t policy_base_query_window(const policy_config *cfg, const policy_iface *const *bases);
/* A wrapper's state of `size` bytes that starts with its policy_base, opened (create), and the
 * observe that passes the view on to the base (usable as the wrapper's own observe). */
int policy_wrapper_create(const policy_config *cfg, const policy_iface *const *bases, size_t size, void **state,
                          kv_err *err);
int policy_wrapper_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err);
/* True when the configuration reads the future: offline_only or offline_for. */
bool policy_offline_only(const policy_config *cfg);
int policy_choice(const policy_config *cfg, const char *key);

#endif
