/* full: the reference cache that never evicts
 * (docs/policies.md#the-first-ten-policies). It runs per budget like the others
 * so every results row has its unevicted twin; the engine sees never_evicts and
 * never asks it to select. score() gives 0 to all.
 * Parameters: none. */
#include "policies/policy.h"

static int full_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                      kv_err *err)
{
    (void)cfg;
    (void)state;
    (void)err;
    for (int64_t j = 0; j < v->n; j++) scores[j] = 0;
    return KV_OK;
}

const policy_iface policy_full = {
    .name = "full",
    .summary = "never evicts: the unevicted reference cache",
    .never_evicts = true,
    .score = full_score,
    .scores_comparable = true,
};
