/* knorm: keep the keys with the smallest L2 norm, s_j = −‖k_j‖
 * (docs/policies.md#the-first-ten-policies).
 * From Devoto et al., "A Simple and Effective L2 Norm-Based Strategy for KV
 * Cache Compression" (EMNLP 2024): low-norm keys draw high attention.
 * Parameters: none. */
#include "policies/policy.h"
#include "core/vecmath.h"

static int knorm_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                       kv_err *err)
{
    (void)cfg;
    (void)state;
    (void)err;
    for (int64_t j = 0; j < v->n; j++) scores[j] = -vm_norm(v->keys + j * v->D, v->D);
    return KV_OK;
}

const policy_iface policy_knorm = {
    .name = "knorm",
    .summary = "key norm: keeps the keys with the smallest L2 norm (s = -|k|)",
    .score = knorm_score,
};
