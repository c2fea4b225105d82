/* oracle: the future-attention upper bound (SPEC §5). s_j = Σ_{i > now}
 * a^full_ij, the full-cache attention every future query will give candidate
 * j, averaged over the kv group's heads; a^full_ij = exp(q_i.k_j/sqrt(D) −
 * lse_i) with lse_i the full-cache log-sum-exp. The future terms are summed
 * directly, never as colsum minus the past (which cancels catastrophically
 * for tiny weights). With no future left every score is 0 and the tie rule
 * keeps the newest. Uses the future: an offline reference only.
 * Parameters: none. */
#include <math.h>

#include "policies/registry.h"

static void oracle_score(const policy_config *cfg, void *state, const policy_view *v, double *scores)
{
    (void)cfg;
    (void)state;
    const int64_t n = v->n, D = v->D;
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t c = 0; c < n; c++) scores[c] = 0.0;
    for (int64_t j = 0; v->queries && j < v->q_heads; j++)
        for (int64_t i = v->now + 1; i < v->T; i++) {
            const float *q = v->queries + (j * v->T + i) * D;
            const double lse = v->lse[j * v->T + i];
            for (int64_t c = 0; c < n; c++) {
                double s = 0.0;
                for (int64_t d = 0; d < D; d++) s += (double)q[d] * v->keys[c * D + d];
                scores[c] += exp(s * scale - lse) / (double)v->q_heads;
            }
        }
}

const policy_iface policy_oracle = {
    .name = "oracle",
    .summary = "oracle: future full-cache attention (uses the future: an upper-bound reference, offline only)",
    .n_params = 0,
    .score = oracle_score,
};
