/* kvzip: KVzip (Kim et al., "KVzip: Query-Agnostic KV Cache Compression
 * with Context Reconstruction", 2025; NVIDIA kvpress
 * kvpress/presses/kvzip_press.py; the paper's repository snu-mllab/KVzip).
 * After the context the model reads a reconstruction prompt ("\n\nRepeat
 * the previous context exactly." and "\n", then the context again); key j
 * scores the largest softmax weight any query of that pass gave it:
 *     s_j = max_{h in the kv group} max_{i in the repeat pass} a^h_ij
 * recorded per query head by `capture --kvzip` as /attention/kvzip [L, H, T]
 * (docs/trace.md) and maxed here over the kv group's query heads (the source
 * maxes over the group and the queries at once). The first `sinks` positions
 * score 1, the largest a weight can be (the source's n_sink; its no-chat-
 * template path overwrites them with their attention: sinks=0 is that path).
 * It sees the whole context and a pass after it: offline only, like oracle;
 * sim refuses a trace without the dataset. Scores are attention weights,
 * comparable across heads (the source ranks them across heads and layers).
 * Parameters: sinks (integer >= 0, default 4). */
#include "policies/policy.h"

static int kvzip_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)state;
    if (!v->kvzip) return kv_fail(err, KV_EFAIL, "kvzip: no kvzip scores in the view (capture --kvzip)");
    const double sinks = policy_num(cfg, "sinks");
    for (int64_t c = 0; c < v->n; c++) {
        const int64_t p = v->pos[c];
        float best = 0.0f;
        for (int64_t j = 0; j < v->q_heads && p < v->T; j++) {
            const float w = v->kvzip[j * v->T + p];
            best = w > best ? w : best;
        }
        scores[c] = (double)p < sinks ? 1.0 : (double)best;
    }
    return KV_OK;
}

const policy_iface policy_kvzip = {
    .name = "kvzip",
    .summary = "KVzip: the largest attention a key gets while the model repeats the context "
               "(capture --kvzip; offline only)",
    .params = {{.key = "sinks", .kind = PARAM_NUMBER, .def = "4", .min = 0, .max = 9007199254740992.0,
                .integer = true, .doc = "positions below this score 1 (the source's attention sinks)"}},
    .score = kvzip_score,
    .offline_only = true,
    .needs_kvzip = true,
    .scores_comparable = true,
};
