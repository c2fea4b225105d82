/* tova: Token Omission Via Attention (Oren et al., "Transformers are
 * Multi-State RNNs", 2024). s_j = the attention the chunk's last query gives
 * candidate j, averaged over all H query heads of the layer (scope=layer: one
 * kept set for every kv head of the layer, as the paper) or over the kv group
 * (scope=group) (docs/policies.md#the-first-ten-policies). No protected window.
 * Parameters: scope (layer|group, default layer). */
#include "policies/policy.h"

enum { SCOPE_LAYER, SCOPE_GROUP };

static bool tova_layer_scope(const policy_config *cfg)
{
    return policy_choice(cfg, "scope") == SCOPE_LAYER;
}

static int tova_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                      kv_err *err)
{
    (void)cfg;
    (void)state;
    (void)err;
    const float *last = v->attn && v->n_queries > 0 ? v->attn + (v->n_queries - 1) * v->n : NULL;
    for (int64_t j = 0; j < v->n; j++) scores[j] = last ? (double)last[j] : 0.0;
    return KV_OK;
}

const policy_iface policy_tova = {
    .name = "tova",
    .summary = "TOVA: keeps what the chunk's last query attends to most (mean over the layer's or the group's heads)",
    .params = {{.key = "scope", .kind = PARAM_CHOICE, .def = "layer", .choices = "layer|group",
                .doc = "layer: one kept set for all kv heads of a layer; group: one per kv head"}},
    .needs_attention = true,
    .score = tova_score,
    .layer_scope = tova_layer_scope,
    .scores_comparable = true,
};
