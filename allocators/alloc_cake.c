/* cake: CAKE's layer budgets (Qin et al., "CAKE: Cascading and Adaptive KV
 * Cache Eviction with Layer Preferences", ICLR 2025; its code's
 * calculate_entropy and the variance over the window's queries). Layer l's
 * preference P_l = H_l^(1/tau1) · V_l^(1/tau2), from its "window attention":
 * the softmax weights a_ij of the last `window` query positions i up to now
 * (the trace's queries, cached or not, as snapkv's window) over the
 * candidates they can see, averaged over each stream's query heads, at the
 * candidates j before the window (CAKE leaves the window's own keys out):
 *   H_l = −Σ_streams Σ_i Σ_j a_ij · ln(a_ij + 1e−10)   (spatial dispersion)
 *   V_l = Σ_streams Σ_j var_i(a_ij)                    (temporal shift;
 *                                                       unbiased, 0 for one query)
 * recomputed at every evicting step of the model-wide scope (all streams in
 * lock step). The shares: each stream keeps 1 row first, and the rest of the
 * total is split in proportion to its layer's P_l (each stream of a layer
 * alike), water-filling: a stream that would exceed its candidates keeps
 * them all and the others are split again; what the floors leave goes one
 * row each to the open streams of the largest P_l (ties to the lower
 * stream), pass after pass. When every P_l is 0 or one is not finite, the
 * layers share alike. Within a stream the policy still chooses the rows.
 * Parameters: tau1 (default 1.6), tau2 (default 0.6): the CAKE repository's
 * temperatures for Llama-3.1-8B at a 128-token budget (config/model2tau.json;
 * the paper tunes them per model and budget); window (default 32, CAKE's). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "core/softmax.h"
#include "allocators/alloc.h"

/* Adds stream v's window entropy to *H and summed variance to *V. */
static void spread(const policy_view *v, int64_t window, alloc_buf *b, double *H, double *V)
{
    const int64_t n = v->n, D = v->D, i0 = v->now - window + 1 > 0 ? v->now - window + 1 : 0, W = v->now - i0 + 1;
    int64_t cols = 0, vis = 0;
    while (cols < n && v->pos[cols] < i0) cols++;   /* the candidates before the window */
    if (!v->queries || cols == 0) return;
    double *mean = b->work, *sum = b->work + n, *sq = b->work + 2 * n;
    memset(sum, 0, sizeof *sum * (size_t)cols), memset(sq, 0, sizeof *sq * (size_t)cols);
    for (int64_t i = i0; i <= v->now; i++) {
        while (vis < n && v->pos[vis] <= i) vis++;   /* candidates ascending: visible = a prefix */
        memset(mean, 0, sizeof *mean * (size_t)cols);
        for (int64_t j = 0; j < v->q_heads; j++) {
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)vis, (int)D, (float)(1.0 / sqrt((double)D)), v->keys,
                        (int)D, v->queries + (j * v->T + i - v->q0) * D, 1, 0.0f, b->row, 1);
            const double z = softmax_row_exp(b->row, vis, softmax_row_max(b->row, vis));
            softmax_accumulate(mean, b->row, 1.0 / (z * (double)v->q_heads), cols);
        }
        for (int64_t c = 0; c < cols; c++) {
            *H -= mean[c] * log(mean[c] + 1e-10);
            sum[c] += mean[c], sq[c] += mean[c] * mean[c];
        }
    }
    for (int64_t c = 0; W > 1 && c < cols; c++) {
        const double var = (sq[c] - sum[c] * sum[c] / (double)W) / (double)(W - 1);
        *V += var > 0 ? var : 0;
    }
}

/* w[x] = P of x's layer; all 1 when they are all 0 or one is not finite. */
static void preferences(const alloc_config *ac, const alloc_scope *s, alloc_buf *b, double *w)
{
    const int64_t S = s->n_streams, per = s->per_layer, window = (int64_t)alloc_num(ac, "window");
    const double tau1 = alloc_num(ac, "tau1"), tau2 = alloc_num(ac, "tau2");
    double total = 0;
    for (int64_t l = 0; l < S / per; l++) {
        double H = 0, V = 0;
        for (int64_t x = l * per; x < (l + 1) * per; x++) spread(&s->views[x], window, b, &H, &V);
        const double P = pow(H, 1 / tau1) * pow(V, 1 / tau2);
        for (int64_t x = l * per; x < (l + 1) * per; x++) w[x] = P;
        total += P;
    }
    if (!(total > 0) || !isfinite(total))
        for (int64_t x = 0; x < S; x++) w[x] = 1;
}

static int cake_shares(const alloc_config *ac, const alloc_scope *s, alloc_buf *b, int64_t *counts, kv_err *err)
{
    (void)err;
    const int64_t S = s->n_streams;
    double *w = b->weight;
    KV_ASSERT(S <= ALLOC_MAX_STREAMS && s->views && S % s->per_layer == 0);
    preferences(ac, s, b, w);
    int64_t left = s->total;
    for (int64_t x = 0; x < S; x++) counts[x] = 1, left--;
    for (bool saturated = true; left > 0 && saturated;) {   /* water-filling */
        double W = 0;
        for (int64_t x = 0; x < S; x++)
            if (counts[x] < s->n[x]) W += w[x];
        const int64_t R = left;
        saturated = false;
        for (int64_t x = 0; x < S && W > 0; x++) {
            if (counts[x] >= s->n[x]) continue;
            int64_t add = (int64_t)floor((double)R * w[x] / W);
            if (add >= s->n[x] - counts[x]) add = s->n[x] - counts[x], saturated = true;
            counts[x] += add, left -= add;
        }
        if (!(W > 0)) break;
    }
    bool given[ALLOC_MAX_STREAMS];
    while (left > 0) {   /* what is left: one row each, the largest weight first, pass after pass */
        for (int64_t x = 0; x < S; x++) given[x] = false;
        for (int64_t best = 0; left > 0 && best >= 0; left -= best >= 0) {
            best = -1;
            for (int64_t x = 0; x < S; x++)
                if (!given[x] && counts[x] < s->n[x] && (best < 0 || w[x] > w[best])) best = x;
            if (best >= 0) given[best] = true, counts[best]++;
        }
    }
    return KV_OK;
}

static int64_t cake_query_window(const alloc_config *ac)
{
    return (int64_t)alloc_num(ac, "window");
}

const alloc_iface alloc_cake = {
    .name = "cake",
    .summary = "CAKE: layer shares of L*K*N proportional to entropy^(1/tau1) * variance^(1/tau2) of the "
               "window's attention",
    .params = {
        {.key = "tau1", .kind = PARAM_NUMBER, .def = "1.6", .min = 0.01, .max = 100,
         .doc = "temperature of the attention's entropy (spatial dispersion)"},
        {.key = "tau2", .kind = PARAM_NUMBER, .def = "0.6", .min = 0.01, .max = 100,
         .doc = "temperature of its variance over the window's queries (temporal shift)"},
        {.key = "window", .kind = PARAM_NUMBER, .def = "32", .min = 2, .max = 1 << 20, .integer = true,
         .doc = "the last `window` query positions whose attention measures a layer"},
    },
    .kind = ALLOC_DYNAMIC_MODEL,
    .needs_queries = true,
    .shares = cake_shares,
    .query_window = cake_query_window,
};
