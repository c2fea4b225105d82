/* headkv: HeadKV's head-level budgets from offline head-importance scores
 * (Fu et al., "Not All Heads Matter: A Head-Level KV Cache Compression Method
 * with Integrated Retrieval and Reasoning", 2024; its code, HeadKV's
 * run_longbench.py / KVCache-Factory: head_capacity = round(total_attention ·
 * (B // beta) · L · H + (B − B // beta)), total_attention the importance
 * normalised to sum 1). Here, per stream (layer l, kv head g) of L·K, with
 * s_lg = score_lg / Σ score (the `--head-scores FILE`, normalised to sum 1):
 *   c_lg = s_lg · (N/beta) · L·K + N − N/beta
 * the real c_lg sum to exactly L·K·N. Rounded by largest remainder (each
 * ⌊c_lg⌋, plus one for the L·K·N − Σ⌊c⌋ streams with the largest fractional
 * parts, ties to the lower (layer, kv head)); then a stream below one row is
 * raised to 1, the row taken from the largest capacity (ties to the lower
 * stream), so the integer total stays L·K·N. Static.
 * Parameters: beta (>= 1, default 1.01: almost the whole budget is shared
 * by importance, each head's own base being N − N/beta ≈ 0.01·N). */
#include <math.h>
#include <stdlib.h>

#include "allocators/alloc.h"

/* Every stream's real capacity c_lg. */
static void real_caps(const double *score, double N, double beta, int64_t S, double *c)
{
    double sum = 0;
    for (int64_t x = 0; x < S; x++) sum += score[x];
    for (int64_t x = 0; x < S; x++) c[x] = score[x] / sum * (N / beta) * (double)S + N - N / beta;
}

/* Largest remainder (ties to the lower index) of c[S] into cap[S] summing to total. */
static void round_exact(const double *c, int64_t S, int64_t total, int64_t *cap)
{
    int64_t sum = 0;
    for (int64_t x = 0; x < S; x++) cap[x] = (int64_t)floor(c[x]), sum += cap[x];
    for (int64_t extra = total - sum; extra > 0; extra--) {
        int64_t best = -1;
        for (int64_t x = 0; x < S; x++)
            if (cap[x] == (int64_t)floor(c[x]) && (best < 0 || c[x] - floor(c[x]) > c[best] - floor(c[best]))) best = x;
        cap[best]++;
    }
}

/* Raises streams below one row to 1, one row at a time from the largest. */
static void floor_one(int64_t S, int64_t *cap)
{
    for (int64_t x = 0; x < S; x++)
        while (cap[x] < 1) {
            int64_t big = 0;
            for (int64_t y = 1; y < S; y++)
                if (cap[y] > cap[big]) big = y;
            cap[big]--, cap[x]++;
        }
}

static int headkv_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                             kv_err *err)
{
    const int64_t S = L * K;
    if (!ac->head_scores)
        return kv_fail(err, KV_EUSAGE, "headkv needs --head-scores FILE (a CSV layer,kv_head,score)");
    double *c = kv_calloc((size_t)S, sizeof *c, "headkv", err);
    int64_t *all = c ? kv_calloc((size_t)S, sizeof *all, "headkv", err) : NULL;
    if (!all) {
        free(c);
        return err->code;
    }
    real_caps(ac->head_scores, (double)N, alloc_num(ac, "beta"), S, c);
    round_exact(c, S, S * N, all);
    floor_one(S, all);
    for (int64_t g = 0; g < K; g++) cap[g] = all[layer * K + g];
    free(c), free(all);
    return KV_OK;
}

const alloc_iface alloc_headkv = {
    .name = "headkv",
    .summary = "HeadKV: head (l,g) keeps s*(N/beta)*L*K + N - N/beta, s its --head-scores importance (sum 1)",
    .params = {
        {.key = "beta", .kind = PARAM_NUMBER, .def = "1.01", .min = 1, .max = 1e6,
         .doc = "each head's own base is N - N/beta; the rest, (N/beta) per head, is shared by importance"},
    },
    .kind = ALLOC_STATIC,
    .scores_from = ALLOC_SCORES_FILE,
    .per_head = true,
    .capacities = headkv_capacities,
};
