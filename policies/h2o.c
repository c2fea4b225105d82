/* h2o: Heavy-Hitter Oracle (Zhang et al., "H2O: Heavy-Hitter Oracle for
 * Efficient Generative Inference of Large Language Models", NeurIPS 2023).
 * s_j = the attention candidate j has received since it entered the cache,
 * summed over every query of every chunk (observed at step 3 of SPEC §4),
 * averaged over the query heads of the kv group; the most recent
 * ⌊recent·N⌋ candidates are protected (SPEC §5).
 * Parameters: recent (0..1, default 0.5). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policy.h"
#include "policies/select.h"

/* The accumulated attention of the candidates seen at the last observe(),
 * by ascending position: memory follows the cache, not the sequence (an
 * evicted position never comes back, so its sum is dropped). */
typedef struct {
    int64_t *pos, *npos;   /* [cap] positions; the next step's */
    double *acc, *nacc;    /* [cap] their sums; the next step's */
    int64_t n, cap;
} h2o_state;

static int h2o_create(const policy_config *cfg, void **state, kv_err *err)
{
    (void)cfg;
    h2o_state *s = kv_calloc(1, sizeof *s, "h2o state", err);
    if (!s) return err->code;
    *state = s;
    return KV_OK;
}

static void h2o_destroy(void *state)
{
    h2o_state *s = state;
    if (s) free(s->pos), free(s->npos), free(s->acc), free(s->nacc);
    free(s);
}

/* Room for n sums in all four arrays. On failure every array stays valid
 * (realloc keeps what it could not grow) and cap unchanged. */
static int ensure(h2o_state *s, int64_t n, kv_err *err)
{
    if (n <= s->cap) return KV_OK;
    int64_t cap = s->cap ? s->cap : 256;
    while (cap < n) cap *= 2;
    int64_t *p = realloc(s->pos, sizeof(int64_t) * (size_t)cap);
    if (p) s->pos = p;
    int64_t *np = p ? realloc(s->npos, sizeof(int64_t) * (size_t)cap) : NULL;
    if (np) s->npos = np;
    double *a = np ? realloc(s->acc, sizeof(double) * (size_t)cap) : NULL;
    if (a) s->acc = a;
    double *na = a ? realloc(s->nacc, sizeof(double) * (size_t)cap) : NULL;
    if (!na)
        return kv_fail(err, KV_EFAIL, "h2o: out of memory for the attention sums of %lld candidates",
                       (long long)n);
    s->nacc = na;
    s->cap = cap;
    return KV_OK;
}

/* out[c] = the sum held for v->pos[c] (0 for a new candidate); both lists ascend. */
static void lookup(const h2o_state *s, const policy_view *v, double *out)
{
    for (int64_t c = 0, i = 0; c < v->n; c++) {
        while (i < s->n && s->pos[i] < v->pos[c]) i++;
        out[c] = i < s->n && s->pos[i] == v->pos[c] ? s->acc[i] : 0.0;
    }
}

static int h2o_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)cfg;
    h2o_state *s = state;
    if (!v->attn || v->n == 0) return KV_OK;
    int rc = ensure(s, v->n, err);
    if (rc) return rc;
    lookup(s, v, s->nacc);
    memcpy(s->npos, v->pos, sizeof(int64_t) * (size_t)v->n);
    for (int64_t r = 0; r < v->n_queries; r++) {
        const float *row = v->attn + r * v->n;
        for (int64_t c = 0; c < v->n; c++) s->nacc[c] += (double)row[c];
    }
    int64_t *tp = s->pos;
    double *ta = s->acc;
    s->pos = s->npos, s->acc = s->nacc, s->npos = tp, s->nacc = ta, s->n = v->n;
    return KV_OK;
}

static int h2o_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                     kv_err *err)
{
    (void)err;
    h2o_state *s = state;
    if (s) lookup(s, v, scores);
    else for (int64_t c = 0; c < v->n; c++) scores[c] = 0.0;
    policy_protect_recent(v, policy_recent_count(policy_num(cfg, "recent"), v->budget), scores);
    return KV_OK;
}

const policy_iface policy_h2o = {
    .name = "h2o",
    .summary = "heavy hitters: keeps the candidates with the most accumulated attention, recent ones protected",
    .params = {{.key = "recent", .kind = PARAM_NUMBER, .def = "0.5", .min = 0, .max = 1,
                .doc = "fraction of the budget kept for the most recent candidates"}},
    .needs_attention = true,
    .create = h2o_create,
    .destroy = h2o_destroy,
    .score = h2o_score,
    .observe = h2o_observe,
    .scores_comparable = true,
};
