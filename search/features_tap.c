/* features_tap: the driving policy wrapped (search/features.h). Its scores
 * are the inner policy's, unchanged, so sim's engine keeps exactly what the
 * driving policy keeps; over the same policy_view it also computes every
 * column (expr_feature_values, the expression language's code and state:
 * the attention history of attn_acc, keydiff's norm cache) and the targets
 * (future_attn with the oracle's code, oracle_keep and driver_keep by the
 * engine's selection rule policy_select), and spools the sampled rows of its
 * stream to a temporary file that the command's sink collects. The inner
 * policy sees the view it would see alone (no attention unless it asks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "policies/attn_hist.h"
#include "policies/select.h"
#include "policies/sets.h"
#include "search/features.h"


/* A uniform draw in [0, 1) from the seed and four integers (the sampling of steps and candidates). */
static double feat_draw(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d);

typedef struct {
    const feat_tap *tap;
    policy_config inner_cfg;
    void *inner;
    attn_hist hist;        /* attn_acc's sums */
    void *oracle;          /* future_attn's state */
    vm_norm_cache norms;
    double *vals;          /* [F][cap] the columns, then future_attn [cap], the features' tmp [2 cap + D] */
    int64_t *keep, *scratch;
    uint8_t *okeep, *dkeep;
    unsigned char *rec;    /* one row */
    int64_t cap, cap_d, steps;
    FILE *spool;
} tap_state;

static const feat_tap *tap_of(const policy_config *cfg)
{
    return (const feat_tap *)(const void *)cfg->iface;   /* iface is feat_tap's first member */
}

static policy_config inner_config(const policy_config *cfg)
{
    policy_config c = *cfg;
    c.iface = tap_of(cfg)->inner;
    return c;
}

static void tap_destroy(void *state)
{
    tap_state *st = state;
    if (!st) return;
    if (st->inner && st->tap->inner->destroy) st->tap->inner->destroy(st->inner);
    if (st->oracle) st->tap->future->destroy(st->oracle);
    attn_hist_free(&st->hist);
    vm_norm_cache_free(&st->norms);
    free(st->vals), free(st->keep), free(st->scratch), free(st->okeep), free(st->rec), free(st);
}

static int tap_create(const policy_config *cfg, void **state, kv_err *err)
{
    tap_state *st = kv_calloc(1, sizeof *st, "features: stream state", err);
    if (!st) return err->code;
    st->tap = tap_of(cfg);
    st->inner_cfg = inner_config(cfg);
    const int F = st->tap->cols->n;
    int rc = KV_OK;
    if (st->tap->inner->create) rc = st->tap->inner->create(&st->inner_cfg, &st->inner, err);
    if (!rc) rc = st->tap->future->create(&st->inner_cfg, &st->oracle, err);
    if (!rc && !(st->rec = kv_calloc(sizeof(feat_row) + sizeof(float) * (size_t)F, 1, "features: row", err)))
        rc = err->code;
    if (rc) tap_destroy(st);
    else *state = st;
    return rc;
}

/* The inner policy's view: the attention only when it asks for it (the tap always does). */
static policy_view inner_view(const tap_state *st, const policy_view *v)
{
    policy_view w = *v;
    if (!st->tap->inner->needs_attention) w.attn = NULL, w.n_queries = 0;
    return w;
}

static int tap_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)cfg;
    tap_state *st = state;
    int rc = attn_hist_update(&st->hist, v, 0, 1.0, "features", err);
    const policy_view w = inner_view(st, v);
    if (!rc && st->tap->inner->observe) rc = st->tap->inner->observe(&st->inner_cfg, st->inner, &w, err);
    return rc;
}

static int grow(tap_state *st, int64_t n, int64_t D, kv_err *err)
{
    if (n <= st->cap && D <= st->cap_d) return KV_OK;
    free(st->vals), free(st->keep), free(st->scratch), free(st->okeep);
    st->vals = NULL, st->keep = st->scratch = NULL, st->okeep = st->dkeep = NULL, st->cap = st->cap_d = 0;
    const size_t F = (size_t)st->tap->cols->n;
    st->vals = kv_calloc((F + 3) * (size_t)n + (size_t)D, sizeof(double), "features: values", err);
    st->keep = st->vals ? kv_calloc((size_t)n, sizeof(int64_t), "features: kept", err) : NULL;
    st->scratch = st->keep ? kv_calloc((size_t)n, sizeof(int64_t), "features: kept", err) : NULL;
    st->okeep = st->scratch ? kv_calloc((size_t)n, 2, "features: kept", err) : NULL;
    if (!st->okeep) return err->code;
    st->dkeep = st->okeep + n;
    st->cap = n, st->cap_d = D;
    return KV_OK;
}

/* flags[c] = 1 for the candidates policy_select keeps of scores at v's budget. */
static void kept_flags(tap_state *st, const double *scores, const policy_view *v, uint8_t *flags)
{
    memset(flags, 0, (size_t)v->n);
    const int64_t k = policy_select(scores, v->pos, v->n, v->budget, st->keep, st->scratch);
    for (int64_t i = 0; i < k; i++) flags[st->keep[i]] = 1;
}

/* The spool, registered with the sink at the stream's first row. */
static int spool_open(tap_state *st, const policy_view *v, kv_err *err)
{
    feat_sink *s = st->tap->sink;
    FILE *f = tmpfile();
    if (!f) return kv_fail(err, KV_EFAIL, "features: cannot create a temporary file for the rows");
    pthread_mutex_lock(&s->mu);
    feat_spool *grown = s->n < s->cap ? s->s : realloc(s->s, sizeof *s->s * (size_t)(s->cap ? 2 * s->cap : 64));
    if (grown && grown != s->s) s->s = grown, s->cap = s->cap ? 2 * s->cap : 64;
    if (grown) s->s[s->n++] = (feat_spool){.layer = v->layer, .kv_head = v->kv_head, .f = f};
    pthread_mutex_unlock(&s->mu);
    if (!grown) {
        fclose(f);
        return kv_fail(err, KV_EFAIL, "features: out of memory");
    }
    st->spool = f;
    return KV_OK;
}

/* The step's sampled rows into the spool. */
static int write_rows(tap_state *st, const policy_view *v, const double *fut, kv_err *err)
{
    const feat_tap *t = st->tap;
    const int F = t->cols->n;
    const size_t size = sizeof(feat_row) + sizeof(float) * (size_t)F;
    if (!st->spool && spool_open(st, v, err)) return err->code;
    for (int64_t c = 0; c < v->n; c++) {
        if (t->sample_candidates < 1.0 &&
            feat_draw(t->seed ^ 0x63616e64ull, t->trace_key, (uint64_t)(v->layer << 20 | v->kv_head),
                      (uint64_t)st->steps, (uint64_t)v->pos[c]) >= t->sample_candidates)
            continue;
        feat_row r = {.step = (int32_t)st->steps, .position = (int32_t)v->pos[c],
                      .age = (int32_t)(v->now - v->pos[c]), .future_attn = (float)fut[c],
                      .oracle_keep = st->okeep[c], .driver_keep = st->dkeep[c]};
        memcpy(st->rec, &r, sizeof r);
        float *x = (float *)(void *)(st->rec + sizeof r);
        for (int i = 0; i < F; i++) x[i] = (float)st->vals[(size_t)i * (size_t)st->cap + (size_t)c];
        if (fwrite(st->rec, size, 1, st->spool) != 1)
            return kv_fail(err, KV_EFAIL, "features: cannot write the rows to a temporary file (disk full?)");
    }
    return KV_OK;
}

/* Every column and target of a sampled step (scores: the driver's). */
static int record(tap_state *st, const policy_view *v, const double *scores, kv_err *err)
{
    const feat_cols *cols = st->tap->cols;
    int rc = grow(st, v->n, v->D, err);
    if (rc) return rc;
    const size_t cap = (size_t)st->cap;
    double *fut = st->vals + (size_t)cols->n * cap, *tmp = fut + cap;
    const expr_feat_ctx ctx = {&st->hist, st->oracle, &st->norms};
    for (int i = 0; !rc && i < cols->n; i++) rc = expr_feature_values(&cols->use[i], v, &ctx, st->vals + i * cap, tmp, err);
    const expr_feat_use fa = {EF_FUTURE_ATTN, 0, 0};
    if (!rc) rc = expr_feature_values(&fa, v, &ctx, fut, tmp, err);
    if (rc) return rc;
    kept_flags(st, fut, v, st->okeep);
    kept_flags(st, scores, v, st->dkeep);
    return write_rows(st, v, fut, err);
}

static int tap_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)cfg;
    tap_state *st = state;
    const feat_tap *t = st->tap;
    const policy_view w = inner_view(st, v);
    int rc = t->inner->score(&st->inner_cfg, st->inner, &w, scores, err);
    const bool sampled = t->sample_steps >= 1.0 ||
                         feat_draw(t->seed ^ 0x73746570ull, t->trace_key, (uint64_t)(v->layer << 20 | v->kv_head),
                                   (uint64_t)st->steps, 0) < t->sample_steps;
    if (!rc && sampled) rc = record(st, v, scores, err);
    st->steps++;
    return rc;
}

static bool tap_layer_scope(const policy_config *cfg)
{
    const policy_config c = inner_config(cfg);
    return plan_layer_scope(&c);
}

/* The inner policy's window, or the widest attn_window/attn_pooled column's. */
static int64_t tap_query_window(const policy_config *cfg)
{
    const policy_config c = inner_config(cfg);
    const feat_cols *cols = tap_of(cfg)->cols;
    int64_t w = plan_policy_inputs(&c).query_window;
    for (int i = 0; i < cols->n; i++)
        if (EXPR_FEATURES[cols->use[i].id].queries && (int64_t)cols->use[i].a > w) w = (int64_t)cols->use[i].a;
    return w;
}

int feat_tap_init(feat_tap *t, const policy_config *driver, const feat_cols *cols, policy_config *out, kv_err *err)
{
    const policy_iface *in = driver->iface;
    if (!plan_evicts(driver))
        return kv_fail(err, KV_EUSAGE, "features: --policy %s never evicts: there are no eviction steps to record",
                       in->name);
    t->inner = in, t->cols = cols, t->future = policy_find(POLICY_SET_FUTURE);
    if (!t->future) return kv_fail(err, KV_EFAIL, "features: the future attention's policy is not registered");
    t->iface = *in;   /* the name, parameters and presets: sim reads the configuration through them */
    t->iface.needs_attention = true;   /* attn_last, attn_acc */
    t->iface.create = tap_create, t->iface.destroy = tap_destroy, t->iface.score = tap_score;
    t->iface.observe = tap_observe, t->iface.query_window = tap_query_window;
    t->iface.layer_scope = tap_layer_scope;   /* the driver's scope (false when it has none) */
    t->iface.offline_only = true, t->iface.offline_for = NULL;   /* future_attn reads the future */
    *out = *driver;
    out->iface = &t->iface;
    return KV_OK;
}

int feat_sink_init(feat_sink *s, kv_err *err)
{
    memset(s, 0, sizeof *s);
    if (pthread_mutex_init(&s->mu, NULL) != 0) return kv_fail(err, KV_EFAIL, "features: cannot create a mutex");
    return KV_OK;
}

void feat_sink_free(feat_sink *s)
{
    for (int i = 0; i < s->n; i++) fclose(s->s[i].f);
    free(s->s);
    pthread_mutex_destroy(&s->mu);
    memset(s, 0, sizeof *s);
}

static int by_stream(const void *a, const void *b)
{
    const feat_spool *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return (x->kv_head > y->kv_head) - (x->kv_head < y->kv_head);
}

void feat_sink_sort(feat_sink *s)
{
    if (s->n > 1) qsort(s->s, (size_t)s->n, sizeof *s->s, by_stream);
}

static uint64_t mix(uint64_t x)   /* splitmix64's finaliser */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double feat_draw(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = mix(seed);
    h = mix(h ^ a), h = mix(h ^ b), h = mix(h ^ c), h = mix(h ^ d);
    return (double)(h >> 11) * 0x1.0p-53;
}

uint64_t feat_key(const char *text)   /* FNV-1a */
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}
