/* random: uniform scores, the floor any policy must beat
 * (docs/policies.md#the-first-ten-policies). The generator is seeded by (seed,
 * layer, kv head, step), so a run is the same whatever the thread count or the
 * order the streams are replayed in.
 * Parameters: seed (integer >= 0, default 0). */
#include "core/rng.h"
#include "policies/policy.h"

static int random_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                        kv_err *err)
{
    (void)state;
    (void)err;
    kv_rng r;
    rng_init(&r, (uint64_t)policy_num(cfg, "seed"), (uint64_t)v->layer, (uint64_t)v->kv_head,
             (uint64_t)v->step);
    for (int64_t j = 0; j < v->n; j++) scores[j] = rng_uniform(&r);
    return KV_OK;
}

const policy_iface policy_random = {
    .name = "random",
    .summary = "uniform random scores, seeded by (seed, layer, kv head, step)",
    .params = {
        {.key = "seed", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 9007199254740992.0,
         .integer = true, .doc = "generator seed"},
    },
    .score = random_score,
    .scores_comparable = true,
};
