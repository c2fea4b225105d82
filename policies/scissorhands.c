/* scissorhands: Scissorhands (Liu et al., "Scissorhands: Exploiting the
 * Persistence of Importance Hypothesis for LLM KV Cache Compression at Test
 * Time", NeurIPS 2023), as KVCache-Factory implements it
 * (pyramidkv/scissorhands.py: update_scissorhands_importance,
 * select_scissorhands_tokens). The importance history is updated once per
 * observed chunk (one update per call in the source):
 *     I_j ← decay · I_j + Σ_{i in the chunk's last `history` queries} a_ij
 * (history = 0: all of the chunk's queries, the source's history_window=None;
 * a new candidate starts at 0), a_ij the chunk's softmax weights averaged
 * over the kv group's heads; s_j = I_j, with the first `sinks` and the last
 * `recent` candidates in position order protected; keep the top by s_j
 * (the source's "topk" selection; its sampling mode is not reproduced).
 * Parameters: decay (0..1, default 1, the source's), history (integer >= 0,
 * default 0), recent (integer >= 0, default 32: the source's function
 * default is 0, the paper protects a recent window), sinks (integer >= 0,
 * default 0, the source's). */
#include <math.h>

#include "policies/attn_hist.h"
#include "policies/policy.h"
#include "policies/select.h"

static int sh_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    const int64_t history = (int64_t)policy_num(cfg, "history");
    const int64_t first = history > 0 && v->n_queries > history ? v->n_queries - history : 0;
    return attn_hist_update(state, v, first, policy_num(cfg, "decay"), "scissorhands", err);
}

static int sh_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)err;
    attn_hist_lookup(state, v, scores);
    const int64_t sinks = (int64_t)policy_num(cfg, "sinks"), recent = (int64_t)policy_num(cfg, "recent");
    for (int64_t c = 0; c < v->n && c < sinks; c++) scores[c] = INFINITY;
    policy_protect_recent(v, recent < v->n ? recent : v->n, scores);
    return KV_OK;
}

const policy_iface policy_scissorhands = {
    .name = "scissorhands",
    .summary = "Scissorhands: persistence of importance, attention history decayed per chunk "
               "(KVCache-Factory); sinks and recent window protected",
    .params = {{.key = "decay", .kind = PARAM_NUMBER, .def = "1", .min = 0, .max = 1,
                .doc = "the history's weight at each update: I = decay*I + the chunk's attention"},
               {.key = "history", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1 << 20, .integer = true,
                .doc = "the chunk's last `history` queries add their attention (0: all of them)"},
               {.key = "recent", .kind = PARAM_NUMBER, .def = "32", .min = 0, .max = 9007199254740992.0,
                .integer = true, .doc = "the last `recent` candidates are kept"},
               {.key = "sinks", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 9007199254740992.0,
                .integer = true, .doc = "the first `sinks` candidates are kept"}},
    .needs_attention = true,
    .create = attn_hist_create,
    .destroy = attn_hist_destroy,
    .score = sh_score,
    .observe = sh_observe,
    .scores_comparable = true,
};
