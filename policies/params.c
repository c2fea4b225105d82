/* params: a policy's parameter list as the parser and the policies read it.
 * Its length is not declared but counted (params[] up to the first entry
 * without a key), so a policy file lists its parameters once. */
#include <stdlib.h>
#include <string.h>

#include "policies/policy.h"

int policy_params_count(const policy_param *params)
{
    int n = 0;
    while (n < POLICY_MAX_PARAMS && params[n].key) n++;
    return n;
}

int policy_params_index(const policy_param *params, const char *key, size_t len)
{
    for (int i = 0; i < POLICY_MAX_PARAMS && params[i].key; i++)
        if (strlen(params[i].key) == len && strncmp(params[i].key, key, len) == 0) return i;
    return -1;
}

int policy_n_params(const policy_iface *pi) { return policy_params_count(pi->params); }

static int policy_param_index(const policy_iface *pi, const char *key, size_t len)
{
    return policy_params_index(pi->params, key, len);
}

/* A policy asking for a key it does not declare, or of the wrong kind, is a bug. */
static int param_index(const policy_config *cfg, const char *key, policy_param_kind kind)
{
    int i = policy_param_index(cfg->iface, key, strlen(key));
    KV_ASSERT(i >= 0 && cfg->iface->params[i].kind == kind);
    return i;
}

double policy_num(const policy_config *cfg, const char *key)
{
    return cfg->num[param_index(cfg, key, PARAM_NUMBER)];
}

int policy_choice(const policy_config *cfg, const char *key)
{
    return cfg->choice[param_index(cfg, key, PARAM_CHOICE)];
}

bool policy_offline_only(const policy_config *cfg)
{
    return cfg->iface->offline_only || (cfg->iface->offline_for && cfg->iface->offline_for(cfg));
}

int policy_check_online(const policy_config *cfg, const char *verb, const char *where, kv_err *err)
{
    if (!policy_offline_only(cfg)) return KV_OK;
    return kv_fail(err, KV_EUSAGE, "%s: %s %s is offline only: it reads what a model run does not keep (the future, "
                   "or every past query); replay it with kvtrace sim", verb, where, cfg->iface->name);
}

void policy_defaults(const policy_iface *pi, policy_config *out)
{
    memset(out, 0, sizeof *out);
    out->iface = pi;
    out->n = policy_n_params(pi);
    for (int i = 0; i < out->n; i++) {
        const policy_param *p = &pi->params[i];
        if (p->kind == PARAM_NUMBER) {
            out->num[i] = strtod(p->def, NULL);
            continue;
        }
        const size_t len = strlen(p->def);
        int k = 0;
        for (const char *ch = p->choices; ch; ch = strchr(ch, '|') ? strchr(ch, '|') + 1 : NULL, k++)
            if (strncmp(ch, p->def, len) == 0 && (ch[len] == '|' || ch[len] == 0)) out->choice[i] = k;
    }
}
