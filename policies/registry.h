/* registry: the policy objects policy.c's table lists (internal to policies/).
 * Adding a policy = one file policies/NAME.c defining `const policy_iface
 * policy_NAME`, one line here, one line in the table in policy.c. */
#ifndef KV_POLICY_REGISTRY_H
#define KV_POLICY_REGISTRY_H

#include "policies/policy.h"

extern const policy_iface policy_full;
extern const policy_iface policy_keydiff;
extern const policy_iface policy_knorm;
extern const policy_iface policy_streaming;
extern const policy_iface policy_random;
extern const policy_iface policy_primekv;
extern const policy_iface policy_h2o;
extern const policy_iface policy_tova;
extern const policy_iface policy_snapkv;
extern const policy_iface policy_oracle;

#endif
