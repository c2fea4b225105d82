/* policy: the one interface every eviction policy implements
 * (docs/policies.md).
 *
 * The engine owns the cache. At each eviction step (policy_step, step.h: sim's
 * replay and the in-model eviction, docs/fidelity.md, run the same one) the
 * policy gets the candidates C = cache ∪ chunk as plain arrays (no trace
 * handles) and gives one score per candidate; higher = keep, +INFINITY =
 * protected. The step then keeps exactly N (policy_select, select.h): the
 * highest scores, ties broken towards the later position (so with more than N
 * protected, the newest N stay). Scores are doubles, accumulated in double from
 * the stored values.
 *
 * A policy may keep state between steps (per layer and kv head: the engine
 * creates one instance per replayed (layer, kv head) stream) and may observe
 * what the engine computed (the attention of the chunk's queries:
 * docs/sim.md#attention-for-the-policies).
 * Nothing in a policy aborts: score/observe report a failure (out of memory)
 * in a kv_err, and the engines pass it up. */
#ifndef KV_POLICY_H
#define KV_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/kv_error.h"
#include "core/rope.h"
/* the interface itself (parameters, policy_config, policy_view, policy_iface) is the public,
 * versioned header plug-ins build against: the built-ins use the same one (docs/plugins.md) */
#include "kvtrace/policy.h"

/* Named configurations (`--alias NAME=policy:key=value...`): a table the caller owns and passes
 * to the parser (no process-wide state). An alias names a policy of the registry (not another
 * alias, so none can recurse), its name is not a policy's, and each is defined once. */
enum { POLICY_MAX_ALIASES = 32 };
typedef struct {
    int n;
    char name[POLICY_MAX_ALIASES][64];
    policy_config cfg[POLICY_MAX_ALIASES];
    /* policies beside the registry, NULL-terminated (a plug-in's: policy_plugins_attach, plugin.h);
     * found by name after the registry's, never clashing with them; NULL: none */
    const policy_iface *const *user;
    /* user-defined policies (--define's expressions, expr/expr.h), owned by the caller: usable by
     * name after the registry's and the plug-ins'; NULL: none */
    const struct policy_iface *const *defs;
    int n_defs;
} policy_aliases;

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
void policy_base_close(policy_base *b);
int policy_base_score(policy_base *b, const policy_view *v, double *scores, kv_err *err);
int64_t policy_base_query_window(const policy_config *cfg, const policy_iface *const *bases);
/* A wrapper's state of `size` bytes that starts with its policy_base, opened (create), and the
 * observe that passes the view on to the base (usable as the wrapper's own observe). */
int policy_wrapper_create(const policy_config *cfg, const policy_iface *const *bases, size_t size, void **state,
                          kv_err *err);
int policy_wrapper_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err);
/* True when the configuration reads the future: offline_only or offline_for. */
bool policy_offline_only(const policy_config *cfg);
/* KV_OK for a configuration that can run inside a model; else the one refusal every in-model verb
 * gives (KV_EUSAGE, naming `where`: "--evict", "--policies", ...). */
int policy_check_online(const policy_config *cfg, const char *verb, const char *where, kv_err *err);
int policy_choice(const policy_config *cfg, const char *key);

/* What `kvtrace policies` prints of a policy (describe.c): its summary, what it reads, its
 * parameters and presets; and of a parameter list alone (an allocator's). */
void policy_describe(FILE *f, const policy_iface *pi);
void policy_params_describe(FILE *f, const policy_param *params);

/* W_o, the attention output projection, is read by a policy that declares it (needs_wo,
 * needs_wo_for: criticalkv's wo=model): whether cfg reads it, and cfg turned to its declared
 * without_wo setting for a trace that holds none (*changed: it was set). */
bool policy_reads_wo(const policy_config *cfg);
int policy_without_wo(policy_config *cfg, bool *changed, kv_err *err);

#endif
