/* Plug-ins kvtrace must refuse (tests/scripts/test_plugin.py), one per macro:
 *   BAD_ABI     kvtrace_plugin_abi of another ABI
 *   BAD_SIZE    tables claiming a policy_view larger than the host's (built against a newer header)
 *   NO_TABLES   kvtrace_plugin_abi without kvtrace_plugin_tables
 *   CLASH       a policy named knorm (a built-in)
 *   HALF_SHARE  share_create without share_destroy
 *   NAN_SCORE   loads, then scores one candidate NaN at the first evicting step */
#include <math.h>

#include <kvtrace/policy.h>

static int bad_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)cfg;
    (void)state;
    (void)err;
    for (int64_t j = 0; j < v->n; j++) scores[j] = (double)v->pos[j];
#ifdef NAN_SCORE
    scores[v->n / 2] = NAN;
#endif
    return KV_OK;
}

#ifdef HALF_SHARE
static int half_share(const policy_config *cfg, void **share, kv_err *err)
{
    (void)cfg;
    (void)err;
    *share = NULL;
    return KV_OK;
}
#endif

static const policy_iface bad __attribute__((unused)) = {   /* unused where the tables are left out */
#ifdef HALF_SHARE
    .share_create = half_share,
#endif
#ifdef CLASH
    .name = "knorm",
#else
    .name = "badpol",
#endif
    .score = bad_score,
};

#if defined(BAD_ABI)
const uint32_t kvtrace_plugin_abi = KVTRACE_POLICY_ABI + 98;
const kvtrace_plugin *kvtrace_plugin_tables(const kvtrace_host *host)
{
    (void)host;
    return 0;
}
#elif defined(BAD_SIZE)
const uint32_t kvtrace_plugin_abi = KVTRACE_POLICY_ABI;
const kvtrace_plugin *kvtrace_plugin_tables(const kvtrace_host *host)
{
    static const policy_iface *const list[] = {&bad, NULL};
    static const kvtrace_plugin tables = {KVTRACE_POLICY_ABI, sizeof(policy_config), sizeof(policy_view) + 8,
                                          sizeof(policy_iface), list, 0, 0, 0, 0, NULL};
    (void)host;
    return &tables;
}
#elif defined(NO_TABLES)
const uint32_t kvtrace_plugin_abi = KVTRACE_POLICY_ABI;
#else
KVTRACE_PLUGIN(&bad)
#endif
