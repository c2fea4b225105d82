/* capture/run.h, one model run over a token sequence, on random:stories260k:
 * a recorded run and an unrecorded one (no output: --dry-run's path) step
 * to the same logits, and only the first writes a file; the trace holds the
 * walk's own keys (seen through a plain forward observer), column sums whose
 * every row sums to one, the log-probabilities of the logits the run handed
 * out (computed here in double, the last one NaN), and the metadata of the
 * run; an evicting run's caches stay within N + B and its logits equal the
 * full run's until the first eviction; a sliding window shorter than the
 * sequence is refused before anything is written; run_sequence's prompt
 * sources; and, where the host emulation of the CUDA library is built, the
 * same run on the cuda backend (staged recording, column sums summed by the
 * backend) against the CPU's. */
#include "testutil.h"

#include <hdf5.h>
#include <math.h>

#include "capture/run.h"
#include "core/rng.h"
#include "core/version.h"
#include "model/forward.h"

enum { P = 24, GEN = 16, T = P + GEN, B = 8, N = 12 };

static kv_model M;
static int32_t PROMPT[P];

static int setup(void **state)
{
    if (tu_group_setup(state)) return -1;
    kv_err err = {0};
    if (model_load("random:stories260k:5", NULL, &M, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    kv_rng r;
    rng_init(&r, 11, 0, 0, 0);
    for (int i = 0; i < P; i++) PROMPT[i] = (int32_t)(rng_uniform(&r) * (double)M.cfg.vocab_size) % (int32_t)M.cfg.vocab_size;
    return 0;
}

static int teardown(void **state)
{
    model_free(&M);
    return tu_group_teardown(state);
}

static run_opts opts_of(int32_t *tokens, const char *output)
{
    run_opts o = {.model = &M, .model_path = "random:stories260k:5", .tokens = tokens, .T = T, .P = P, .chunk = B,
                  .output = output, .verb = "testrun", .trace = {.storage = TRACE_F32}};
    o.trace.want[TRACE_QUERIES] = o.trace.want[TRACE_COLSUM] = o.trace.want[TRACE_LOGPROBS] = true;
    return o;
}

static int32_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* Prefill in chunks of B, then GEN greedy tokens, one run or two in lockstep
 * (their logits compared at every step); logits [T][V] of the first kept. */
static void drive(kv_run *a, kv_run *b, int32_t *tokens, float *logits, int equal_steps)
{
    kv_err err = {0};
    const int64_t V = M.cfg.vocab_size;
    int64_t t = 0, step = 0, last = 0;
    while (t < T) {
        const int64_t n = t < P ? (P - t < B ? P - t : B) : 1;
        if (t >= P) {
            tokens[t] = argmax(run_logits(a) + (last - 1) * V, V);
            run_known(a, t + 1);
            if (b) run_known(b, t + 1);
        }
        assert_int_equal(run_step(a, n, &err), KV_OK);
        if (b) assert_int_equal(run_step(b, n, &err), KV_OK);
        if (b && (equal_steps < 0 || step < equal_steps))
            assert_memory_equal(run_logits(a), run_logits(b), sizeof(float) * (size_t)(n * V));
        memcpy(logits + t * V, run_logits(a), sizeof(float) * (size_t)(n * V));
        t += n, last = n, step++;
    }
}

typedef struct {
    float *keys; /* [L][T][K*D] */
} seen;

static int on_qkv(void *ctx, int64_t l, int64_t pos0, int64_t n, const float *q, const float *k, const float *v,
                  kv_err *err)
{
    (void)q, (void)v, (void)err;
    const int64_t KD = M.cfg.n_kv_heads * M.cfg.head_dim;
    memcpy(((seen *)ctx)->keys + (l * T + pos0) * KD, k, sizeof(float) * (size_t)(n * KD));
    return KV_OK;
}

/* The walk's keys for tokens [T], through forward.h directly. */
static void plain_walk_keys(const int32_t *tokens, float *keys)
{
    forward_state s;
    kv_err err = {0};
    assert_int_equal(forward_init(&s, &M, &FORWARD_CPU, NULL, T, B, &err), KV_OK);
    seen sn = {keys};
    forward_observer obs = {.ctx = &sn, .on_qkv = on_qkv};
    for (int64_t t = 0; t < T;) {
        const int64_t n = t < P ? (P - t < B ? P - t : B) : 1;
        assert_int_equal(forward_chunk(&s, tokens + t, n, &obs, &err), KV_OK);
        t += n;
    }
    forward_free(&s);
}

static void read_logprobs(const char *path, float *out)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t d = H5Dopen2(f, "/logprobs", H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0);
    H5Dclose(d);
    H5Fclose(f);
}

static void check_trace(const char *path, const int32_t *tokens, const float *logits)
{
    kv_err err = {0};
    trace *tr = NULL;
    assert_int_equal(trace_open(path, &tr, &err), KV_OK);
    const trace_meta *m = trace_get_meta(tr);
    char creator[128];
    snprintf(creator, sizeof creator, "kvtrace %s testrun", KVTRACE_VERSION);
    assert_string_equal(m->creator, creator);
    assert_string_equal(m->capture_mode, "full");
    assert_int_equal(m->n_tokens, T);
    assert_int_equal(m->prompt_len, P);
    assert_int_equal(m->capture_chunk, B);
    int32_t got[T];
    assert_int_equal(trace_read_tokens(tr, got, &err), KV_OK);
    assert_memory_equal(got, tokens, sizeof got);
    /* keys: the walk's own */
    const int64_t L = M.cfg.n_layers, K = M.cfg.n_kv_heads, D = M.cfg.head_dim, H = M.cfg.n_heads, V = M.cfg.vocab_size;
    float *walk = malloc(sizeof(float) * (size_t)(L * T * K * D)), *row = malloc(sizeof(float) * (size_t)(T * D));
    plain_walk_keys(tokens, walk);
    for (int64_t l = 0; l < L; l++)
        for (int64_t g = 0; g < K; g++) {
            assert_int_equal(trace_read_head(tr, TRACE_KEYS, l, g, row, &err), KV_OK);
            for (int64_t t = 0; t < T; t++)
                assert_memory_equal(row + t * D, walk + (l * T + t) * K * D + g * D, sizeof(float) * (size_t)D);
        }
    /* column sums: every row's weights sum to one, so a head's sums add up to T */
    for (int64_t l = 0; l < L; l++)
        for (int64_t h = 0; h < H; h++) {
            assert_int_equal(trace_read_head(tr, TRACE_COLSUM, l, h, row, &err), KV_OK);
            double sum = 0.0;
            for (int64_t t = 0; t < T; t++) sum += row[t];
            assert_true(fabs(sum - T) < 1e-3);
        }
    trace_close(tr);
    /* log-probabilities of the logits the run handed out */
    float lp[T];
    read_logprobs(path, lp);
    for (int64_t t = 0; t + 1 < T; t++) {
        const float *x = logits + t * V;
        double mx = x[0], s = 0.0;
        for (int64_t i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        for (int64_t i = 0; i < V; i++) s += exp((double)x[i] - mx);
        assert_true(fabs(lp[t] - ((double)x[tokens[t + 1]] - mx - log(s))) < 1e-5);
    }
    assert_true(isnan(lp[T - 1]));
    free(walk), free(row);
}

static void recorded_and_unrecorded_runs(void **state)
{
    (void)state;
    kv_err err = {0};
    char path[600], dir[512];
    snprintf(dir, sizeof dir, "%s/runs", tu_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/full.h5", dir);
    int32_t tokens[T];
    memcpy(tokens, PROMPT, sizeof PROMPT);
    const run_opts ro = opts_of(tokens, path), rd = opts_of(tokens, NULL);
    kv_run *a = NULL, *b = NULL;
    assert_int_equal(run_open(&a, &ro, &err), KV_OK);
    assert_int_equal(run_open(&b, &rd, &err), KV_OK);
    float *logits = malloc(sizeof(float) * (size_t)(T * M.cfg.vocab_size));
    drive(a, b, tokens, logits, -1);
    assert_int_equal(run_cache_peak(a), T);
    assert_int_equal(run_finish(b, &err), KV_OK);
    assert_int_equal(run_finish(a, &err), KV_OK);
    run_free(a), run_free(b);
    assert_int_equal(tu_count_entries(dir), 1); /* the unrecorded run wrote nothing */
    check_trace(path, tokens, logits);
    free(logits);
}

static void evicting_run(void **state)
{
    (void)state;
    kv_err err = {0};
    policy_config pc;
    assert_int_equal(policy_parse("h2o", &pc, &err), KV_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/evict.h5", tu_dir);
    int32_t tokens[T];
    memcpy(tokens, PROMPT, sizeof PROMPT);
    run_opts eo = opts_of(tokens, path);
    eo.evict = &pc, eo.budget = N;
    eo.trace.want[TRACE_COLSUM] = false;
    eo.trace.want[TRACE_EVICT_RETAINED] = eo.trace.want[TRACE_EVICT_STEP_END] = true;
    const run_opts fo = opts_of(tokens, NULL);
    kv_run *e = NULL, *f = NULL;
    assert_int_equal(run_open(&f, &fo, &err), KV_OK);
    assert_int_equal(run_open(&e, &eo, &err), KV_OK);
    float *logits = malloc(sizeof(float) * (size_t)(T * M.cfg.vocab_size));
    drive(f, e, tokens, logits, 2); /* chunks 1 and 2 (16 rows, N + B at most): nothing evicted before them */
    printf("# h2o at N = %d, B = %d: cache high-water %lld rows\n", N, B, (long long)run_cache_peak(e));
    assert_true(run_cache_peak(e) <= N + B);
    assert_int_equal(run_finish(e, &err), KV_OK);
    run_free(e), run_free(f);
    trace *tr = NULL;
    assert_int_equal(trace_open(path, &tr, &err), KV_OK);
    const trace_meta *m = trace_get_meta(tr);
    assert_string_equal(m->capture_mode, "evict");
    assert_string_equal(m->evict_policy, "h2o");
    assert_int_equal(m->evict_budget, N);
    assert_int_equal(m->evict_chunk, B);
    assert_true(trace_has(tr, TRACE_EVICT_RETAINED));
    trace_close(tr);
    free(logits);
}

static void sliding_window_refused(void **state)
{
    (void)state;
    kv_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/window.h5", tu_dir);
    int32_t tokens[T];
    memcpy(tokens, PROMPT, sizeof PROMPT);
    M.cfg.sliding_window = T - 1;
    const run_opts o = opts_of(tokens, path);
    kv_run *r = NULL;
    int rc = run_open(&r, &o, &err);
    run_free(r);
    M.cfg.sliding_window = 0;
    printf("# %s\n", err.msg);
    assert_int_equal(rc, KV_EUSAGE);
    assert_non_null(strstr(err.msg, "sliding-window attention (window 39) and the sequence has 40 tokens"));
    assert_int_equal(access(path, F_OK), -1);
}

static void sequence_sources(void **state)
{
    (void)state;
    kv_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/ids.txt", tu_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("1, 7 9\n", f);
    fclose(f);
    int32_t *tok = NULL;
    int64_t p = 0, t = 0;
    const prompt_source ids = {.tokens_file = path}, none = {0}, text = {.text = "Once"};
    assert_int_equal(prompt_sources(&ids), 1);
    assert_int_equal(prompt_sources(&none), 0);
    assert_int_equal(run_sequence(&ids, &M, "random:stories260k:5", 5, &tok, &p, &t, NULL, NULL, &err), KV_OK);
    assert_int_equal(p, 3);
    assert_int_equal(t, 8);
    assert_int_equal(tok[0], 1);
    assert_int_equal(tok[1], 7);
    assert_int_equal(tok[2], 9);
    tok[7] = 3; /* room for the generated tokens */
    free(tok), tok = NULL;
    assert_int_equal(run_sequence(&none, &M, "random:stories260k:5", 0, &tok, &p, &t, NULL, NULL, &err), KV_OK);
    assert_int_equal(p, 1); /* BOS alone: no vocabulary, id 1 */
    assert_int_equal(tok[0], 1);
    free(tok), tok = NULL;
    assert_int_equal(run_sequence(&text, &M, "random:stories260k:5", 0, &tok, &p, &t, NULL, NULL, &err), KV_EUSAGE);
    assert_string_equal(err.msg, "random:stories260k:5 has no vocabulary to encode a prompt: give --tokens FILE (or "
                                 "--tokenizer FILE, a llama2.c tokenizer, for a llama2.c checkpoint or a random model)");
    assert_null(tok);
    /* the text comes back only for a text prompt; one that is not UTF-8 is refused naming the offset */
    char *txt = (char *)"unset";
    assert_int_equal(run_sequence(&ids, &M, "random:stories260k:5", 0, &tok, &p, &t, &txt, NULL, &err), KV_OK);
    assert_null(txt);
    free(tok), tok = NULL;
    const prompt_source bad = {.text = "ab\xC3(c"};
    txt = (char *)"unset";
    err = (kv_err){0};
    assert_int_equal(run_sequence(&bad, &M, "random:stories260k:5", 0, &tok, &p, &t, &txt, NULL, &err), KV_EUSAGE);
    assert_string_equal(err.msg, "--prompt: the prompt is not valid UTF-8 at byte offset 2 (byte 0xC3)");
    assert_null(txt);
    assert_null(tok);
}

/* The host emulation of the CUDA library, where make built it. */
static bool emulation(char *path, size_t cap)
{
    const char *root = getenv("ROOT"), *build = getenv("BUILD");
    snprintf(path, cap, "%s/%s/emul/libkvcuda_emul.so", root ? root : ".", build ? build : "build");
    return access(path, F_OK) == 0;
}

static void cuda_backend_on_the_emulation(void **state)
{
    (void)state;
    char lib[4096], cpu_path[512], dev_path[512];
    if (!emulation(lib, sizeof lib)) tu_skip("%s not built (make tests builds it)", lib);
    setenv("KVTRACE_CUDA_LIB", lib, 1);
    kv_err err = {0};
    const backend_request req = {0};
    void *ctx = NULL;
    assert_int_equal(backend_open(&BACKEND_CUDA, &req, &ctx, &err), KV_OK);
    snprintf(cpu_path, sizeof cpu_path, "%s/cpu.h5", tu_dir);
    snprintf(dev_path, sizeof dev_path, "%s/dev.h5", tu_dir);
    int32_t tokens[T];
    memcpy(tokens, PROMPT, sizeof PROMPT);
    const run_opts co = opts_of(tokens, cpu_path);
    run_opts go = opts_of(tokens, dev_path);
    go.backend = &BACKEND_CUDA, go.backend_ctx = ctx;
    kv_run *c = NULL, *g = NULL;
    assert_int_equal(run_open(&c, &co, &err), KV_OK);
    assert_int_equal(run_open(&g, &go, &err), KV_OK);
    const int64_t V = M.cfg.vocab_size;
    double *ref = malloc(sizeof(double) * (size_t)(T * V));
    float *got = malloc(sizeof(float) * (size_t)(T * V));
    for (int64_t t = 0, last = 0; t < T;) { /* the CPU's greedy tokens drive both */
        const int64_t n = t < P ? (P - t < B ? P - t : B) : 1;
        if (t >= P) {
            tokens[t] = argmax(run_logits(c) + (last - 1) * V, V);
            run_known(c, t + 1), run_known(g, t + 1);
        }
        assert_int_equal(run_step(c, n, &err), KV_OK);
        assert_int_equal(run_step(g, n, &err), KV_OK);
        for (int64_t i = 0; i < n * V; i++) ref[t * V + i] = run_logits(c)[i];
        memcpy(got + t * V, run_logits(g), sizeof(float) * (size_t)(n * V));
        t += n, last = n;
    }
    assert_int_equal(tu_close_array("logits", ref, got, (size_t)(T * V), 1e-4, 1e-4), 0);
    free(ref), free(got);
    assert_int_equal(run_finish(c, &err), KV_OK);
    assert_int_equal(run_finish(g, &err), KV_OK);
    run_free(c), run_free(g);
    backend_close(&BACKEND_CUDA, ctx);
    unsetenv("KVTRACE_CUDA_LIB");
    trace *a = NULL, *b = NULL;
    assert_int_equal(trace_open(cpu_path, &a, &err), KV_OK);
    assert_int_equal(trace_open(dev_path, &b, &err), KV_OK);
    float ra[T * 64], rb[T * 64];
    double rr[T * 64];
    assert_true(M.cfg.head_dim <= 64);
    const trace_dset sets[] = {TRACE_KEYS, TRACE_QUERIES, TRACE_COLSUM};
    for (size_t s = 0; s < 3; s++) {
        const int64_t w = sets[s] == TRACE_COLSUM ? 1 : M.cfg.head_dim;
        assert_int_equal(trace_read_head(a, sets[s], 1, 0, ra, &err), KV_OK);
        assert_int_equal(trace_read_head(b, sets[s], 1, 0, rb, &err), KV_OK);
        for (int64_t i = 0; i < T * w; i++) rr[i] = ra[i];
        assert_int_equal(tu_close_array(trace_dset_path(sets[s]), rr, rb, (size_t)(T * w), 1e-5, 1e-4), 0);
    }
    trace_close(a), trace_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(recorded_and_unrecorded_runs),
        cmocka_unit_test(evicting_run),
        cmocka_unit_test(sliding_window_refused),
        cmocka_unit_test(sequence_sources),
        cmocka_unit_test(cuda_backend_on_the_emulation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
