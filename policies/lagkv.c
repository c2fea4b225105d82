/* lagkv: LagKV (Liang et al., "LagKV: Lag-Relative Information of the KV
 * Cache Tells Which Tokens Are Important", 2025, arXiv:2504.04704;
 * reference: kvpress kvpress/presses/lagkv_press.py, LagKVPress). No
 * attention: after the sinks (positions below `sinks`, protected), the
 * candidates in position order fall into partitions of `lag`. Partition p
 * is scored against the next one, p+1: per channel d, its rows are min-max
 * normalised with p+1's minimum and maximum, x̃_id = (x_id − min_d)/(max_d −
 * min_d) (a channel with max = min gives 0: the source divides by 0); each
 * row's spread is the standard deviation of x̃_i over the D channels
 * (n−1 divisor, as torch.std; D = 1 gives 0), and a softmax over the
 * partition's `lag` rows turns the spreads into weights, for the keys and
 * the values alike; r_i = (key weight + value weight)/2.
 *   scoring=rank     s_i = rank of r_i within its partition / lag (source
 *                    default: every partition keeps about the same share)
 *   scoring=softmax  s_i = r_i (the source's cross_scoring)
 * The last full partition and the incomplete rest after it have no next
 * partition: protected (the source's tail). With fewer than 2·lag
 * candidates after the sinks nothing is scored: s_i = i/m, recency.
 * Chunked replay partitions the current candidates afresh at every step.
 * Parameters: lag (integer >= 1, 128), scoring (rank|softmax, rank),
 * sinks (integer >= 0, 4). */
#include <math.h>
#include <stdlib.h>

#include "policies/policy.h"

enum { SCORING_RANK, SCORING_SOFTMAX };

typedef struct {
    double r;
    int64_t i;
} ranked;

static int by_weight(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    return a->r < b->r ? -1 : a->r > b->r ? 1 : (a->i > b->i) - (a->i < b->i);
}

/* The normalised spread of row `row` against the reference's channel ranges. */
static double spread(const float *row, const float *lo, const float *hi, int64_t D)
{
    double sum = 0, dev = 0;
    for (int64_t d = 0; d < D; d++) sum += hi[d] > lo[d] ? ((double)row[d] - lo[d]) / ((double)hi[d] - lo[d]) : 0.0;
    const double mean = sum / (double)D;
    for (int64_t d = 0; d < D; d++) {
        const double t = hi[d] > lo[d] ? ((double)row[d] - lo[d]) / ((double)hi[d] - lo[d]) : 0.0;
        dev += (t - mean) * (t - mean);
    }
    return D > 1 ? sqrt(dev / (double)(D - 1)) : 0.0;
}

/* Adds half the softmax, over the lag rows of x from row a, of their spread
 * after min-max normalisation against rows a+lag .. a+2lag−1, to r[0..lag).
 * lo, hi: D floats of scratch; sp: lag doubles. */
static void partition_weights(const float *x, int64_t D, int64_t a, int64_t lag, double *r, float *lo, float *hi,
                              double *sp)
{
    const float *ref = x + (a + lag) * D;
    for (int64_t d = 0; d < D; d++) lo[d] = hi[d] = ref[d];
    for (int64_t j = 1; j < lag; j++)
        for (int64_t d = 0; d < D; d++) {
            const float y = ref[j * D + d];
            lo[d] = y < lo[d] ? y : lo[d], hi[d] = y > hi[d] ? y : hi[d];
        }
    double top = -INFINITY, z = 0;
    for (int64_t i = 0; i < lag; i++) {
        sp[i] = spread(x + (a + i) * D, lo, hi, D);
        top = sp[i] > top ? sp[i] : top;
    }
    for (int64_t i = 0; i < lag; i++) z += exp(sp[i] - top);
    for (int64_t i = 0; i < lag; i++) r[i] += 0.5 * exp(sp[i] - top) / z;
}

/* r[0..lag) becomes each row's rank within the partition / lag (ties: the
 * earlier row ranks lower). */
static void ranks(double *r, int64_t lag, ranked *tmp)
{
    for (int64_t i = 0; i < lag; i++) tmp[i] = (ranked){r[i], i};
    qsort(tmp, (size_t)lag, sizeof *tmp, by_weight);
    for (int64_t k = 0; k < lag; k++) r[tmp[k].i] = (double)k / (double)lag;
}

static int lagkv_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                       kv_err *err)
{
    (void)state;
    const int64_t lag = (int64_t)policy_num(cfg, "lag"), n = v->n, D = v->D;
    const double sinks = policy_num(cfg, "sinks");
    int64_t s0 = 0;
    while (s0 < n && (double)v->pos[s0] < sinks) scores[s0++] = INFINITY;
    const int64_t m = n - s0;
    if (m < 2 * lag) { /* nothing to score: recency */
        for (int64_t i = s0; i < n; i++) scores[i] = (double)(i - s0) / (double)m;
        return KV_OK;
    }
    const int64_t end = s0 + (m / lag) * lag; /* partitions [s0 + p·lag, +lag) up to end */
    ranked *tmp = kv_calloc((size_t)lag, sizeof *tmp, "lagkv scores", err);
    double *sp = tmp ? kv_calloc((size_t)lag, sizeof *sp, "lagkv scores", err) : NULL;
    float *lo = sp ? kv_calloc((size_t)(2 * D), sizeof *lo, "lagkv scores", err) : NULL;
    if (!lo) {
        free(tmp), free(sp);
        return err->code;
    }
    for (int64_t a = s0; a + lag < end; a += lag) {
        double *r = scores + a;
        for (int64_t i = 0; i < lag; i++) r[i] = 0.0;
        partition_weights(v->keys, D, a, lag, r, lo, lo + D, sp);
        partition_weights(v->values, D, a, lag, r, lo, lo + D, sp);
        if (policy_choice(cfg, "scoring") == SCORING_RANK) ranks(r, lag, tmp);
    }
    for (int64_t i = end - lag; i < n; i++) scores[i] = INFINITY; /* the tail: no next partition */
    free(tmp), free(sp), free(lo);
    return KV_OK;
}

const policy_iface policy_lagkv = {
    .name = "lagkv",
    .summary = "LagKV: spread of keys and values min-max normalised by the next partition; sinks and tail kept",
    .params = {{.key = "lag", .kind = PARAM_NUMBER, .def = "128", .min = 1, .max = 1 << 20, .integer = true,
                .doc = "partition size (candidates, in position order)"},
               {.key = "scoring", .kind = PARAM_CHOICE, .def = "rank", .choices = "rank|softmax",
                .doc = "rank within the partition (source default) or the softmax weight itself (cross_scoring)"},
               {.key = "sinks", .kind = PARAM_NUMBER, .def = "4", .min = 0, .max = 9007199254740992.0,
                .integer = true, .doc = "absolute positions below this are kept (attention sinks)"}},
    .score = lagkv_score,
    .scores_comparable = true,
};
