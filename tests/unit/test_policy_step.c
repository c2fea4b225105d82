/* policy_step, the one eviction step of sim and the in-model run
 * (docs/sim.md#the-eviction-step-step-by-step):
 * observe every chunk, and with more than N candidates score, keep exactly
 * the N a brute-force ranking keeps, and compact through the engine's
 * callback; the attention mean's one definition; the stream geometry. Then
 * the policies' error channel: a policy defined here fails in observe() or
 * score() (as an out-of-memory would), and the step, sim_replay, sim_run,
 * the in-model engine and capture_run return its error without aborting,
 * leaving no output behind (and, under ASan, no leak). */
#include "testutil.h"

#include <math.h>

#include "capture/capture.h"
#include "capture/evict.h"
#include "core/rng.h"
#include "model/forward.h"
#include "model/model.h"
#include "policies/step.h"
#include "sim/replay.h"
#include "sim/sim.h"
#include "synth/synth.h"

/* ---- a policy that fails on demand ----------------------------------- */

enum { IN_OBSERVE, IN_SCORE };

typedef struct {
    int64_t observed, scored;   /* calls so far */
    double *held;               /* allocated by create: a missed destroy leaks (ASan) */
} probe_state;

static int probe_create(const policy_config *cfg, void **state, kv_err *err)
{
    (void)cfg;
    probe_state *s = kv_calloc(1, sizeof *s, "probe state", err);
    if (!s) return err->code;
    if (!(s->held = kv_calloc(64, sizeof(double), "probe state", err))) {
        free(s);
        return err->code;
    }
    *state = s;
    return KV_OK;
}

static void probe_destroy(void *state)
{
    probe_state *s = state;
    if (s) free(s->held);
    free(s);
}

static bool fails_now(const policy_config *cfg, int where, int64_t call)
{
    return policy_choice(cfg, "in") == where && (double)call == policy_num(cfg, "at");
}

static int probe_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)v;
    probe_state *s = state;
    if (fails_now(cfg, IN_OBSERVE, ++s->observed))
        return kv_fail(err, KV_EFAIL, "probe: out of memory in observe (call %lld)", (long long)s->observed);
    return KV_OK;
}

/* A fixed, tie-rich score: (7·pos) mod 11. */
static int probe_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    probe_state *s = state;
    if (fails_now(cfg, IN_SCORE, ++s->scored))
        return kv_fail(err, KV_EFAIL, "probe: out of memory in score (call %lld)", (long long)s->scored);
    for (int64_t j = 0; j < v->n; j++) scores[j] = (double)((7 * v->pos[j]) % 11);
    return KV_OK;
}

static const policy_iface PROBE = {
    .name = "probe",
    .summary = "test policy: scores (7 pos) mod 11, fails in observe or score at a given call",
    .params = {{.key = "at", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1e9, .integer = true,
                .doc = "the call that fails (0: none)"},
               {.key = "in", .kind = PARAM_CHOICE, .def = "score", .choices = "observe|score",
                .doc = "which function fails"}},
    .needs_attention = true,
    .create = probe_create,
    .destroy = probe_destroy,
    .score = probe_score,
    .observe = probe_observe,
};

static policy_config probe(const policy_iface *pi, int64_t at, int in)
{
    policy_config c;
    memset(&c, 0, sizeof c);
    c.iface = pi, c.n = 2, c.num[0] = (double)at, c.choice[1] = in;
    snprintf(c.canonical, sizeof c.canonical, "at=%lld:in=%s", (long long)at, in == IN_OBSERVE ? "observe" : "score");
    return c;
}

/* ---- the step on its own ---------------------------------------------- */

typedef struct {
    int calls;
    int64_t keep[64], kept;
} compact_log;

static void log_compact(void *ctx, const int64_t *keep, int64_t kept)
{
    compact_log *c = ctx;
    c->calls++, c->kept = kept;
    memcpy(c->keep, keep, sizeof(int64_t) * (size_t)kept);
}

/* The probe's state, and the step's scratch for cap candidates. */
static void *start(const policy_config *pc, policy_step_buf *b, int64_t cap)
{
    kv_err err = {0};
    void *st = NULL;
    assert_int_equal(PROBE.create(pc, &st, &err), KV_OK);
    assert_int_equal(policy_step_buf_init(b, cap, &err), KV_OK);
    return st;
}

/* The N best by (score, then position) descending, brute force, in position order. */
static int64_t brute_keep(const int64_t *pos, int64_t n, int64_t budget, int64_t *keep)
{
    int64_t k = 0;
    for (int64_t j = 0; j < n; j++) {
        const double sj = (double)((7 * pos[j]) % 11);
        int64_t better = 0;
        for (int64_t m = 0; m < n; m++) {
            const double sm = (double)((7 * pos[m]) % 11);
            better += sm > sj || (sm == sj && pos[m] > pos[j]);
        }
        if (better < budget) keep[k++] = j;
    }
    return k;
}

static void step_observes_then_keeps_exactly_n(void **state)
{
    (void)state;
    kv_err err = {0};
    policy_config pc = probe(&PROBE, 0, IN_SCORE);
    policy_step_buf b;
    void *st = start(&pc, &b, 64);
    int64_t pos[40];
    for (int64_t j = 0; j < 40; j++) pos[j] = 3 * j + (j % 4);   /* ascending, with gaps */
    compact_log log = {0};
    int64_t kept = -1, want[64];
    /* |C| <= N: observed, not scored, nothing compacted */
    policy_view v = {.n = 12, .pos = pos, .budget = 12};
    assert_int_equal(policy_step(&pc, st, &v, &b, log_compact, &log, &kept, &err), KV_OK);
    assert_int_equal(kept, 12);
    assert_int_equal(log.calls, 0);
    assert_int_equal(((probe_state *)st)->observed, 1);
    assert_int_equal(((probe_state *)st)->scored, 0);
    assert_int_equal(b.calls, 0);
    /* |C| > N: scored once, exactly N kept, the brute-force set */
    const int64_t budgets[] = {1, 7, 16, 39};
    for (int i = 0; i < 4; i++) {
        v = (policy_view){.n = 40, .pos = pos, .budget = budgets[i]};
        assert_int_equal(policy_step(&pc, st, &v, &b, log_compact, &log, &kept, &err), KV_OK);
        assert_int_equal(kept, budgets[i]);
        assert_int_equal(log.calls, i + 1);
        assert_int_equal(log.kept, budgets[i]);
        assert_int_equal(brute_keep(pos, 40, budgets[i], want), budgets[i]);
        assert_memory_equal(log.keep, want, sizeof(int64_t) * (size_t)budgets[i]);
    }
    assert_int_equal(((probe_state *)st)->observed, 5);
    assert_int_equal(((probe_state *)st)->scored, 4);
    assert_int_equal(b.calls, 4);
    assert_int_equal(b.candidates, 4 * 40);
    assert_true(b.score_ns >= 0);
    /* a policy that never evicts is observed, never scored */
    policy_iface keep_all = PROBE;
    keep_all.never_evicts = true;
    policy_config pk = probe(&keep_all, 0, IN_SCORE);
    v = (policy_view){.n = 40, .pos = pos, .budget = 4};
    assert_int_equal(policy_step(&pk, st, &v, &b, log_compact, &log, &kept, &err), KV_OK);
    assert_int_equal(kept, 40);
    assert_int_equal(((probe_state *)st)->scored, 4);
    assert_int_equal(log.calls, 4);
    policy_step_buf_free(&b);
    PROBE.destroy(st);
}

static void step_returns_the_policys_error(void **state)
{
    (void)state;
    int64_t pos[20];
    for (int64_t j = 0; j < 20; j++) pos[j] = j;
    for (int in = IN_OBSERVE; in <= IN_SCORE; in++) {
        kv_err err = {0};
        policy_config pc = probe(&PROBE, 1, in);
        policy_step_buf b;
        void *st = start(&pc, &b, 20);
        compact_log log = {0};
        int64_t kept = -1;
        policy_view v = {.n = 20, .pos = pos, .budget = 5};
        assert_int_equal(policy_step(&pc, st, &v, &b, log_compact, &log, &kept, &err), KV_EFAIL);
        printf("# %s\n", err.msg);
        assert_non_null(strstr(err.msg, in == IN_OBSERVE ? "in observe" : "in score"));
        assert_int_equal(log.calls, 0);   /* nothing compacted */
        assert_int_equal(kept, 20);
        assert_int_equal(((probe_state *)st)->scored, in == IN_SCORE);   /* observe's failure stops the step */
        policy_step_buf_free(&b);
        PROBE.destroy(st);
    }
}

/* ---- the attention mean and the stream geometry ------------------------ */

static void attention_mean_has_one_definition(void **state)
{
    (void)state;
    enum { NB = 5, M = 301 };
    static float blocks[NB * M], mean[M], acc[M], want[M];
    kv_rng r;
    rng_init(&r, 11, 0, 0, 0);
    for (int i = 0; i < NB * M; i++) blocks[i] = (float)rng_uniform(&r) / 3.0f;
    for (int nb = 1; nb <= NB; nb++) {
        for (int y = 0; y < M; y++) {   /* first copied, the rest added in head order, then divided */
            float a = blocks[y];
            for (int j = 1; j < nb; j++) a += blocks[j * M + y];
            want[y] = a / (float)nb;
        }
        policy_attn_mean(mean, blocks, nb, M);
        for (int j = 0; j < nb; j++) policy_attn_add(acc, blocks + j * M, M, j == 0);   /* head by head */
        policy_attn_divide(acc, M, nb);
        assert_memory_equal(mean, want, sizeof want);
        assert_memory_equal(acc, want, sizeof want);
    }
}

static void stream_geometry(void **state)
{
    (void)state;
    policy_config pc;
    kv_err err = {0};
    assert_int_equal(policy_parse("tova", &pc, &err), KV_OK);   /* scope=layer: one stream per layer */
    policy_streams s = policy_streams_of(&pc, 32, 8);
    assert_int_equal(s.per_layer, 1);
    assert_int_equal(s.kv_heads, 8);
    assert_int_equal(s.q_heads, 32);
    const char *per_head[] = {"tova:scope=group", "keydiff", "h2o", "full"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(policy_parse(per_head[i], &pc, &err), KV_OK);
        s = policy_streams_of(&pc, 32, 8);
        assert_int_equal(s.per_layer, 8);
        assert_int_equal(s.kv_heads, 1);
        assert_int_equal(s.q_heads, 4);
    }
}

/* ---- the engines return the error ------------------------------------- */

enum { ST = 64, SD = 8, SH = 4, SK = 2 };

static void sim_replay_returns_the_error(void **state)
{
    (void)state;
    static float q[SH * ST * SD], k[SK * ST * SD], v[SK * ST * SD];
    kv_rng r;
    rng_init(&r, 5, 0, 0, 0);
    for (int i = 0; i < SH * ST * SD; i++) q[i] = (float)rng_normal(&r);
    for (int i = 0; i < SK * ST * SD; i++) k[i] = (float)rng_normal(&r), v[i] = (float)rng_normal(&r);
    sim_reference ref = {0};
    assert_int_equal(sim_reference_compute(&ref, q, k, v, ST, SD, SH, SK, 1), 0);
    sim_layer ly = {.T = ST, .D = SD, .H = SH, .K = SK, .prompt_len = 40, .q = q, .k = k, .v = v, .ref = &ref,
                    .chunk = 8, .decode_chunk = 1, .eval_stride = 1};
    static sim_stats stats[SH * N_PHASES];
    int64_t retained[SK * ST], n_retained[SK];
    double logdet[SK], kept_mean[SK];
    uint64_t kept_hash[SK];
    /* at = 0: never fails (the probe runs to the end); then each function failing at its 1st and 3rd call */
    const struct { int64_t at; int in; } cases[] = {{0, IN_SCORE}, {1, IN_OBSERVE}, {3, IN_OBSERVE}, {1, IN_SCORE},
                                                    {3, IN_SCORE}};
    for (int c = 0; c < 5; c++)
        for (int64_t ng = 1; ng <= SK; ng++) {   /* one kv head; a layer-scope stream of both */
            policy_config pc = probe(&PROBE, cases[c].at, cases[c].in);
            sim_result out = {.stats = stats, .retained = retained, .n_retained = n_retained, .kept_mean = kept_mean,
                              .kept_hash = kept_hash, .logdet = logdet};
            kv_err err = {0};
            int rc = sim_replay(&ly, &pc, 16, 16, 0, 0, ng, &out, &err);
            if (cases[c].at == 0) {
                assert_int_equal(rc, KV_OK);
                assert_int_equal(out.n_retained[0], 16);
                assert_true(out.calls > 0);
                continue;
            }
            printf("# at=%lld ng=%lld: %s\n", (long long)cases[c].at, (long long)ng, err.msg);
            assert_int_equal(rc, KV_EFAIL);
            assert_int_equal(err.code, KV_EFAIL);
            assert_non_null(strstr(err.msg, cases[c].in == IN_OBSERVE ? "in observe" : "in score"));
        }
    sim_reference_free(&ref);
}

/* sim_run on a trace: the failing configuration's error, and no output directory. */
static void sim_run_writes_nothing(void **state)
{
    (void)state;
    char dir[300], trace_path[400], out_dir[400];
    snprintf(dir, sizeof dir, "%s/sim", tu_dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(trace_path, sizeof trace_path, "%s/s.h5", dir);
    snprintf(out_dir, sizeof out_dir, "%s/out", dir);
    char *synth_argv[] = {"synth", "--like", "stories260k", "--tokens", "80", "--prompt-len", "48", "--seed", "3",
                          "--threads", "1", "--quiet", "-o", trace_path, NULL};
    assert_int_equal(synth_main(14, synth_argv), 0);
    kv_err err = {0};
    policy_config pcs[2];
    assert_int_equal(policy_parse("keydiff", &pcs[0], &err), KV_OK);
    pcs[1] = probe(&PROBE, 2, IN_SCORE);
    int64_t budgets[] = {8, 16};
    sim_opts o = {.trace = trace_path, .output = out_dir, .policies = pcs, .n_policies = 2, .budgets = budgets,
                  .n_budgets = 2, .chunk = 8, .decode_chunk = 1, .eval_stride = 1, .threads = 2, .quiet = true};
    assert_int_equal(sim_run(&o, NULL, &err), KV_EFAIL);
    printf("# %s\n", err.msg);
    assert_non_null(strstr(err.msg, "probe: out of memory in score"));
    assert_null(strchr(err.msg, '\n'));   /* one line */
    assert_int_equal(tu_count_entries(dir), 1);   /* the trace alone: no output, no temporary */
}

static kv_model M;

static int group_setup(void **state)
{
    kv_err err = {0};
    if (model_load("random:stories260k:5", NULL, &M, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return tu_group_setup(state);
}

static int group_teardown(void **state)
{
    model_free(&M);
    return tu_group_teardown(state);
}

static void in_model_engine_returns_the_error(void **state)
{
    (void)state;
    enum { T = 60, B = 8, N = 16 };
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((7 * i + 1) % M.cfg.vocab_size);
    const struct { int64_t at; int in; } cases[] = {{1, IN_OBSERVE}, {3, IN_OBSERVE}, {1, IN_SCORE}, {5, IN_SCORE}};
    for (int c = 0; c < 4; c++) {
        kv_err err = {0};
        policy_config pc = probe(&PROBE, cases[c].at, cases[c].in);
        const int64_t cap = evict_cache_rows(&pc, N, B, T);
        forward_state s;
        evict_engine e;
        assert_int_equal(forward_init_cache(&s, &M, &FORWARD_CPU, NULL, T, cap, B, &err), KV_OK);
        assert_int_equal(evict_init(&e, &pc, N, &M.cfg, B, cap, &err), KV_OK);
        s.ev = &e.hooks;
        int rc = KV_OK;
        for (int64_t p0 = 0; !rc && p0 < T; p0 += B)
            rc = forward_chunk(&s, tok + p0, T - p0 < B ? T - p0 : B, NULL, &err);
        printf("# at=%lld: %s\n", (long long)cases[c].at, err.msg);
        assert_int_equal(rc, KV_EFAIL);
        assert_non_null(strstr(err.msg, cases[c].in == IN_OBSERVE ? "in observe" : "in score"));
        evict_free(&e);
        forward_free(&s);
    }
}

/* capture --evict with the failing policy: the error, and no trace file left. */
static void capture_writes_nothing(void **state)
{
    (void)state;
    char dir[300], out[400];
    snprintf(dir, sizeof dir, "%s/cap", tu_dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(out, sizeof out, "%s/ev.h5", dir);
    capture_opts o;
    memset(&o, 0, sizeof o);
    o.model = "random:stories260k:5", o.output = out, o.generate = 40, o.chunk = 8, o.quiet = true;
    o.evict = probe(&PROBE, 4, IN_SCORE), o.budget = 16, o.retained = true, o.attention = ATTN_NONE;
    kv_err err = {0};
    int rc = capture_run(&o, &err);
    printf("# %s\n", err.msg);
    assert_int_equal(rc, KV_EFAIL);
    assert_non_null(strstr(err.msg, "probe: out of memory in score"));
    assert_int_equal(tu_count_entries(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(step_observes_then_keeps_exactly_n),
        cmocka_unit_test(step_returns_the_policys_error),
        cmocka_unit_test(attention_mean_has_one_definition),
        cmocka_unit_test(stream_geometry),
        cmocka_unit_test(sim_replay_returns_the_error),
        cmocka_unit_test(sim_run_writes_nothing),
        cmocka_unit_test(in_model_engine_returns_the_error),
        cmocka_unit_test(capture_writes_nothing),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
