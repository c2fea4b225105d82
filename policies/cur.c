/* cur: CurDKV's local leverage (Sengupta et al., "Value-Guided KV
 * Compression for LLMs via Approximated CUR Decomposition", 2025,
 * arXiv:2509.15038; reference: kvpress kvpress/presses/cur_press.py,
 * CURPress with its local approximation and no random projection).
 * The candidates, in position order, fall into consecutive windows of
 * `window` (the first starts at candidate 0, the last may be short); with
 * k2_i = ‖k_i‖², v2_i = ‖v_i‖², each divided by its window's sum:
 *   leverage=kv_product  s_i = k2_i/Σ_w k2 · v2_i/Σ_w v2   (default)
 *   leverage=kv_avg      s_i = (k2_i/Σ_w k2 + v2_i/Σ_w v2)/2
 *   leverage=key | value the one factor
 * A window whose sum is 0 gives its candidates 0 for that factor (the
 * source divides 0 by 0). Then, as kvpress, every s_i is divided by the sum over
 * all candidates: within a head no ranking changes, but a head-wise budget
 * (adakv) compares heads on these shares. Positions below `sinks` are protected.
 * Parameters: leverage (kv_avg|key|kv_product|value, kv_product), sinks
 * (integer >= 0, 4), window (integer >= 1, 16). */
#include <math.h>
#include <stdlib.h>

#include "policies/policy.h"
#include "core/vecmath.h"

enum { LEV_KV_AVG, LEV_KEY, LEV_KV_PRODUCT, LEV_VALUE };

/* out[i] = ‖row i‖² / Σ_window ‖row‖² over consecutive windows of w rows. */
static void window_shares(const float *rows, int64_t n, int64_t D, int64_t w, double *out)
{
    for (int64_t a = 0; a < n; a += w) {
        const int64_t b = a + w < n ? a + w : n;
        double sum = 0;
        for (int64_t i = a; i < b; i++) {
            const double x = vm_norm(rows + i * D, D);
            out[i] = x * x, sum += x * x;
        }
        for (int64_t i = a; i < b; i++) out[i] = sum > 0 ? out[i] / sum : 0.0;
    }
}

static int cur_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)state;
    const int lev = policy_choice(cfg, "leverage");
    const int64_t w = (int64_t)policy_num(cfg, "window"), n = v->n;
    const double sinks = policy_num(cfg, "sinks");
    double *v2 = kv_calloc((size_t)n + 1, sizeof *v2, "cur scores", err);
    if (!v2) return err->code;
    window_shares(v->keys, n, v->D, w, scores);
    window_shares(v->values, n, v->D, w, v2);
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double kf = scores[i], vf = v2[i];
        scores[i] = lev == LEV_KEY ? kf : lev == LEV_VALUE ? vf : lev == LEV_KV_AVG ? 0.5 * (kf + vf) : kf * vf;
        total += scores[i];
    }
    for (int64_t i = 0; i < n; i++) { /* shares of the total (all zero: left 0, where the source divides 0 by 0) */
        if (total > 0) scores[i] /= total;
        if ((double)v->pos[i] < sinks) scores[i] = INFINITY;
    }
    free(v2);
    return KV_OK;
}

const policy_iface policy_cur = {
    .name = "cur",
    .summary = "CurDKV: key and value leverage (squared norms over their 16-candidate window's sum), sinks kept",
    .params = {{.key = "leverage", .kind = PARAM_CHOICE, .def = "kv_product", .choices = "kv_avg|key|kv_product|value",
                .doc = "which leverage: their product (CurDKV), mean, or keys or values alone"},
               {.key = "sinks", .kind = PARAM_NUMBER, .def = "4", .min = 0, .max = 9007199254740992.0,
                .integer = true, .doc = "absolute positions below this are kept (attention sinks)"},
               {.key = "window", .kind = PARAM_NUMBER, .def = "16", .min = 1, .max = 1 << 20, .integer = true,
                .doc = "candidates per window (consecutive, in position order)"}},
    .score = cur_score,
    .scores_comparable = true,
};
