/* knorm: keep the keys with the smallest L2 norm, s_j = −‖k_j‖ (SPEC §5).
 * From Devoto et al., "A Simple and Effective L2 Norm-Based Strategy for KV
 * Cache Compression" (EMNLP 2024): low-norm keys draw high attention.
 * Parameters: none. */
#include "policies/registry.h"
#include "policies/vecmath.h"

static void knorm_score(const policy_config *cfg, void *state, const policy_view *v, double *scores)
{
    (void)cfg;
    (void)state;
    for (int64_t j = 0; j < v->n; j++) scores[j] = -vm_norm(v->keys + j * v->D, v->D);
}

const policy_iface policy_knorm = {
    .name = "knorm",
    .summary = "key norm: keeps the keys with the smallest L2 norm (s = -|k|)",
    .n_params = 0,
    .score = knorm_score,
};
