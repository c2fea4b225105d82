/* snapkv: SnapKV (Li et al., "SnapKV: LLM Knows What You are Looking for Before
 * Generation", 2024). The observation window is the queries of the last
 * `window` positions up to now, taken from the trace whether they are cached or
 * not; s_j = Σ_{i in window} a_ij, each window query's softmax over the
 * candidates it can see (j <= i), averaged over the kv group's heads, then an
 * average pool of width `kernel` over the candidates in position order (cache
 * neighbours, not absolute positions; zero padded, divided by kernel: offsets
 * -floor(kernel/2) .. kernel-1-floor(kernel/2)); candidates inside the window
 * are protected (docs/policies.md#the-first-ten-policies). pool=max takes the
 * largest of the kernel's sums instead (the SnapKV repository's max_pool1d; its
 * padding never wins, every window holding the candidate itself).
 * Parameters: window (integer >= 1, default 32), kernel (integer >= 1,
 * default 5), pool (avg|max, default avg). Presets (docs/policies.md):
 * paper = window=32:kernel=7:pool=max (the SnapKV paper's setting),
 * kvpress = window=64:kernel=5:pool=avg (NVIDIA kvpress SnapKVPress's defaults). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policies/attn_window.h"
#include "policies/policy.h"

static int snapkv_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                        kv_err *err)
{
    (void)state;
    double *sum = kv_calloc((size_t)v->n + 1, sizeof *sum, "snapkv scores", err);
    int64_t i0 = 0;
    int rc = sum ? attn_window_sums(v, (int64_t)policy_num(cfg, "window"), sum, &i0, "snapkv window scores", err)
                 : err->code;
    if (!rc) {
        attn_window_pool(sum, v->n, (int64_t)policy_num(cfg, "kernel"), policy_choice(cfg, "pool") == 1, scores);
        for (int64_t c = 0; c < v->n; c++)   /* the window's own candidates are protected */
            if (v->pos[c] >= i0) scores[c] = INFINITY;
    }
    free(sum);
    return rc;
}

static int64_t snapkv_query_window(const policy_config *cfg)
{
    return (int64_t)policy_num(cfg, "window");
}

const policy_iface policy_snapkv = {
    .name = "snapkv",
    .summary = "SnapKV: attention of the last `window` queries, pooled over cache neighbours; window protected",
    .params = {{.key = "kernel", .kind = PARAM_NUMBER, .def = "5", .min = 1, .max = 1024, .integer = true,
                .doc = "width of the pool over neighbouring candidates"},
               {.key = "pool", .kind = PARAM_CHOICE, .def = "avg", .choices = "avg|max",
                .doc = "the pool: the mean of the kernel's sums (zero padded) or their maximum"},
               {.key = "window", .kind = PARAM_NUMBER, .def = "32", .min = 1, .max = 1 << 20, .integer = true,
                .doc = "observation window: queries of the last `window` positions"}},
    .presets = {{.name = "paper", .params = "kernel=7:pool=max:window=32",
                 .doc = "the SnapKV paper (Li et al. 2024): window 32, max pool of 7"},
                {.name = "kvpress", .params = "kernel=5:pool=avg:window=64",
                 .doc = "NVIDIA kvpress SnapKVPress: window 64, average pool of 5"}},
    .score = snapkv_score,
    .query_window = snapkv_query_window,
    .scores_comparable = true,
};
