/* sets: the named lists of policy configurations (see sets.h). */
#include "policies/sets.h"

#include <string.h>

#include "policies/policy.h"

static const policy_set SETS[] = {
    {"demo", POLICY_SET_DEMO, "kvtrace demo's sweep"},
    {"demo_all", POLICY_SET_DEMO_ALL, "kvtrace demo --all-policies' sweep"},
    {"demo_alloc", POLICY_SET_DEMO_ALLOC, "the demo's allocator study"},
    {"demo_needle", POLICY_SET_DEMO_NEEDLE, "the demo's needle study"},
    {"demo_needle_baseline", POLICY_SET_DEMO_NEEDLE_BASELINE, "the baseline the demo's needle study is paired against"},
    {"fit_baselines", POLICY_SET_FIT_BASELINES, "kvtrace fit's held-out baselines (--baselines)"},
    {"future", POLICY_SET_FUTURE, "the future attention: kvtrace features' driver and future_attn"},
    {NULL, NULL, NULL},
};

const policy_set *policy_sets(void)
{
    return SETS;
}

bool policy_name_offline(const char *name)
{
    const policy_iface *pi = policy_find(name);
    return pi && pi->offline_only;
}
