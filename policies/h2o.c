/* h2o: Heavy-Hitter Oracle (Zhang et al., "H2O: Heavy-Hitter Oracle for
 * Efficient Generative Inference of Large Language Models", NeurIPS 2023).
 * s_j = the attention candidate j has received since it entered the cache,
 * summed over every query of every chunk (observed at step 3 of
 * docs/sim.md#the-eviction-step-step-by-step), averaged over the query heads
 * of the kv group; the most recent ⌊recent·N⌋ candidates are protected
 * (docs/policies.md#the-first-ten-policies). normalize=age divides each sum by
 * the number of queries that saw the candidate, now − pos + 1 (every query
 * from its own position on: NVIDIA kvpress ObservedAttentionPress divides by
 * the same count, k_len − j, over a prompt).
 * Parameters: normalize (none|age, default none), recent (0..1, default 0.5). */
#include <math.h>

#include "policies/attn_hist.h"
#include "policies/policy.h"
#include "policies/select.h"

static int h2o_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)cfg;
    return attn_hist_update(state, v, 0, 1.0, "h2o", err);
}

static int h2o_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                     kv_err *err)
{
    (void)err;
    const attn_hist *s = state;
    if (s) attn_hist_lookup(s, v, scores);
    else for (int64_t c = 0; c < v->n; c++) scores[c] = 0.0;
    if (policy_choice(cfg, "normalize") == 1)   /* age: the mean attention per query that saw it */
        for (int64_t c = 0; c < v->n; c++)
            scores[c] /= (double)(v->now >= v->pos[c] ? v->now - v->pos[c] + 1 : 1);
    policy_protect_recent(v, policy_recent_count(policy_num(cfg, "recent"), v->budget), scores);
    return KV_OK;
}

const policy_iface policy_h2o = {
    .name = "h2o",
    .summary = "heavy hitters: keeps the candidates with the most accumulated attention, recent ones protected",
    .params = {{.key = "normalize", .kind = PARAM_CHOICE, .def = "none", .choices = "none|age",
                .doc = "age: divide the sum by the number of queries that saw the candidate (kvpress ObservedAttention)"},
               {.key = "recent", .kind = PARAM_NUMBER, .def = "0.5", .min = 0, .max = 1,
                .doc = "fraction of the budget kept for the most recent candidates"}},
    .needs_attention = true,
    .create = attn_hist_create,
    .destroy = attn_hist_destroy,
    .score = h2o_score,
    .observe = h2o_observe,
    .scores_comparable = true,
};
