/* Policies (docs/policies.md): each one on small candidate sets whose right kept set
 * is known by construction, then invariants every registered policy must
 * hold on random candidate sets (new policies are covered automatically). */
#include "testutil.h"

#include <math.h>

#include "core/rng.h"
#include "policies/policy.h"
#include "policies/select.h"

enum { MAXN = 256, MAXD = 64 };

typedef struct {
    int64_t n, D;
    int64_t pos[MAXN];
    float keys[MAXN * MAXD], values[MAXN * MAXD];
    float attn[4 * MAXN];
    float kvzip[4 * MAXN];   /* /attention/kvzip of one query head, by position (positions < 4 MAXN) */
    double scores[MAXN];
    int64_t keep[MAXN], scratch[MAXN];
} cands;

static void init_cands(cands *c, int64_t n, int64_t D)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->D = D;
    for (int64_t j = 0; j < n; j++) c->pos[j] = j;
}

static void set_row(float *rows, int64_t D, int64_t j, const float *x)
{
    memcpy(rows + j * D, x, (size_t)D * sizeof *x);
}

/* Scores c with `spec` at `budget` and returns how many were kept (c->keep). */
static int64_t run_policy(const char *spec, cands *c, int64_t budget, int64_t step)
{
    policy_config cfg;
    kv_err err = {0};
    int rc = policy_parse(spec, &cfg, &err);
    if (rc) printf("# %s: %s\n", spec, err.msg);
    assert_int_equal(rc, KV_OK);
    void *state = NULL;
    if (cfg.iface->create) assert_int_equal(cfg.iface->create(&cfg, &state, &err), KV_OK);
    policy_view v = {.n = c->n, .D = c->D, .pos = c->pos, .keys = c->keys, .values = c->values,
                     .budget = budget, .now = c->n ? c->pos[c->n - 1] : 0, .layer = 1, .kv_head = 2,
                     .step = step};
    if (cfg.iface->needs_attention) {
        v.n_queries = 1;
        v.attn = c->attn;
    }
    if (cfg.iface->needs_kvzip) { /* weights in [0, 1), by position */
        v.q_heads = 1, v.T = c->n ? c->pos[c->n - 1] + 1 : 0, v.kvzip = c->kvzip;
        assert_true(v.T <= 4 * MAXN);
        for (int64_t t = 0; t < v.T; t++) c->kvzip[t] = (float)fmod(0.618 * (double)t, 1.0);
    }
    assert_int_equal(cfg.iface->score(&cfg, state, &v, c->scores, &err), KV_OK);
    if (cfg.iface->destroy) cfg.iface->destroy(state);
    return policy_select(c->scores, c->pos, c->n, budget, c->keep, c->scratch);
}

static void assert_kept(const cands *c, int64_t got, const int64_t *want, int64_t n_want)
{
    int same = got == n_want;
    for (int64_t i = 0; same && i < n_want; i++) same = c->keep[i] == want[i];
    if (!same) {
        printf("# kept:");
        for (int64_t i = 0; i < got; i++) printf(" %lld", (long long)c->keep[i]);
        printf("   want:");
        for (int64_t i = 0; i < n_want; i++) printf(" %lld", (long long)want[i]);
        printf("\n");
    }
    assert_true(same);
}

/* Six keys: five near +e1 with norms 1..2, one (index 2) pointing at -e1. */
static void tight_cluster(cands *c)
{
    init_cands(c, 6, 4);
    const float k[6][4] = {{1.0f, 0.02f, 0, 0},   {1.3f, 0, 0.03f, 0}, {-1.0f, 0.1f, 0, 0},
                           {1.6f, 0, 0, -0.02f}, {1.8f, 0.01f, 0, 0}, {2.0f, 0, -0.02f, 0.01f}};
    for (int j = 0; j < 6; j++) set_row(c->keys, 4, j, k[j]);
}

static void keydiff_keeps_the_distinct_key(void **state)
{
    (void)state;
    static cands c;
    const char *anchors[] = {"norm", "raw", "pairwise"}, *metrics[] = {"cos", "dot", "l2"};
    for (int a = 0; a < 3; a++)
        for (int m = 0; m < 3; m++) {
            char spec[64];
            snprintf(spec, sizeof spec, "keydiff:anchor=%s:metric=%s", anchors[a], metrics[m]);
            tight_cluster(&c);
            printf("# %s\n", spec);
            assert_kept(&c, run_policy(spec, &c, 1, 0), (int64_t[]){2}, 1);
        }
}

static void keydiff_window_protects_the_newest(void **state)
{
    (void)state;
    static cands c;
    init_cands(&c, 8, 2);
    for (int j = 0; j < 8; j++) set_row(c.keys, 2, j, (const float[]){1.0f, 0.01f * (float)j});
    set_row(c.keys, 2, 1, (const float[]){-1.0f, 0.2f});   /* two distinct keys, old */
    set_row(c.keys, 2, 3, (const float[]){0.0f, 1.0f});
    int64_t no_window = run_policy("keydiff", &c, 2, 0);
    assert_kept(&c, no_window, (int64_t[]){1, 3}, 2);
    /* window=0.5 at N=4: the two newest protected, then the two distinct */
    assert_kept(&c, run_policy("keydiff:window=0.5", &c, 4, 0), (int64_t[]){1, 3, 6, 7}, 4);
    assert_kept(&c, run_policy("keydiff:window=1", &c, 3, 0), (int64_t[]){5, 6, 7}, 3);
    assert_int_equal(policy_recent_count(0.29, 100), 29);   /* not 28.999… */
    assert_int_equal(policy_recent_count(0.5, 5), 2);
    assert_int_equal(policy_recent_count(0, 5), 0);
    assert_int_equal(policy_recent_count(1, 5), 5);
}

static void keydiff_zero_key_and_pairwise_algebra(void **state)
{
    (void)state;
    static cands c;
    tight_cluster(&c);
    set_row(c.keys, 4, 0, (const float[]){0, 0, 0, 0});
    assert_int_equal(run_policy("keydiff:anchor=pairwise", &c, 2, 0), 2);
    /* the O(n·D) form against the O(n²·D) definition */
    for (int64_t j = 0; j < c.n; j++) {
        double sum = 0, nj = 0;
        for (int d = 0; d < 4; d++) nj += (double)c.keys[j * 4 + d] * c.keys[j * 4 + d];
        for (int64_t m = 0; m < c.n; m++) {
            double dot = 0, nm = 0;
            if (m == j) continue;
            for (int d = 0; d < 4; d++) {
                dot += (double)c.keys[j * 4 + d] * c.keys[m * 4 + d];
                nm += (double)c.keys[m * 4 + d] * c.keys[m * 4 + d];
            }
            sum += nj == 0 || nm == 0 ? 0 : dot / sqrt(nj * nm);
        }
        assert_true(fabs(c.scores[j] - (-sum / (double)(c.n - 1))) < 1e-12);
    }
    assert_true(c.scores[0] == 0);
    for (int m = 0; m < 3; m++) {   /* a zero key never makes NaN */
        const char *spec[] = {"keydiff:metric=cos", "keydiff:anchor=raw", "primekv:key=nn"};
        run_policy(spec[m], &c, 2, 0);
        for (int64_t j = 0; j < c.n; j++) assert_false(isnan(c.scores[j]));
    }
}

static void streaming_keeps_sinks_and_recent(void **state)
{
    (void)state;
    static cands c;
    init_cands(&c, 10, 2);
    assert_kept(&c, run_policy("streaming:sinks=2", &c, 5, 0), (int64_t[]){0, 1, 7, 8, 9}, 5);
    const int64_t pos[8] = {0, 1, 2, 3, 10, 15, 20, 21};   /* a cache after evictions */
    init_cands(&c, 8, 2);
    memcpy(c.pos, pos, sizeof pos);
    assert_kept(&c, run_policy("streaming", &c, 6, 0), (int64_t[]){0, 1, 2, 3, 6, 7}, 6);
    assert_kept(&c, run_policy("streaming:sinks=0", &c, 3, 0), (int64_t[]){5, 6, 7}, 3);
    assert_kept(&c, run_policy("streaming:sinks=100", &c, 3, 0), (int64_t[]){5, 6, 7}, 3);
}

static void knorm_keeps_small_norms(void **state)
{
    (void)state;
    static cands c;
    init_cands(&c, 6, 2);
    const float norms[6] = {3, 1, 4, 1.5f, 9, 2};
    for (int j = 0; j < 6; j++) set_row(c.keys, 2, j, (const float[]){0.6f * norms[j], -0.8f * norms[j]});
    assert_kept(&c, run_policy("knorm", &c, 3, 0), (int64_t[]){1, 3, 5}, 3);
}

/* Cluster keys near +e1 with values near w; index 3: key -e1, value 10·w
 * (the pair to keep); index 1: a cluster key with a big value; index 5: a
 * distinct key (e2) with an ordinary value. */
static void primekv_keeps_outlier_with_large_value(void **state)
{
    (void)state;
    static cands c;
    const char *keys[] = {"anchor", "nn"}, *vals[] = {"dev", "proj"};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            init_cands(&c, 7, 3);
            for (int j = 0; j < 7; j++) {
                float e = 0.01f * (float)j;
                set_row(c.keys, 3, j, (const float[]){1.0f, e, -e});
                set_row(c.values, 3, j, (const float[]){1.0f + e, 2.0f, -e});
            }
            set_row(c.keys, 3, 3, (const float[]){-1.0f, 0.05f, 0});
            set_row(c.values, 3, 3, (const float[]){10.0f, 20.0f, 0});
            set_row(c.values, 3, 1, (const float[]){4.0f, 6.0f, 1.0f});
            set_row(c.keys, 3, 5, (const float[]){0, 1.0f, 0});
            char spec[64];
            snprintf(spec, sizeof spec, "primekv:key=%s:value=%s", keys[a], vals[b]);
            printf("# %s\n", spec);
            assert_kept(&c, run_policy(spec, &c, 1, 0), (int64_t[]){3}, 1);
        }
}

static void random_is_deterministic_per_stream(void **state)
{
    (void)state;
    static cands c;
    double first[50];
    init_cands(&c, 50, 1);
    run_policy("random:seed=7", &c, 10, 3);
    memcpy(first, c.scores, sizeof first);
    run_policy("random:seed=7", &c, 10, 3);
    assert_memory_equal(first, c.scores, sizeof first);
    const char *other[] = {"random:seed=7", "random:seed=8"};
    for (int o = 0; o < 2; o++) {
        run_policy(other[o], &c, 10, o == 0 ? 4 : 3);   /* another step, another seed */
        int differ = 0;
        for (int j = 0; j < 50; j++) differ += first[j] != c.scores[j];
        assert_true(differ > 40);
    }
    for (int j = 0; j < 50; j++) assert_true(c.scores[j] >= 0 && c.scores[j] < 1);
}

/* ---- scores against docs/policies.md's formulas, written the slow obvious way -- */

static double dotr(const float *a, const float *b, int64_t D)
{
    double s = 0;
    for (int64_t d = 0; d < D; d++) s += (double)a[d] * b[d];
    return s;
}

static double cosr(const float *a, const float *b, int64_t D)
{
    double na = sqrt(dotr(a, a, D)), nb = sqrt(dotr(b, b, D));
    return na == 0 || nb == 0 ? 0 : dotr(a, b, D) / (na * nb);
}

/* mean of rows (normalised or not) rounded to float: the tolerance covers it */
static void meanr(const float *rows, int64_t n, int64_t D, bool normalise, float *mu)
{
    for (int64_t d = 0; d < D; d++) {
        double s = 0;
        for (int64_t j = 0; j < n; j++) {
            double nj = sqrt(dotr(rows + j * D, rows + j * D, D));
            s += normalise ? (nj == 0 ? 0 : rows[j * D + d] / nj) : rows[j * D + d];
        }
        mu[d] = (float)(s / (double)n);
    }
}

static double keydiff_ref(const cands *c, int anchor, int metric, int64_t j)
{
    int64_t n = c->n, D = c->D;
    const float *k = c->keys + j * D;
    float mu[MAXD];
    if (anchor == 2) {
        double s = 0;
        for (int64_t m = 0; m < n; m++)
            if (m != j) s += cosr(k, c->keys + m * D, D);
        return n < 2 ? 0 : -s / (double)(n - 1);
    }
    meanr(c->keys, n, D, anchor == 0, mu);
    if (metric == 0) return -cosr(k, mu, D);
    if (metric == 1) return -dotr(k, mu, D);
    double s = 0;
    for (int64_t d = 0; d < D; d++) s += ((double)k[d] - mu[d]) * ((double)k[d] - mu[d]);
    return sqrt(s);
}

static double primekv_ref(const cands *c, int key, int value, int64_t j)
{
    int64_t n = c->n, D = c->D;
    const float *k = c->keys + j * D, *v = c->values + j * D;
    float mu[MAXD], vbar[MAXD];
    double r = 1, cj = 0;
    if (key == 0) {
        meanr(c->keys, n, D, true, mu);
        r = 1 - cosr(k, mu, D);
    } else if (n > 1) {
        double best = -INFINITY;
        for (int64_t m = 0; m < n; m++)
            if (m != j && cosr(k, c->keys + m * D, D) > best) best = cosr(k, c->keys + m * D, D);
        r = 1 - best;
    }
    meanr(c->values, n, D, false, vbar);
    double nv = sqrt(dotr(vbar, vbar, D));
    if (value == 1) return r * (nv == 0 ? 0 : fabs(dotr(v, vbar, D)) / nv);
    for (int64_t d = 0; d < D; d++) cj += ((double)v[d] - vbar[d]) * ((double)v[d] - vbar[d]);
    return r * sqrt(cj);
}

static void random_cands(cands *c, kv_rng *r, int64_t n, int64_t D);

static void scores_match_the_formulas(void **state)
{
    (void)state;
    static cands c;
    kv_rng r;
    rng_init(&r, 9, 0, 0, 0);
    const char *anchors[] = {"norm", "raw", "pairwise"}, *metrics[] = {"cos", "dot", "l2"};
    const char *keys[] = {"anchor", "nn"}, *values[] = {"dev", "proj"};
    double worst = 0;
    for (int t = 0; t < 6; t++) {
        int64_t n = 1 + 7 * t, D = 1 + 12 * t;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                char spec[64];
                bool pk = b < 2 && a < 2;   /* primekv has 2 x 2 variants */
                random_cands(&c, &r, n, D);
                snprintf(spec, sizeof spec, "keydiff:anchor=%s:metric=%s", anchors[a], metrics[b]);
                run_policy(spec, &c, 0, 0);
                for (int64_t j = 0; j < n; j++) {
                    double ref = keydiff_ref(&c, a, b, j), d = fabs(c.scores[j] - ref);
                    if (d > worst) worst = d;
                    if (d > 1e-5 * (1 + fabs(ref))) printf("# %s n=%lld [%lld]: %.9g vs ref %.9g\n", spec, (long long)n, (long long)j, c.scores[j], ref);
                    assert_true(d <= 1e-5 * (1 + fabs(ref)));
                }
                if (!pk) continue;
                snprintf(spec, sizeof spec, "primekv:key=%s:value=%s", keys[a], values[b]);
                run_policy(spec, &c, 0, 0);
                for (int64_t j = 0; j < n; j++) {
                    double ref = primekv_ref(&c, a, b, j), d = fabs(c.scores[j] - ref);
                    if (d > worst) worst = d;
                    if (d > 1e-5 * (1 + fabs(ref))) printf("# %s n=%lld [%lld]: %.9g vs ref %.9g\n", spec, (long long)n, (long long)j, c.scores[j], ref);
                    assert_true(d <= 1e-5 * (1 + fabs(ref)));
                }
            }
    }
    printf("# keydiff and primekv vs the formulas: max abs diff %.3g\n", worst);
}

/* ---- invariants for every registered policy ---------------------------- */

static void random_cands(cands *c, kv_rng *r, int64_t n, int64_t D)
{
    init_cands(c, n, D);
    int64_t p = (int64_t)rng_below(r, 6);
    for (int64_t j = 0; j < n; j++) {
        c->pos[j] = p;
        p += 1 + (int64_t)rng_below(r, 3);
        for (int64_t d = 0; d < D; d++) {
            c->keys[j * D + d] = (float)rng_normal(r);
            c->values[j * D + d] = (float)rng_normal(r);
        }
    }
    if (n > 3) {   /* degenerate rows: a zero key, a repeated key, a zero value */
        memset(c->keys + D, 0, (size_t)D * sizeof(float));
        memcpy(c->keys + 3 * D, c->keys + 2 * D, (size_t)D * sizeof(float));
        memset(c->values + 2 * D, 0, (size_t)D * sizeof(float));
    }
    for (int64_t j = 0; j < n; j++) c->attn[j] = 1.0f / (float)n;
}

static void check_invariants(const char *spec, cands *c, int64_t budget, bool never_evicts)
{
    int64_t k = run_policy(spec, c, budget, budget);
    int64_t n_prot = 0;
    for (int64_t j = 0; j < c->n; j++) {
        if (isnan(c->scores[j]) || c->scores[j] == -INFINITY) printf("# %s: score[%lld] = %g\n", spec, (long long)j, c->scores[j]);
        assert_true(isfinite(c->scores[j]) || c->scores[j] == INFINITY);
        n_prot += c->scores[j] == INFINITY;
    }
    if (never_evicts) return;   /* the engine never asks it to select */
    assert_int_equal(k, c->n < budget ? c->n : budget);
    int64_t prot_kept = 0;
    for (int64_t i = 0; i < k; i++) {
        assert_true(c->keep[i] >= 0 && c->keep[i] < c->n);
        if (i) assert_true(c->pos[c->keep[i]] > c->pos[c->keep[i - 1]]);
        prot_kept += c->scores[c->keep[i]] == INFINITY;
    }
    assert_int_equal(prot_kept, n_prot < k ? n_prot : k);
}

/* The default, then one variant per choice and per number bound. */
static int variants(const policy_iface *pi, char out[][96], int cap)
{
    int nv = 0;
    snprintf(out[nv++], 96, "%s", pi->name);
    for (int i = 0; i < policy_n_params(pi); i++) {
        const policy_param *p = &pi->params[i];
        if (p->kind == PARAM_NUMBER) {
            double b[2] = {p->min, p->max > 1e6 ? 1e6 : p->max};
            for (int e = 0; e < 2 && nv < cap; e++) snprintf(out[nv++], 96, "%s:%s=%.17g", pi->name, p->key, b[e]);
            continue;
        }
        for (const char *ch = p->choices; ch && nv < cap; ch = strchr(ch, '|') ? strchr(ch, '|') + 1 : NULL)
            snprintf(out[nv++], 96, "%s:%s=%.*s", pi->name, p->key, (int)strcspn(ch, "|"), ch);
    }
    return nv;
}

static void every_policy_keeps_invariants(void **state)
{
    (void)state;
    static cands c;
    static char spec[32][96];
    kv_rng r;
    rng_init(&r, 42, 0, 0, 0);
    const int64_t sizes[] = {1, 2, 5, 17, 64, 200}, dims[] = {1, 8, 64};
    int checked = 0;
    for (const policy_iface *const *p = policy_all(); *p; p++) {
        int nv = variants(*p, spec, 32);
        for (int s = 0; s < 6; s++) {
            int64_t n = sizes[s], D = dims[s % 3];
            const int64_t budgets[] = {0, 1, n / 2, n - 1, n, n + 3};
            for (int v = 0; v < nv; v++)
                for (int b = 0; b < 6; b++) {
                    random_cands(&c, &r, n, D);
                    check_invariants(spec[v], &c, budgets[b], (*p)->never_evicts);
                    checked++;
                }
        }
    }
    printf("# %d (policy variant, size, budget) cases\n", checked);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keydiff_keeps_the_distinct_key),
        cmocka_unit_test(keydiff_window_protects_the_newest),
        cmocka_unit_test(keydiff_zero_key_and_pairwise_algebra),
        cmocka_unit_test(streaming_keeps_sinks_and_recent),
        cmocka_unit_test(knorm_keeps_small_norms),
        cmocka_unit_test(primekv_keeps_outlier_with_large_value),
        cmocka_unit_test(random_is_deterministic_per_stream),
        cmocka_unit_test(scores_match_the_formulas),
        cmocka_unit_test(every_policy_keeps_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
