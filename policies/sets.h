/* sets: named lists of policy configurations, the registry's data that the verbs take their
 * defaults from (`kvtrace policies --sets` lists them; docs/policies.md#named-sets). A verb names a
 * set, never a policy: a policy joins or leaves a default here, beside the registry. */
#ifndef KV_POLICY_SETS_H
#define KV_POLICY_SETS_H

#include <stdbool.h>

/* the demo's sweep (every policy but one: compactor's sketched leverage costs more than all the
 * others together on the demo's trace, about 30 us a candidate) */
#define POLICY_SET_DEMO                                                                                \
    "full,keydiff,keydiff:window=0.2,knorm,streaming,tova,snapkv,h2o,random,oracle,primekv,"            \
    "expected_attention,lagkv,cur,qfilter,capkv,chunkkv,criticalkv,scissorhands,kvzip"
/* the demo's sweep with --all-policies */
#define POLICY_SET_DEMO_ALL POLICY_SET_DEMO ",compactor"
/* the demo's allocator study: three policies under each allocator that runs on any policy */
#define POLICY_SET_DEMO_ALLOC "snapkv,keydiff,tova"
/* the demo's needle study */
#define POLICY_SET_DEMO_NEEDLE "keydiff,snapkv,tova,streaming"
/* the baseline the demo's needle study is paired against (analyze --baseline) */
#define POLICY_SET_DEMO_NEEDLE_BASELINE "streaming"
/* fit's held-out baselines (--baselines) */
#define POLICY_SET_FIT_BASELINES "keydiff,snapkv,tova,h2o,expected_attention,oracle"
/* the policy whose score of a key is the attention the future gives it: features' default driver
 * and its future_attn column */
#define POLICY_SET_FUTURE "oracle"

typedef struct {
    const char *name, *list, *doc;
} policy_set;

/* Every named set, NULL-name-terminated. */
const policy_set *policy_sets(void);
/* Whether the policy called `name` (the registry's) reads the future: a comparison of what runs in a
 * model leaves it aside (fit's best baseline). False for a name the registry does not have. */
bool policy_name_offline(const char *name);

#endif
