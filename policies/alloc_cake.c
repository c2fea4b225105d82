/* cake: CAKE's layer budgets (Qin et al., "CAKE: Cascading and Adaptive KV
 * Cache Eviction with Layer Preferences", ICLR 2025; its code's
 * calculate_entropy and the variance over the window's queries). Layer l's
 * preference P_l = H_l^(1/tau1) · V_l^(1/tau2), from the chunk's "window
 * attention": the softmax weights a_ij of the chunk's queries i (the replay
 * hands the mean over each kv head's query heads) over the candidates j that
 * are not in the chunk (CAKE's window keys are left out the same way):
 *   H_l = −Σ_g Σ_i Σ_j a_ij · ln(a_ij + 1e−10)   (spatial dispersion)
 *   V_l = Σ_g Σ_j var_i(a_ij)                   (temporal shift; unbiased,
 *                                                  0 for a one-query chunk)
 * recomputed at every evicting step of the model-wide scope (all L·K
 * streams in lock step). The shares: each stream keeps 1 row first, and the
 * rest of L·K·N is split in proportion to its layer's P_l (each kv head of a
 * layer alike), water-filling: a stream that would exceed its candidates
 * keeps them all and the others are split again; what the floors leave goes
 * one row each to the open streams of the largest P_l (ties to the lower
 * stream), pass after pass. When every P_l is 0 (a one-query chunk: no variance) or not
 * finite, the layers share alike. Within a stream the policy still chooses
 * which rows stay.
 * Parameters: tau1 (default 1.6), tau2 (default 0.6): the CAKE repository's
 * temperatures for Llama-3.1-8B at a 128-token budget (config/model2tau.json;
 * the paper tunes them per model and budget). */
#include <math.h>

#include "policies/alloc.h"

/* Entropy and summed variance of the stream's window attention. */
static void spread(const float *a, int64_t nq, int64_t n, double *H, double *V)
{
    const int64_t cols = n - nq;   /* the candidates before the chunk */
    for (int64_t j = 0; j < cols; j++) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < nq; i++) {
            const double v = a[i * n + j];
            *H -= v * log(v + 1e-10);
            sum += v;
        }
        const double mean = sum / (double)nq;
        for (int64_t i = 0; i < nq; i++) sq += (a[i * n + j] - mean) * (a[i * n + j] - mean);
        if (nq > 1) *V += sq / (double)(nq - 1);
    }
}

/* w[x] = P of x's layer; all 1 when they are all 0 or one is not finite. */
static void preferences(const alloc_config *ac, const alloc_scope *s, double *w)
{
    const int64_t S = s->n_streams, K = s->per_layer;
    const double tau1 = alloc_num(ac, "tau1"), tau2 = alloc_num(ac, "tau2");
    double total = 0;
    for (int64_t l = 0; l < S / K; l++) {
        double H = 0, V = 0;
        for (int64_t g = 0; g < K; g++) spread(s->attn[l * K + g], s->n_queries[l * K + g], s->n[l * K + g], &H, &V);
        const double P = pow(H, 1 / tau1) * pow(V, 1 / tau2);
        for (int64_t g = 0; g < K; g++) w[l * K + g] = P;
        total += P;
    }
    if (!(total > 0) || !isfinite(total))
        for (int64_t x = 0; x < S; x++) w[x] = 1;
}

static void cake_shares(const alloc_config *ac, const alloc_scope *s, alloc_buf *b, int64_t *counts)
{
    const int64_t S = s->n_streams;
    double *w = b->weight;
    KV_ASSERT(S <= ALLOC_MAX_STREAMS && s->attn && S % s->per_layer == 0);
    preferences(ac, s, w);
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
}

const alloc_iface alloc_cake = {
    .name = "cake",
    .summary = "CAKE: layer shares of L*K*N proportional to entropy^(1/tau1) * variance^(1/tau2) of the chunk's "
               "attention",
    .params = {
        {.key = "tau1", .kind = PARAM_NUMBER, .def = "1.6", .min = 0.01, .max = 100,
         .doc = "temperature of the attention's entropy (spatial dispersion)"},
        {.key = "tau2", .kind = PARAM_NUMBER, .def = "0.6", .min = 0.01, .max = 100,
         .doc = "temperature of its variance over the chunk's queries (temporal shift)"},
    },
    .kind = ALLOC_DYNAMIC_MODEL,
    .needs_attention = true,
    .shares = cake_shares,
};
