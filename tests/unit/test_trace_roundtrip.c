/* Trace writer -> reader round trips: f32 exact, f16 within half rounding,
 * appended in several pieces and out of order; writer failures leave nothing. */
#include "testutil.h"

#include <hdf5.h>
#include <math.h>

#include "core/half.h"
#include "trace/trace.h"

enum { L = 2, H = 4, K = 2, D = 6, T = 37, V = 50 };

static trace_meta small_meta(void)
{
    trace_meta m = {0};
    snprintf(m.creator, sizeof m.creator, "test_trace_roundtrip");
    snprintf(m.model_name, sizeof m.model_name, "tiny");
    snprintf(m.architecture, sizeof m.architecture, "llama");
    snprintf(m.rope_style, sizeof m.rope_style, "neox");
    snprintf(m.capture_mode, sizeof m.capture_mode, "full");
    m.n_layers = L, m.n_heads = H, m.n_kv_heads = K, m.head_dim = D, m.vocab_size = V;
    m.prompt_len = 30, m.capture_chunk = 10, m.rope_theta = 500000.0;
    return m;
}

/* Deterministic, distinct values per (dataset, layer, head, t, d). */
static float value(int which, int l, int h, int t, int d)
{
    return (float)sin(1.0 + which * 7.1 + l * 3.3 + h * 1.7 + t * 0.37 + d * 0.11) * (1.0f + (float)t);
}

/* which 3 (colsum, full attention): non-negative; 6 (kvzip): in [0, 1] */
static void fill_rows(int which, int l, int h, int t0, int n, int width, float *out)
{
    for (int r = 0; r < n; r++)
        for (int d = 0; d < width; d++) {
            const float x = value(which, l, h, t0 + r, d);
            out[r * width + d] = which == 3 ? fabsf(x) : which == 6 ? fabsf(x) / (1.0f + (float)(t0 + r)) : x;
        }
}

static void path_in_dir(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tu_dir, name);
}

/* Writes the whole trace in pieces [0,10) [10,20) [20,30) [30,37), heads in reverse order. */
static void write_trace(const char *path, trace_dtype storage, int deflate)
{
    trace_meta m = small_meta();
    trace_create_opts o = {.storage = storage, .deflate = deflate};
    o.want[TRACE_QUERIES] = o.want[TRACE_COLSUM] = o.want[TRACE_LOGITS] = o.want[TRACE_LOGPROBS] = true;
    o.want[TRACE_ATTN_FULL] = o.want[TRACE_KVZIP] = o.want[TRACE_ATTN_OUT] = o.want[TRACE_ATTN_LSE] = true;
    o.want[TRACE_ATTN_MAX] = true;
    trace_writer *w;
    kv_err err = {0};
    assert_int_equal(trace_create(path, &m, &o, &w, &err), 0);
    float buf[T * (V > T ? V : T)];
    const int starts[] = {0, 10, 20, 30, T};
    for (int p = 3; p >= 0; p--) { /* pieces out of order too */
        int t0 = starts[p], n = starts[p + 1] - t0;
        int32_t tok[10];
        for (int i = 0; i < n; i++) tok[i] = (int32_t)((t0 + i) * 7 % V);
        assert_int_equal(trace_write_tokens(w, t0, n, tok, &err), 0);
        for (int l = 0; l < L; l++) {
            for (int h = H - 1; h >= 0; h--) {
                if (h < K) {
                    fill_rows(0, l, h, t0, n, D, buf);
                    assert_int_equal(trace_write_rows(w, TRACE_KEYS, l, h, t0, n, buf, &err), 0);
                    fill_rows(1, l, h, t0, n, D, buf);
                    assert_int_equal(trace_write_rows(w, TRACE_VALUES, l, h, t0, n, buf, &err), 0);
                }
                fill_rows(2, l, h, t0, n, D, buf);
                assert_int_equal(trace_write_rows(w, TRACE_QUERIES, l, h, t0, n, buf, &err), 0);
                fill_rows(3, l, h, t0, n, 1, buf);
                assert_int_equal(trace_write_rows(w, TRACE_COLSUM, l, h, t0, n, buf, &err), 0);
                fill_rows(6, l, h, t0, n, 1, buf);
                assert_int_equal(trace_write_rows(w, TRACE_KVZIP, l, h, t0, n, buf, &err), 0);
                fill_rows(7, l, h, t0, n, D, buf);
                assert_int_equal(trace_write_rows(w, TRACE_ATTN_OUT, l, h, t0, n, buf, &err), 0);
                fill_rows(8, l, h, t0, n, 1, buf);
                assert_int_equal(trace_write_rows(w, TRACE_ATTN_LSE, l, h, t0, n, buf, &err), 0);
                fill_rows(9, l, h, t0, n, 1, buf);
                assert_int_equal(trace_write_rows(w, TRACE_ATTN_MAX, l, h, t0, n, buf, &err), 0);
            }
        }
        fill_rows(4, 0, 0, t0, n, V, buf);
        assert_int_equal(trace_write_rows(w, TRACE_LOGITS, 0, 0, t0, n, buf, &err), 0);
        fill_rows(5, 0, 0, t0, n, 1, buf);
        assert_int_equal(trace_write_rows(w, TRACE_LOGPROBS, 0, 0, t0, n, buf, &err), 0);
    }
    /* full attention: rows of width T written in one piece per head */
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            fill_rows(3, l, h, 0, T, T, buf);
            assert_int_equal(trace_write_rows(w, TRACE_ATTN_FULL, l, h, 0, T, buf, &err), 0);
        }
    assert_int_equal(trace_finish(w, &err), 0);
}

static float stored(trace_dtype storage, float x)
{
    return storage == TRACE_F16 ? half_to_float(half_from_float(x)) : x;
}

static void check_trace(const char *path, trace_dtype storage)
{
    trace *tr;
    kv_err err = {0};
    int rc = trace_open(path, &tr, &err);
    if (rc) printf("# %s\n", err.msg);
    assert_int_equal(rc, 0);
    const trace_meta *m = trace_get_meta(tr);
    assert_int_equal(m->n_tokens, T);
    assert_int_equal(m->prompt_len, 30);
    assert_int_equal(m->n_layers, L);
    assert_int_equal(m->storage, storage);
    assert_string_equal(m->rope_style, "neox");
    assert_string_equal(m->model_name, "tiny");
    assert_true(m->rope_theta == 500000.0);
    for (int d = 0; d < TRACE_NDSETS; d++)
        assert_int_equal(trace_has(tr, (trace_dset)d), d != TRACE_EVICT_RETAINED && d != TRACE_EVICT_STEP_END);

    int32_t tok[T];
    assert_int_equal(trace_read_tokens(tr, tok, &err), 0);
    for (int t = 0; t < T; t++) assert_int_equal(tok[t], t * 7 % V);

    float got[T * T], want[T * T];
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            struct { trace_dset d; int which, width; bool kv, storage_type; } cases[] = {
                {TRACE_KEYS, 0, D, true, true},     {TRACE_VALUES, 1, D, true, true},
                {TRACE_QUERIES, 2, D, false, true}, {TRACE_COLSUM, 3, 1, false, false},
                {TRACE_ATTN_FULL, 3, T, false, false}, {TRACE_KVZIP, 6, 1, false, false},
                {TRACE_ATTN_OUT, 7, D, false, false},  {TRACE_ATTN_LSE, 8, 1, false, false},
                {TRACE_ATTN_MAX, 9, 1, false, false},
            };
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                if (cases[c].kv && h >= K) continue;
                assert_int_equal(trace_read_head(tr, cases[c].d, l, h, got, &err), 0);
                fill_rows(cases[c].which, l, h, 0, T, cases[c].width, want);
                for (int i = 0; i < T * cases[c].width; i++) {
                    float w = cases[c].storage_type ? stored(storage, want[i]) : want[i];
                    assert_memory_equal(&got[i], &w, sizeof w);
                }
            }
            /* a partial read matches the whole */
            float part[5 * D];
            assert_int_equal(trace_read_rows(tr, TRACE_QUERIES, l, h, 17, 5, part, &err), 0);
            assert_int_equal(trace_read_head(tr, TRACE_QUERIES, l, h, got, &err), 0);
            assert_memory_equal(part, got + 17 * D, sizeof part);
        }
    /* out-of-range requests are refused, not read */
    assert_int_equal(trace_read_rows(tr, TRACE_KEYS, 0, K, 0, 1, got, &err), KV_EFAIL);
    kv_err_clear(&err);
    assert_int_equal(trace_read_rows(tr, TRACE_KEYS, 0, 0, T - 2, 3, got, &err), KV_EFAIL);
    kv_err_clear(&err);
    trace_dset_info info;
    assert_int_equal(trace_describe(tr, TRACE_KEYS, &info, &err), 0);
    assert_string_equal(info.type, storage == TRACE_F16 ? "float16" : "float32");
    trace_close(tr);
    assert_int_equal(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

static void roundtrip_f32(void **state)
{
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "f32.h5");
    write_trace(path, TRACE_F32, 0);
    check_trace(path, TRACE_F32);
}

static void roundtrip_f16_deflate(void **state)
{
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "f16.h5");
    write_trace(path, TRACE_F16, 6);
    check_trace(path, TRACE_F16);
}

static void refuses_existing_output(void **state)
{
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "f32.h5");
    trace_meta m = small_meta();
    trace_create_opts o = {0};
    trace_writer *w = NULL;
    kv_err err = {0};
    assert_int_equal(trace_create(path, &m, &o, &w, &err), KV_EUSAGE);
    assert_non_null(strstr(err.msg, "--force"));
    assert_null(w);
}

/* A writer that fails (uneven datasets) or is aborted leaves no file at all. */
static void failures_leave_nothing(void **state)
{
    (void)state;
    char sub[512];
    path_in_dir(sub, sizeof sub, "fail");
    assert_int_equal(mkdir(sub, 0700), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/out.h5", sub);
    trace_meta m = small_meta();
    trace_create_opts o = {0};
    trace_writer *w;
    kv_err err = {0};
    float rows[T * D] = {0};
    int32_t tok[T] = {0};

    assert_int_equal(trace_create(path, &m, &o, &w, &err), 0);
    assert_int_equal(trace_write_tokens(w, 0, T, tok, &err), 0);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < K; h++) {
            assert_int_equal(trace_write_rows(w, TRACE_KEYS, l, h, 0, T, rows, &err), 0);
            assert_int_equal(trace_write_rows(w, TRACE_VALUES, l, h, 0, T - 1, rows, &err), 0);
        }
    assert_int_equal(trace_finish(w, &err), KV_EFAIL);
    printf("# %s\n", err.msg);
    assert_non_null(strstr(err.msg, "/values"));
    assert_int_equal(tu_count_entries(sub), 0);

    kv_err_clear(&err);
    assert_int_equal(trace_create(path, &m, &o, &w, &err), 0);
    assert_int_equal(trace_write_tokens(w, 0, T, tok, &err), 0);
    trace_abort(w);
    assert_int_equal(tu_count_entries(sub), 0);

    /* a token outside the vocabulary and a dataset not asked for are refused */
    assert_int_equal(trace_create(path, &m, &o, &w, &err), 0);
    tok[3] = V;
    assert_int_equal(trace_write_tokens(w, 0, T, tok, &err), KV_EFAIL);
    kv_err_clear(&err);
    assert_int_equal(trace_write_rows(w, TRACE_QUERIES, 0, 0, 0, 1, rows, &err), KV_EFAIL);
    trace_abort(w);
    assert_int_equal(tu_count_entries(sub), 0);
    assert_int_equal(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

/* A NaN in the stored keys is reported with its position when read. */
static void nonfinite_values_are_refused(void **state)
{
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "nan.h5");
    trace_meta m = small_meta();
    trace_create_opts o = {0};
    trace_writer *w;
    kv_err err = {0};
    float rows[T * D];
    for (int i = 0; i < T * D; i++) rows[i] = 1.0f;
    int32_t tok[T] = {0};
    assert_int_equal(trace_create(path, &m, &o, &w, &err), 0);
    assert_int_equal(trace_write_tokens(w, 0, T, tok, &err), 0);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < K; h++) {
            rows[12 * D + 2] = l == 1 && h == 1 ? NAN : 1.0f;
            assert_int_equal(trace_write_rows(w, TRACE_KEYS, l, h, 0, T, rows, &err), 0);
            assert_int_equal(trace_write_rows(w, TRACE_VALUES, l, h, 0, T, rows, &err), 0);
        }
    assert_int_equal(trace_finish(w, &err), 0);
    trace *tr;
    assert_int_equal(trace_open(path, &tr, &err), 0);
    float got[T * D];
    assert_int_equal(trace_read_head(tr, TRACE_KEYS, 0, 0, got, &err), 0);
    assert_int_equal(trace_read_head(tr, TRACE_KEYS, 1, 1, got, &err), KV_EINPUT);
    printf("# %s\n", err.msg);
    assert_non_null(strstr(err.msg, "position 12"));
    trace_close(tr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip_f32),
        cmocka_unit_test(roundtrip_f16_deflate),
        cmocka_unit_test(refuses_existing_output),
        cmocka_unit_test(failures_leave_nothing),
        cmocka_unit_test(nonfinite_values_are_refused),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
