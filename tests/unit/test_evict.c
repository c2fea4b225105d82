/* In-model eviction (capture/evict.c) on random:stories260k: with N >= T the
 * evicting walk's logits equal the full walk's exactly, chunk by chunk; for
 * every policy allowed in-model, every (layer, kv head) cache is allocated
 * at N + B rows, its own high-water counter never exceeds N + B and its
 * length is at most N after each chunk (all kv heads of a layer equal for
 * tova:scope=layer); the CPU compact kernel against a plain copy (and a
 * backend without it refused a cache smaller than the run); oracle is
 * refused. */
#include "testutil.h"

#include "capture/evict.h"
#include "model/forward.h"
#include "model/model.h"
#include "core/rng.h"

enum { T = 150, B = 8, N = 16 };

static kv_model M;
static int32_t TOK[T];

static int setup(void **state)
{
    (void)state;
    kv_err err = {0};
    if (model_load("random:stories260k:5", NULL, &M, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    kv_rng r;
    rng_init(&r, 3, 0, 0, 0);
    for (int i = 0; i < T; i++) TOK[i] = (int32_t)(rng_uniform(&r) * (double)M.cfg.vocab_size) % (int32_t)M.cfg.vocab_size;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_free(&M);
    return 0;
}

static void parse(const char *spec, policy_config *pc)
{
    kv_err err = {0};
    assert_int_equal(policy_parse(spec, pc, &err), 0);
}

static void n_at_least_t_equals_full(void **state)
{
    (void)state;
    kv_err err = {0};
    policy_config pc;
    parse("keydiff", &pc);
    forward_state full, ev;
    evict_engine e;
    assert_int_equal(forward_init(&full, &M, &FORWARD_CPU, NULL, T, B, &err), 0);
    const int64_t cap = evict_cache_rows(&pc, T + 5, B, T);
    assert_int_equal(cap, T);
    assert_int_equal(forward_init_cache(&ev, &M, &FORWARD_CPU, NULL, T, cap, B, &err), 0);
    assert_int_equal(evict_init(&e, &pc, T + 5, &M.cfg, B, cap, &err), 0);
    ev.ev = &e.hooks;
    const size_t V = (size_t)M.cfg.vocab_size;
    for (int64_t p0 = 0; p0 < T; p0 += B) {
        const int64_t n = T - p0 < B ? T - p0 : B;
        assert_int_equal(forward_chunk(&full, TOK + p0, n, NULL, &err), 0);
        assert_int_equal(forward_chunk(&ev, TOK + p0, n, NULL, &err), 0);
        assert_memory_equal(full.logits, ev.logits, sizeof(float) * V * (size_t)n);
    }
    assert_int_equal(e.evictions, 0);
    evict_free(&e);
    forward_free(&ev);
    forward_free(&full);
}

/* One policy over T tokens (prompt chunks of B, then single tokens from position 100). */
static void check_high_water(const char *spec)
{
    kv_err err = {0};
    policy_config pc;
    parse(spec, &pc);
    forward_state s;
    evict_engine e;
    const int64_t cap = evict_cache_rows(&pc, N, B, T);
    assert_int_equal(cap, N + B);
    assert_int_equal(forward_init_cache(&s, &M, &FORWARD_CPU, NULL, T, cap, B, &err), 0);
    assert_int_equal(evict_init(&e, &pc, N, &M.cfg, B, cap, &err), 0);
    s.ev = &e.hooks;
    const int64_t LK = M.cfg.n_layers * M.cfg.n_kv_heads, K = M.cfg.n_kv_heads;
    for (int64_t p0 = 0; p0 < T;) {
        const int64_t n = p0 < 100 ? B : 1;
        assert_int_equal(forward_chunk(&s, TOK + p0, n, NULL, &err), 0);
        p0 += n;
        for (int64_t lg = 0; lg < LK; lg++) {
            assert_true(s.cache_len[lg] <= N);
            assert_true(s.cache_len[lg] == (p0 < N ? p0 : N));
            const int64_t *pos = s.cache_pos + lg * s.cap;
            for (int64_t i = 1; i < s.cache_len[lg]; i++) assert_true(pos[i] > pos[i - 1]);
            assert_true(pos[s.cache_len[lg] - 1] < p0);
            if (e.streams == 1 && lg % K)
                assert_memory_equal(pos, s.cache_pos + (lg - lg % K) * s.cap, sizeof(int64_t) * (size_t)N);
        }
    }
    int64_t peak = 0;
    for (int64_t lg = 0; lg < LK; lg++) peak = s.cache_peak[lg] > peak ? s.cache_peak[lg] : peak;
    printf("# %s: cache high-water %lld rows (N + B = %d), %lld evictions\n", spec, (long long)peak, N + B,
           (long long)e.evictions);
    assert_true(peak <= N + B);
    assert_true(peak == N + B); /* a prefill chunk on a full cache does reach it */
    assert_true(e.evictions > 0);
    evict_free(&e);
    forward_free(&s);
}

static void high_water_at_most_n_plus_b(void **state)
{
    (void)state;
    static const char *const SPECS[] = {"keydiff", "keydiff:anchor=pairwise:window=0.25", "knorm", "primekv",
                                        "primekv:key=nn:value=proj", "random", "h2o", "tova", "tova:scope=group",
                                        "snapkv", "snapkv:window=4"};
    for (size_t i = 0; i < sizeof SPECS / sizeof SPECS[0]; i++) check_high_water(SPECS[i]);
    check_high_water("streaming");
}

static void oracle_refused(void **state)
{
    (void)state;
    kv_err err = {0};
    policy_config pc;
    evict_engine e;
    parse("oracle", &pc);
    assert_int_equal(evict_init(&e, &pc, N, &M.cfg, B, N + B, &err), KV_EUSAGE);
}

static void cpu_compact_kernel(void **state)
{
    (void)state;
    enum { R = 9, DD = 3 };
    float k[R * DD], v[R * DD], wk[R * DD], wv[R * DD];
    for (int i = 0; i < R * DD; i++) k[i] = (float)i, v[i] = (float)(100 + i);
    const int64_t keep[4] = {0, 3, 4, 8};
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < DD; d++) wk[i * DD + d] = k[keep[i] * DD + d], wv[i * DD + d] = v[keep[i] * DD + d];
    FORWARD_CPU.compact(NULL, k, v, keep, 4, DD);
    /* a backend without the eviction kernels is refused a cache smaller than the run */
    forward_kernels partial = FORWARD_CPU;
    partial.compact = NULL;
    forward_state s;
    kv_err err = {0};
    assert_int_equal(forward_init_cache(&s, &M, &partial, NULL, T, N + B, B, &err), KV_EUSAGE);
    assert_int_equal(forward_init_cache(&s, &M, &partial, NULL, T, T, B, &err), 0);
    forward_free(&s);
    assert_memory_equal(k, wk, sizeof(float) * 4 * DD);
    assert_memory_equal(v, wv, sizeof(float) * 4 * DD);
    assert_ptr_equal(FORWARD_CPU.host_rows(NULL, k, 4, DD, wk), k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(n_at_least_t_equals_full),
        cmocka_unit_test(high_water_at_most_n_plus_b),
        cmocka_unit_test(oracle_refused),
        cmocka_unit_test(cpu_compact_kernel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
