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

#include "policies/registry.h"

typedef struct {
    double *acc;   /* [cap] accumulated attention by position */
    int64_t cap;
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
    if (s) free(s->acc);
    free(s);
}

/* Grows acc to cover position `pos` (zero-filled). */
static void ensure(h2o_state *s, int64_t pos)
{
    if (pos < s->cap) return;
    int64_t cap = s->cap ? s->cap : 1024;
    while (cap <= pos) cap *= 2;
    double *acc = realloc(s->acc, sizeof(double) * (size_t)cap);
    KV_ASSERT(acc); /* the interface's observe has no error channel */
    memset(acc + s->cap, 0, sizeof(double) * (size_t)(cap - s->cap));
    s->acc = acc, s->cap = cap;
}

static void h2o_observe(const policy_config *cfg, void *state, const policy_view *v)
{
    (void)cfg;
    h2o_state *s = state;
    if (!v->attn || v->n == 0) return;
    ensure(s, v->pos[v->n - 1]);
    for (int64_t r = 0; r < v->n_queries; r++) {
        const float *row = v->attn + r * v->n;
        for (int64_t c = 0; c < v->n; c++) s->acc[v->pos[c]] += (double)row[c];
    }
}

static void h2o_score(const policy_config *cfg, void *state, const policy_view *v, double *scores)
{
    h2o_state *s = state;
    for (int64_t c = 0; c < v->n; c++) scores[c] = s && v->pos[c] < s->cap ? s->acc[v->pos[c]] : 0.0;
    policy_protect_recent(v, policy_recent_count(policy_num(cfg, "recent"), v->budget), scores);
}

const policy_iface policy_h2o = {
    .name = "h2o",
    .summary = "heavy hitters: keeps the candidates with the most accumulated attention, recent ones protected",
    .n_params = 1,
    .params = {{.key = "recent", .kind = PARAM_NUMBER, .def = "0.5", .min = 0, .max = 1,
                .doc = "fraction of the budget kept for the most recent candidates"}},
    .needs_attention = true,
    .create = h2o_create,
    .destroy = h2o_destroy,
    .score = h2o_score,
    .observe = h2o_observe,
};
