/* snapkv: SnapKV (Li et al., "SnapKV: LLM Knows What You are Looking for
 * Before Generation", 2024). The observation window is the queries of the
 * last `window` positions up to now, taken from the trace whether they are
 * cached or not; s_j = Σ_{i in window} a_ij, each window query's softmax over
 * the candidates it can see (j <= i), averaged over the kv group's heads, then
 * an average pool of width `kernel` over the candidates in position order
 * (cache neighbours, not absolute positions; zero padded, divided by kernel:
 * offsets -floor(kernel/2) .. kernel-1-floor(kernel/2)); candidates inside
 * the window are protected (SPEC §5). pool=max takes the largest of the
 * kernel's sums instead (the SnapKV repository's max_pool1d; its padding
 * never wins, every window holding the candidate itself).
 * Parameters: window (integer >= 1, default 32), kernel (integer >= 1,
 * default 5), pool (avg|max, default avg). Presets (docs/policies.md):
 * paper = window=32:kernel=7:pool=max (the SnapKV paper's setting),
 * kvpress = window=64:kernel=5:pool=avg (NVIDIA kvpress SnapKVPress's defaults). */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/softmax.h"
#include "policies/policy.h"

static int snapkv_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                        kv_err *err)
{
    (void)state;
    const int64_t n = v->n, D = v->D, window = (int64_t)policy_num(cfg, "window");
    const int64_t kernel = (int64_t)policy_num(cfg, "kernel");
    const int64_t i0 = v->now - window + 1 > 0 ? v->now - window + 1 : 0, W = v->now - i0 + 1;
    double *sum = kv_calloc((size_t)n, sizeof *sum, "snapkv scores", err);
    float *s = sum ? kv_calloc((size_t)(W * n), sizeof(float), "snapkv window scores", err) : NULL;
    if (!s) {
        free(sum);
        return err->code;
    }
    for (int64_t j = 0; v->queries && n > 0 && j < v->q_heads; j++) {
        /* the window's scores against every candidate in one product: s[W][n] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)W, (int)n, (int)D, (float)(1.0 / sqrt((double)D)),
                    v->queries + (j * v->T + i0 - v->q0) * D, (int)D, v->keys, (int)D, 0.0f, s, (int)n);
        for (int64_t r = 0, vis = 0; r < W; r++) {
            float *row = s + r * n;
            while (vis < n && v->pos[vis] <= i0 + r) vis++; /* candidates ascending: visible = a prefix */
            if (vis == 0) continue;                        /* this query sees no candidate */
            /* the weights in float (SPEC §4 allows it), their sum in double */
            double z = softmax_row_exp(row, vis, softmax_row_max(row, vis));
            softmax_accumulate(sum, row, 1.0 / (z * (double)v->q_heads), vis);
        }
    }
    const int64_t left = kernel / 2;
    const bool max_pool = policy_choice(cfg, "pool") == 1;
    for (int64_t c = 0; c < n; c++) {
        double pooled = 0.0;
        for (int64_t o = -left; o < kernel - left; o++)
            if (c + o >= 0 && c + o < n) pooled = max_pool ? fmax(pooled, sum[c + o]) : pooled + sum[c + o];
        scores[c] = v->pos[c] >= i0 ? INFINITY : max_pool ? pooled : pooled / (double)kernel;
    }
    free(sum), free(s);
    return KV_OK;
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
