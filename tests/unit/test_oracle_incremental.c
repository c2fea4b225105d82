/* oracle's incremental form (policies/oracle.c; docs/policies.md#oracles-incremental-form) against the rescanning form that
 * sums every future query at every step: over long replays (T = 1024 synthetic keys and queries,
 * D = 32, two query heads, lse from the full-cache softmax computed here in double; chunks of 1, 16
 * and 64, budgets 64 to 512) the scores agree to 1e-6 relative (float weights: the q·k come from
 * sgemm calls of other shapes) and the kept sets are identical except near-ties (a kept score
 * within 1e-6 relative of the cut), which are counted and printed;
 * after the last query every score is 0 in both (the selection rule's ties keep the newest: docs/sim.md#the-eviction-step-step-by-step). A
 * candidate list whose positions do not ascend falls back to the rescan and still agrees. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "core/rng.h"
#include "policies/policy.h"
#include "policies/select.h"

extern const policy_iface policy_oracle, policy_oracle_rescan;

enum { T = 1024, D = 32, QH = 2 };
/* Both sum float weights exp(q·k/√D − lse) in double; the q·k come from sgemm calls of other
 * shapes (the joiners' block, the step's candidates), rounded differently in float. */
#define TOL 1e-6

typedef struct {
    float q[QH * T * D], k[T * D];
    double lse[QH * T];
} trace;

static void make_trace(trace *t, uint64_t seed)
{
    kv_rng r;
    rng_init(&r, seed, 24, 1, 0);
    for (int64_t i = 0; i < T * D; i++) t->k[i] = (float)rng_normal(&r);
    for (int64_t i = 0; i < QH * T * D; i++) t->q[i] = (float)(1.5 * rng_normal(&r));
    for (int64_t h = 0; h < QH; h++)
        for (int64_t i = 0; i < T; i++) { /* log Σ_{j ≤ i} exp(q_i·k_j/√D), in double */
            double m = -INFINITY, s = 0, *x = malloc(sizeof(double) * (size_t)(i + 1));
            assert_non_null(x);
            for (int64_t j = 0; j <= i; j++) {
                x[j] = 0;
                for (int64_t d = 0; d < D; d++) x[j] += (double)t->q[(h * T + i) * D + d] * t->k[j * D + d];
                x[j] /= sqrt((double)D), m = x[j] > m ? x[j] : m;
            }
            for (int64_t j = 0; j <= i; j++) s += exp(x[j] - m);
            t->lse[h * T + i] = m + log(s), free(x);
        }
}

static void open_both(policy_config *cfg, void **inc, void **re)
{
    kv_err err = {0};
    policy_defaults(&policy_oracle, cfg);
    assert_int_equal(policy_oracle.create(cfg, inc, &err), KV_OK);
    assert_int_equal(policy_oracle_rescan.create(cfg, re, &err), KV_OK);
}

/* a: the incremental form's scores, b: the rescan's; within TOL of each other. */
static void score_both(const policy_config *cfg, void *inc, void *re, const policy_view *v, double *a, double *b)
{
    kv_err err = {0};
    assert_int_equal(policy_oracle.score(cfg, inc, v, a, &err), KV_OK);
    assert_int_equal(policy_oracle_rescan.score(cfg, re, v, b, &err), KV_OK);
    for (int64_t c = 0; c < v->n; c++) assert_true(fabs(a[c] - b[c]) <= TOL * fabs(b[c]));
}

/* One replay kept by the incremental form; returns the steps, adds the near-ties to *ties. */
static int64_t replay(const trace *t, int64_t N, int64_t B, int64_t *ties)
{
    static int64_t pos[T], keep[T], keep2[T], scr[T];
    static float keys[T * D];
    static double a[T], b[T];
    policy_config cfg;
    void *inc = NULL, *re = NULL;
    open_both(&cfg, &inc, &re);
    int64_t n = 0, steps = 0;
    for (int64_t p0 = 0; p0 < T; p0 += B) {
        for (int64_t p = p0; p < p0 + B && p < T; p++, n++)
            pos[n] = p, memcpy(keys + n * D, t->k + p * D, sizeof keys[0] * D);
        if (n <= N) continue;
        policy_view v = {.n = n, .D = D, .pos = pos, .keys = keys, .values = keys, .budget = N, .now = pos[n - 1],
                         .queries = t->q, .lse = t->lse, .q_heads = QH, .T = T, .step = steps};
        score_both(&cfg, inc, re, &v, a, b);
        int64_t kept = policy_select(a, pos, n, N, keep, scr);
        assert_int_equal(policy_select(b, pos, n, N, keep2, scr), kept);
        if (memcmp(keep, keep2, sizeof(int64_t) * (size_t)kept) != 0) {
            double cut = INFINITY; /* the lowest kept score: a near-tie sits within TOL of it */
            for (int64_t i = 0; i < kept; i++) cut = b[keep2[i]] < cut ? b[keep2[i]] : cut;
            for (int64_t i = 0; i < kept; i++) assert_true(fabs(b[keep[i]] - cut) <= TOL * cut || b[keep[i]] >= cut);
            ++*ties;
        }
        if (pos[n - 1] == T - 1)
            for (int64_t c = 0; c < n; c++) assert_true(a[c] == 0.0 && b[c] == 0.0);
        for (int64_t i = 0; i < kept; i++)
            pos[i] = pos[keep[i]], memmove(keys + i * D, keys + keep[i] * D, sizeof keys[0] * D);
        n = kept, steps++;
    }
    policy_oracle.destroy(inc), policy_oracle_rescan.destroy(re);
    return steps;
}

static void incremental_equals_rescan(void **st)
{
    (void)st;
    static trace t;
    make_trace(&t, 7);
    const int64_t NB[][2] = {{64, 1}, {128, 16}, {128, 64}, {512, 16}, {100, 7}};
    for (size_t c = 0; c < sizeof NB / sizeof *NB; c++) {
        int64_t ties = 0, steps = replay(&t, NB[c][0], NB[c][1], &ties);
        printf("# oracle N=%-4lld B=%-2lld %4lld steps: kept sets equal but %lld near-ties\n", (long long)NB[c][0],
               (long long)NB[c][1], (long long)steps, (long long)ties);
        assert_true(steps >= 7);
    }
}

/* Positions that do not ascend: the rescan's scores (the members dropped), then back to incremental. */
static void unordered_positions_rescan(void **st)
{
    (void)st;
    static trace t;
    static int64_t pos[8] = {5, 3, 9, 12, 40, 41, 60, 61};
    static float keys[8 * D];
    make_trace(&t, 9);
    for (int i = 0; i < 8; i++) memcpy(keys + i * D, t.k + pos[i] * D, sizeof keys[0] * D);
    policy_config cfg;
    void *inc = NULL, *re = NULL;
    open_both(&cfg, &inc, &re);
    double a[8], b[8];
    for (int round = 0; round < 3; round++) {
        const int64_t *p = round == 1 ? pos + 2 : pos, n = round == 1 ? 6 : 8; /* round 1 ascends */
        policy_view v = {.n = n, .D = D, .pos = p, .keys = keys + (round == 1 ? 2 * D : 0), .budget = 4, .now = 61,
                         .queries = t.q, .lse = t.lse, .q_heads = QH, .T = T};
        score_both(&cfg, inc, re, &v, a, b);
        for (int64_t c = 0; c < n; c++) assert_true(b[c] > 0);
    }
    policy_oracle.destroy(inc), policy_oracle_rescan.destroy(re);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(incremental_equals_rescan),
        cmocka_unit_test(unordered_positions_rescan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
