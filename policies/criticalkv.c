/* criticalkv: CriticalKV (Feng et al., "Identify Critical KV Cache in LLM
 * Inference from an Output Perturbation Perspective", 2025, arXiv 2502.03805;
 * kvpress CriticalKVPress, kvpress/presses/criticalkv_press.py).
 * Two stages over a base policy's scores b_i (the base with its defaults):
 * the top ⌊first·N⌋ candidates by b are protected (ties: the later position);
 * the rest rank by
 *   s_i = (b_i / q + eps) · mean_{h in the kv group} ‖W_o,h v_i‖₁
 * with b_i / q the base's score on its kvpress press's scale, which eps is set for: q is the number of
 * window queries snapkv sums (SnapKVPress averages them), 1 for the other bases;
 * with W_o,h the columns of the layer's output projection that query head h
 * reads (the trace's optional /wo, `capture --record wo`; in-model the
 * model's). Without W_o (a trace without /wo, or wo=absent) the projection is
 * left out: ‖v_i‖₁, and sim labels such runs wo=absent.
 * Parameters: base (snapkv), eps (1e-4), first (0.5), wo (model). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policy.h"

#define CRITICALKV_BASES "snapkv|expected_attention|h2o|tova|keydiff|knorm|capkv|primekv|random|streaming"

/* The bases, in CRITICALKV_BASES's order (directly, as chunkkv's: not through the registry). */
extern const policy_iface policy_snapkv, policy_expected_attention, policy_h2o, policy_tova, policy_keydiff,
    policy_knorm, policy_capkv, policy_primekv, policy_random, policy_streaming;
static const policy_iface *const BASES[] = {&policy_snapkv,  &policy_expected_attention, &policy_h2o,
                                            &policy_tova,    &policy_keydiff,            &policy_knorm,
                                            &policy_capkv,   &policy_primekv,            &policy_random,
                                            &policy_streaming};

typedef struct {
    policy_base base;   /* first (policy_wrapper_create) */
    double *w;          /* [G][dim][D] the group's W_o columns in double, read at the first score */
    int64_t w_heads;
    /* the projected norm of each position's value, by position (NaN: not yet computed): a value
     * never changes, so each is projected once, when it first becomes a candidate */
    double *pn_at;
    int64_t pn_cap;
} criticalkv_state;

static int criticalkv_create(const policy_config *cfg, void **state, kv_err *err)
{
    return policy_wrapper_create(cfg, BASES, sizeof(criticalkv_state), state, err);
}

static void criticalkv_destroy(void *state)
{
    criticalkv_state *s = state;
    if (!s) return;
    policy_base_close(&s->base);
    free(s->w), free(s->pn_at), free(s);
}

/* pn[n] = mean over the group's query heads of ‖W_o,h v_i‖₁ (one dgemm per head over the candidates not
 * projected at an earlier step, the others from pn_at), or ‖v_i‖₁ without W_o. */
static int projected_norm(const policy_config *cfg, criticalkv_state *s, const policy_view *v, double *pn,
                          kv_err *err)
{
    const int64_t n = v->n, D = v->D, dim = v->wo_dim, G = v->q_heads;
    if (!v->wo || policy_choice(cfg, "wo") == 1) {
        for (int64_t i = 0; i < n; i++) {
            double a = 0.0;
            for (int64_t d = 0; d < D; d++) a += fabs((double)v->values[i * D + d]);
            pn[i] = a;
        }
        return KV_OK;
    }
    if (!s->w) { /* W_o does not change: the group's columns once, in double */
        if (!(s->w = kv_calloc((size_t)(G * dim * D), sizeof(double), "criticalkv W_o", err))) return err->code;
        for (int64_t h = 0; h < G; h++)
            for (int64_t r = 0; r < dim; r++)
                for (int64_t d = 0; d < D; d++)
                    s->w[(h * dim + r) * D + d] = v->wo[r * v->wo_ld + (v->q_head0 + h) * D + d];
        s->w_heads = G;
    }
    if (v->now >= s->pn_cap) { /* positions up to now, NaN until projected */
        const int64_t cap = v->now + 1 > 2 * s->pn_cap ? v->now + 1 : 2 * s->pn_cap;
        double *grown = realloc(s->pn_at, sizeof(double) * (size_t)cap);
        if (!grown) return kv_fail(err, KV_EFAIL, "criticalkv: out of memory for the projected norms");
        for (int64_t p = s->pn_cap; p < cap; p++) grown[p] = NAN;
        s->pn_at = grown, s->pn_cap = cap;
    }
    int64_t m = 0; /* the candidates not projected yet */
    for (int64_t i = 0; i < n; i++) m += isnan(s->pn_at[v->pos[i]]);
    if (m > 0) {
        double *V = kv_calloc((size_t)(m * D + m * dim + m), sizeof(double), "criticalkv projections", err);
        if (!V) return err->code;
        double *P = V + m * D, *acc = P + m * dim;
        for (int64_t i = 0, j = 0; i < n; i++) {
            if (!isnan(s->pn_at[v->pos[i]])) continue;
            for (int64_t d = 0; d < D; d++) V[j * D + d] = v->values[i * D + d];
            j++;
        }
        for (int64_t h = 0; h < s->w_heads; h++) {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)dim, (int)D, 1.0, V, (int)D,
                        s->w + h * dim * D, (int)D, 0.0, P, (int)dim);
            for (int64_t j = 0; j < m; j++) {
                double a = 0.0;
                for (int64_t r = 0; r < dim; r++) a += fabs(P[j * dim + r]);
                acc[j] += a / (double)s->w_heads;
            }
        }
        for (int64_t i = 0, j = 0; i < n; i++)
            if (isnan(s->pn_at[v->pos[i]])) s->pn_at[v->pos[i]] = acc[j++];
        free(V);
    }
    for (int64_t i = 0; i < n; i++) pn[i] = s->pn_at[v->pos[i]];
    return KV_OK;
}

/* q of the header: how many queries the base's score sums where its kvpress press averages them (snapkv:
 * the window's, min(window, now + 1)), else 1; eps is added on that scale (docs/policies.md#criticalkv) */
static double source_scale(const criticalkv_state *s, const policy_view *v)
{
    if (s->base.cfg.iface != &policy_snapkv) return 1.0;
    const int64_t w = (int64_t)policy_num(&s->base.cfg, "window");
    return (double)(w < v->now + 1 ? w : v->now + 1);
}

struct rank_item {
    double s;
    int64_t pos, idx;
};

/* Descending by score, ties by the later position. */
static int by_score_desc(const void *a, const void *b)
{
    const struct rank_item *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->pos < y->pos) - (x->pos > y->pos);
}

static int criticalkv_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                            kv_err *err)
{
    criticalkv_state *s = state;
    const int64_t n = v->n, k1 = (int64_t)floor(policy_num(cfg, "first") * (double)v->budget + 1e-9);
    const double eps = policy_num(cfg, "eps"), q = source_scale(s, v);
    struct rank_item *it = kv_calloc((size_t)n + 1, sizeof *it, "criticalkv ranking", err);
    double *pn = it ? kv_calloc((size_t)n + 1, sizeof *pn, "criticalkv norms", err) : NULL;
    int rc = pn ? policy_base_score(&s->base, v, scores, err) : err->code;
    if (!rc) rc = projected_norm(cfg, s, v, pn, err);
    if (!rc) {
        for (int64_t i = 0; i < n; i++) it[i] = (struct rank_item){scores[i], v->pos[i], i};
        qsort(it, (size_t)n, sizeof *it, by_score_desc);
        for (int64_t i = 0; i < n; i++) /* stage 2; the base's ±∞ stay (a zero value would make ∞·0 NaN) */
            scores[i] = isinf(scores[i]) ? scores[i] : (scores[i] / q + eps) * pn[i];
        for (int64_t r = 0; r < k1 && r < n; r++) scores[it[r].idx] = INFINITY; /* stage 1 */
    }
    free(it), free(pn);
    return rc;
}

/* wo=model reads the model's W_o; wo=absent does not */
static bool criticalkv_needs_wo(const policy_config *cfg)
{
    return policy_choice(cfg, "wo") == 0;
}

static int64_t criticalkv_query_window(const policy_config *cfg)
{
    return policy_base_query_window(cfg, BASES);
}

const policy_iface policy_criticalkv = {
    .name = "criticalkv",
    .summary = "CriticalKV: the top first·N by a base policy kept, the rest by (score + eps)·‖W_o v‖₁ "
               "(W_o from /wo)",
    .params = {{.key = "base", .kind = PARAM_CHOICE, .def = "snapkv", .choices = CRITICALKV_BASES,
                .policy_valued = true,
                .doc = "the base policy (with its defaults, or an --alias of one) whose scores are rescaled"},
               {.key = "eps", .kind = PARAM_NUMBER, .def = "0.0001", .min = 0, .max = 1e6,
                .doc = "added to the base score before the rescaling"},
               {.key = "first", .kind = PARAM_NUMBER, .def = "0.5", .min = 0, .max = 1,
                .doc = "fraction of N kept by the base score alone (stage 1)"},
               {.key = "wo", .kind = PARAM_CHOICE, .def = "model", .choices = "model|absent",
                .doc = "the model's W_o (sim: the trace's /wo; relabelled absent when it has none), "
                       "or ‖v‖₁ alone"}},
    .needs_attention = true, /* for an attention base (h2o, tova) */
    .create = criticalkv_create,
    .destroy = criticalkv_destroy,
    .score = criticalkv_score,
    .observe = policy_wrapper_observe,
    .query_window = criticalkv_query_window,
    /* the projected norms scale with each head's values and W_o columns */
    .scores_comparable = false,
    .needs_wo = true,
    .needs_wo_for = criticalkv_needs_wo,
    .without_wo = "wo=absent",
};
