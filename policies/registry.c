/* registry: the one table of eviction policies, in the order `kvtrace
 * policies` lists them. Adding a policy = one file policies/NAME.c defining
 * `const policy_iface policy_NAME`, and one line X(NAME) in POLICIES below:
 * the list gives both the declarations and the table. */
#include <string.h>

#include "policies/policy.h"

#define POLICIES(X) \
    X(full)         \
    X(keydiff)      \
    X(knorm)        \
    X(streaming)    \
    X(random)       \
    X(primekv)      \
    X(h2o)          \
    X(tova)         \
    X(snapkv)       \
    X(oracle)       \
    X(expected_attention) \
    X(lagkv)        \
    X(cur)          \
    X(qfilter)      \
    X(capkv)        \
    X(chunkkv)      \
    X(scissorhands) \
    X(kvzip)        \
    X(compactor)    \
    X(criticalkv)

#define DECLARE(name) extern const policy_iface policy_##name;
POLICIES(DECLARE)
#undef DECLARE

#define ENTRY(name) &policy_##name,
static const policy_iface *const REGISTRY[] = {POLICIES(ENTRY) NULL};
#undef ENTRY

const policy_iface *const *policy_all(void) { return REGISTRY; }

const policy_iface *policy_find(const char *name)
{
    for (const policy_iface *const *p = REGISTRY; *p; p++)
        if (strcmp((*p)->name, name) == 0) return *p;
    return NULL;
}
