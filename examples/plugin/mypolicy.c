/* mypolicy: an out-of-tree kvtrace eviction policy, built as a plug-in.
 *
 * It restates TOVA (Oren et al., "Transformers are Multi-State RNNs", 2024):
 * s_j = the attention the chunk's last query gives candidate j, averaged over
 * the layer's query heads (scope=layer: one kept set per layer) or over the
 * kv group (scope=group). kvtrace's built-in `tova` does the same, so
 *   kvtrace sim TRACE --plugin build/mypolicy.so --policies mypolicy,tova ...
 * keeps the same sets for both (tests/scripts/test_plugin.py checks it).
 *
 * Build: make (uses `pkg-config --cflags kvtrace`); docs/plugins.md says the rest. */
#include <kvtrace/policy.h>

enum { SCOPE_LAYER, SCOPE_GROUP };

/* Parameters come in the order of .params below (sorted by key): choice[0] is scope. */
static bool my_layer_scope(const policy_config *cfg) { return cfg->choice[0] == SCOPE_LAYER; }

static int my_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)cfg;
    (void)state;
    (void)err;
    /* v->attn: [n_queries][n], the chunk's queries over the candidates (needs_attention) */
    const float *last = v->attn && v->n_queries > 0 ? v->attn + (v->n_queries - 1) * v->n : 0;
    for (int64_t j = 0; j < v->n; j++) scores[j] = last ? (double)last[j] : 0.0;
    return KV_OK;
}

static const policy_iface mypolicy = {
    .name = "mypolicy",
    .summary = "TOVA restated as a plug-in: the chunk's last query's attention",
    .params = {{.key = "scope", .kind = PARAM_CHOICE, .def = "layer", .choices = "layer|group",
                .doc = "layer: one kept set for all kv heads of a layer; group: one per kv head"}},
    .needs_attention = true,
    .score = my_score,
    .layer_scope = my_layer_scope,
    .scores_comparable = true,
};

KVTRACE_PLUGIN(&mypolicy)
