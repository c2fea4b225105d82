/* keydiff's exact incremental anchor (policies/anchor.c;
 * docs/policies.md#keydiffs-exact-anchor): over long
 * runs (T = 4096 synthetic keys, D = 64, chunks of 1, 16 and 64, budgets 16 to
 * 1024: hundreds to thousands of steps; N = 16 with chunks of 64 takes the from-scratch
 * pass at every step, the others the update) the scores of the step-by-step anchor
 * equal, bit for bit, those computed from scratch at every step (keydiff with
 * a fresh state, and anchor_sum + anchor_cos_scores, the expressions' path), so the kept sets are equal;
 * a candidate list whose positions do not ascend rebuilds the sum and still
 * agrees; anchor=norm and pairwise, window 0 and 0.25; the batch dot products and norms (AVX-512
 * where the CPU has it) equal the single-row forms, and joins then leaves give the sum back. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "core/progress.h"
#include "core/rng.h"
#include "core/anchor.h"
#include "policies/anchor_step.h"
#include "policies/policy.h"
#include "policies/select.h"
#include "core/vecmath.h"

enum { T = 4096, D = 64 };

/* Keys around a shared mean (as real keys are), a few zero keys and exact repeats. */
static float *make_keys(uint64_t seed)
{
    kv_rng r;
    rng_init(&r, seed, 24, 0, 0);
    float *k = malloc(sizeof(float) * (size_t)T * D);
    double mean[D];
    assert_non_null(k);
    for (int d = 0; d < D; d++) mean[d] = rng_normal(&r);
    for (int64_t i = 0; i < (int64_t)T * D; i++) k[i] = (float)(mean[i % D] + 0.8 * rng_normal(&r));
    for (int64_t t = 100; t < T; t += 997) memset(k + t * D, 0, sizeof(float) * D);
    for (int64_t t = 2000; t < 2040; t++) memcpy(k + t * D, k + (t - 1500) * D, sizeof(float) * D);
    return k;
}

typedef struct {
    int64_t n, pos[T];
    float keys[T * D];
} cache;

/* One replay: each step's candidates scored with the state (incremental) and
 * with a fresh one (from scratch); returns the steps that evicted. */
static int64_t replay(const char *spec, const float *k, int64_t N, int64_t B, double *ns_inc, double *ns_new)
{
    policy_config cfg;
    kv_err err = {0};
    assert_int_equal(policy_parse(spec, &cfg, &err), KV_OK);
    void *state = NULL;
    assert_int_equal(cfg.iface->create(&cfg, &state, &err), KV_OK);
    static cache c;
    c.n = 0;
    double *a = malloc(sizeof(double) * T), *b = malloc(sizeof(double) * T);
    int64_t *keep = malloc(sizeof(int64_t) * T), *scr = malloc(sizeof(int64_t) * T), steps = 0;
    assert_true(a && b && keep && scr);
    for (int64_t p0 = 0; p0 < T; p0 += B) {
        for (int64_t p = p0; p < p0 + B && p < T; p++, c.n++)
            c.pos[c.n] = p, memcpy(c.keys + c.n * D, k + p * D, sizeof(float) * D);
        if (c.n <= N) continue;
        policy_view v = {.n = c.n, .D = D, .pos = c.pos, .keys = c.keys, .values = c.keys, .budget = N,
                         .now = c.pos[c.n - 1], .step = steps};
        double t0 = kv_now_seconds();
        assert_int_equal(cfg.iface->score(&cfg, state, &v, a, &err), KV_OK);
        double t1 = kv_now_seconds();
        void *fresh = NULL;
        assert_int_equal(cfg.iface->create(&cfg, &fresh, &err), KV_OK);
        assert_int_equal(cfg.iface->score(&cfg, fresh, &v, b, &err), KV_OK);
        cfg.iface->destroy(fresh);
        *ns_inc += (t1 - t0) * 1e9 / (double)c.n, *ns_new += (kv_now_seconds() - t1) * 1e9 / (double)c.n;
        assert_memory_equal(a, b, sizeof(double) * (size_t)c.n);   /* bit for bit */
        int64_t kept = policy_select(a, c.pos, c.n, N, keep, scr);
        for (int64_t i = 0; i < kept; i++)
            c.pos[i] = c.pos[keep[i]], memmove(c.keys + i * D, c.keys + keep[i] * D, sizeof(float) * D);
        c.n = kept, steps++;
    }
    cfg.iface->destroy(state);
    free(a), free(b), free(keep), free(scr);
    *ns_inc /= (double)steps, *ns_new /= (double)steps;
    return steps;
}

static void incremental_equals_from_scratch(void **st)
{
    (void)st;
    float *k = make_keys(1);
    const char *specs[] = {"keydiff", "keydiff:anchor=pairwise", "keydiff:window=0.25", "keydiff:metric=dot",
                           "keydiff:metric=l2"};
    const int64_t NB[][2] = {{64, 1}, {256, 16}, {128, 64}, {1024, 64}, {512, 16}, {16, 64}};
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++)
        for (size_t c = 0; c < sizeof NB / sizeof *NB; c++) {
            if (s >= 3 && c != 1) continue;
            double inc = 0, scratch = 0;
            int64_t steps = replay(specs[s], k, NB[c][0], NB[c][1], &inc, &scratch);
            printf("# %-24s N=%-4lld B=%-2lld %4lld steps equal; ns/candidate incremental %.1f, from scratch %.1f\n",
                   specs[s], (long long)NB[c][0], (long long)NB[c][1], (long long)steps, inc, scratch);
            assert_true(steps >= 48);
        }
    free(k);
}

/* The expressions' from-scratch path gives keydiff's doubles. */
static void anchor_cos_is_keydiffs(void **st)
{
    (void)st;
    float *k = make_keys(2);
    const int64_t n = 777;
    int64_t pos[777];
    double *norms = malloc(sizeof(double) * n), *w = malloc(sizeof(double) * n), mu[D];
    double *a = malloc(sizeof(double) * n), *b = malloc(sizeof(double) * n);
    assert_true(norms && w && a && b);
    for (int64_t j = 0; j < n; j++) pos[j] = 3 * j;
    vm_norms_cached(NULL, k, NULL, n, D, norms, NULL);
    for (int pw = 0; pw < 2; pw++) {
        policy_config cfg;
        kv_err err = {0};
        assert_int_equal(policy_parse(pw ? "keydiff:anchor=pairwise" : "keydiff", &cfg, &err), KV_OK);
        void *state = NULL;
        assert_int_equal(cfg.iface->create(&cfg, &state, &err), KV_OK);
        policy_view v = {.n = n, .D = D, .pos = pos, .keys = k, .values = k, .budget = n - 1};
        assert_int_equal(cfg.iface->score(&cfg, state, &v, a, &err), KV_OK);
        anchor_sum(k, n, D, norms, w, mu);
        anchor_cos_scores(k, n, D, norms, mu, pw, mu, b);
        assert_memory_equal(a, b, sizeof(double) * (size_t)n);
        /* positions that do not ascend: rebuilt, the same doubles */
        pos[5] = pos[4];
        assert_int_equal(cfg.iface->score(&cfg, state, &v, b, &err), KV_OK);
        assert_memory_equal(a, b, sizeof(double) * (size_t)n);
        pos[5] = 15;
        cfg.iface->destroy(state);
    }
    free(k), free(norms), free(w), free(a), free(b);
}

/* The batch forms (AVX-512 where the CPU has it, four rows at once) give the single-row forms'
 * doubles, and the joins and leaves the from-scratch sum's, for D with and without column tails. */
static void batch_forms_equal_single_rows(void **st)
{
    (void)st;
    float *k = make_keys(3);
    enum { n = 23 };
    const int64_t Ds[] = {64, 80, 36, 8, 3}, idx[] = {5, 0, 9, 22, 13, 7, 1};
    double y[128], out[n], norms[n], sum[128], ref[128], inv[n], unit[n * 128];
    for (int d = 0; d < 128; d++) y[d] = 0.3 - 0.01 * d + 1e-3 / (d + 1);
    for (size_t c = 0; c < sizeof Ds / sizeof *Ds; c++) {
        const int64_t E = Ds[c];
        vm_dots(k, n, E, y, out);
        vm_norms_of(k, NULL, n, E, norms);
        for (int64_t j = 0; j < n; j++) {
            const double dot = vm_dot(k + j * E, y, E), nrm = vm_norm(k + j * E, E);
            assert_memory_equal(&out[j], &dot, sizeof dot);
            assert_memory_equal(&norms[j], &nrm, sizeof nrm);
        }
        anchor_sum(k, n, E, norms, inv, ref);   /* from scratch */
        memset(sum, 0, sizeof sum);
        anchor_join(k, NULL, n, E, norms, NULL, NULL, sum, inv);
        assert_memory_equal(sum, ref, sizeof(double) * (size_t)E);
        const int64_t rows[] = {3, 1, 0, 6, 2, 5, 4};  /* 7 rows join at unit rows, then leave */
        anchor_join(k, idx, 7, E, norms, unit, rows, sum, inv);
        anchor_leave(unit, rows, 7, E, sum);
        assert_memory_equal(sum, ref, sizeof(double) * (size_t)E);
    }
    free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(incremental_equals_from_scratch),
        cmocka_unit_test(anchor_cos_is_keydiffs),
        cmocka_unit_test(batch_forms_equal_single_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
