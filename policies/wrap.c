/* wrap: a wrapping policy's base (chunkkv, criticalkv): its configuration
 * (an alias's, or one of the wrapper's bases with its defaults), its per-stream
 * state, and the calls passed on to it. The wrappers list their bases
 * themselves (not through the registry, which lists the wrappers: a loop). */
#include <stdlib.h>

#include "policies/policy.h"

static void policy_base_config(const policy_config *cfg, const policy_iface *const *bases, policy_config *out)
{
    if (cfg->base) *out = *cfg->base;
    else policy_defaults(bases[policy_choice(cfg, "base")], out);
}

static int policy_base_open(const policy_config *cfg, const policy_iface *const *bases, policy_base *b, kv_err *err)
{
    policy_base_config(cfg, bases, &b->cfg);
    b->state = NULL;
    return b->cfg.iface->create ? b->cfg.iface->create(&b->cfg, &b->state, err) : KV_OK;
}

void policy_base_close(policy_base *b)
{
    if (b->cfg.iface && b->cfg.iface->destroy) b->cfg.iface->destroy(b->state);
    b->state = NULL;
}

int policy_wrapper_create(const policy_config *cfg, const policy_iface *const *bases, size_t size, void **state,
                          kv_err *err)
{
    policy_base *b = kv_calloc(1, size, cfg->iface->name, err);
    if (!b) return err->code;
    int rc = policy_base_open(cfg, bases, b, err);
    if (rc) free(b);
    else *state = b;
    return rc;
}

static int policy_base_observe(policy_base *b, const policy_view *v, kv_err *err)
{
    return b->cfg.iface->observe ? b->cfg.iface->observe(&b->cfg, b->state, v, err) : KV_OK;
}

int policy_wrapper_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)cfg;
    return policy_base_observe(state, v, err);
}

int policy_base_score(policy_base *b, const policy_view *v, double *scores, kv_err *err)
{
    return b->cfg.iface->score(&b->cfg, b->state, v, scores, err);
}

int64_t policy_base_query_window(const policy_config *cfg, const policy_iface *const *bases)
{
    policy_config b;
    policy_base_config(cfg, bases, &b);
    return b.iface->query_window ? b.iface->query_window(&b) : 0;
}
