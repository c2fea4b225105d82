/* synth: exact column sums (vs brute force over the written trace),
 * determinism by seed, and the key geometry it promises (docs/synth.md). */
#include "testutil.h"

#include <hdf5.h>
#include <math.h>

#include "core/rope.h"
#include "trace/trace.h"
#include "synth/synth.h"

static synth_config config(int64_t L, int64_t H, int64_t K, int64_t D, int64_t T, uint64_t seed)
{
    synth_config c;
    memset(&c, 0, sizeof c);
    trace_meta *m = &c.meta;
    snprintf(m->creator, sizeof m->creator, "test_synth");
    snprintf(m->model_name, sizeof m->model_name, "synth:test");
    snprintf(m->architecture, sizeof m->architecture, "llama");
    snprintf(m->rope_style, sizeof m->rope_style, "neox");
    snprintf(m->capture_mode, sizeof m->capture_mode, "full");
    m->n_layers = L, m->n_heads = H, m->n_kv_heads = K, m->head_dim = D;
    m->n_tokens = T, m->prompt_len = T, m->vocab_size = 1000, m->rope_theta = 500000.0;
    c.seed = seed;
    synth_geometry_default(&c.geo);
    return c;
}

typedef struct {
    float *rope, *k, *v, *q;
} unit_bufs;

static unit_bufs make_unit(const synth_config *c, int64_t layer, int64_t kv)
{
    const trace_meta *m = &c->meta;
    size_t td = (size_t)(m->n_tokens * m->head_dim), G = (size_t)(m->n_heads / m->n_kv_heads);
    unit_bufs b = {malloc(td * 4), malloc(td * 4), malloc(td * 4), malloc(td * G * 4)};
    assert_true(b.rope && b.k && b.v && b.q);
    rope_table_fill(b.rope, m->n_tokens, m->head_dim, m->rope_theta);
    synth_unit(c, b.rope, layer, kv, b.k, b.v, b.q);
    return b;
}

static void free_unit(unit_bufs *b)
{
    free(b->rope), free(b->k), free(b->v), free(b->q);
}

static void same_seed_same_values(void **state)
{
    (void)state;
    synth_config c = config(2, 4, 2, 16, 100, 42);
    unit_bufs a = make_unit(&c, 1, 1), b = make_unit(&c, 1, 1);
    size_t td = 100 * 16;
    assert_memory_equal(a.k, b.k, td * 4);
    assert_memory_equal(a.v, b.v, td * 4);
    assert_memory_equal(a.q, b.q, 2 * td * 4);
    c.seed = 43;
    unit_bufs d = make_unit(&c, 1, 1);
    assert_true(memcmp(a.k, d.k, td * 4) != 0);
    assert_true(memcmp(a.q, d.q, td * 4) != 0);
    /* another (layer, head) is another stream */
    c.seed = 42;
    unit_bufs e = make_unit(&c, 0, 1);
    assert_true(memcmp(a.k, e.k, td * 4) != 0);
    free_unit(&a), free_unit(&b), free_unit(&d), free_unit(&e);
}

/* Brute force in double: the T x T causal softmax of one head, summed over rows. */
static void brute_colsum(const float *q, const float *k, int T, int D, double *out)
{
    double *row = malloc(sizeof(double) * (size_t)T);
    for (int j = 0; j < T; j++) out[j] = 0;
    for (int i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int d = 0; d < D; d++) s += (double)q[i * D + d] * k[j * D + d];
            row[j] = s / sqrt((double)D);
            mx = fmax(mx, row[j]);
        }
        for (int j = 0; j <= i; j++) sum += exp(row[j] - mx);
        for (int j = 0; j <= i; j++) out[j] += exp(row[j] - mx) / sum;
    }
    free(row);
}

static void written_colsum_is_exact(void **state)
{
    (void)state;
    enum { L = 2, H = 4, K = 2, D = 8, T = 150 };
    synth_config c = config(L, H, K, D, T, 7);
    char path[512];
    snprintf(path, sizeof path, "%s/synth.h5", tu_dir);
    trace_create_opts o = {0};
    kv_err err = {0};
    c.threads = 1;
    assert_int_equal(synth_write(&c, path, &o, true, &err), 0);
    /* the thread count changes nothing: byte-identical files */
    char path3[600], cmd[1400];
    snprintf(path3, sizeof path3, "%s/synth3.h5", tu_dir);
    c.threads = 3;
    assert_int_equal(synth_write(&c, path3, &o, true, &err), 0);
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, path3);
    assert_int_equal(system(cmd), 0);
    trace *tr;
    assert_int_equal(trace_open(path, &tr, &err), 0);
    assert_true(trace_has(tr, TRACE_QUERIES) && trace_has(tr, TRACE_COLSUM));
    static float q[T * D], k[T * D], cs[T];
    static double ref[T];
    int bad = 0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            assert_int_equal(trace_read_head(tr, TRACE_QUERIES, l, h, q, &err), 0);
            assert_int_equal(trace_read_head(tr, TRACE_KEYS, l, h / (H / K), k, &err), 0);
            assert_int_equal(trace_read_head(tr, TRACE_COLSUM, l, h, cs, &err), 0);
            brute_colsum(q, k, T, D, ref);
            bad += tu_close_array("synth colsum", ref, cs, T, 1e-6, 1e-5);
        }
    assert_int_equal(bad, 0);
    int32_t tok[T];
    assert_int_equal(trace_read_tokens(tr, tok, &err), 0);
    assert_int_equal(tok[0], 1); /* BOS */
    trace_close(tr);
    assert_int_equal(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

static double dot(const float *a, const float *b, int D)
{
    double s = 0;
    for (int d = 0; d < D; d++) s += (double)a[d] * b[d];
    return s;
}

static void ranks(const double *x, int n, double *r)
{
    for (int i = 0; i < n; i++) {
        int less = 0, equal = 0;
        for (int j = 0; j < n; j++) less += x[j] < x[i], equal += x[j] == x[i];
        r[i] = less + (equal + 1) / 2.0;
    }
}

static double pearson(const double *a, const double *b, int n)
{
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (int i = 0; i < n; i++) ma += a[i] / n, mb += b[i] / n;
    for (int i = 0; i < n; i++)
        sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
    return sab / sqrt(saa * sbb);
}

/* The KeyDiff geometry: collinear keys, tight norms, queries against the mean
 * key, sinks that draw attention, distinctiveness correlated with attention. */
static void key_geometry(void **state)
{
    (void)state;
    enum { D = 64, T = 600 };
    synth_config c = config(4, 8, 2, D, T, 11);
    unit_bufs b = make_unit(&c, 2, 0);
    static double cs[T], x[T], y[T], rx[T], ry[T];
    brute_colsum(b.q, b.k, T, D, cs);

    double mean_cos = 0, norm_mean = 0, norm_sq = 0;
    float mk[D] = {0}, mq[D] = {0};
    for (int i = 0; i < T; i++) {
        double ni = sqrt(dot(b.k + i * D, b.k + i * D, D));
        norm_mean += ni / T, norm_sq += ni * ni / T;
        double row = 0;
        for (int j = 0; j < T; j++)
            if (j != i) row += dot(b.k + i * D, b.k + j * D, D) / (ni * sqrt(dot(b.k + j * D, b.k + j * D, D)));
        x[i] = -row / (T - 1);
        mean_cos += row / ((double)T * (T - 1));
        y[i] = cs[i] / (T - i);
        for (int d = 0; d < D; d++) mk[d] += b.k[i * D + d] / T, mq[d] += b.q[i * D + d] / T;
    }
    double cv = sqrt(norm_sq - norm_mean * norm_mean) / norm_mean;
    double qk_cos = dot(mq, mk, D) / sqrt(dot(mq, mq, D) * dot(mk, mk, D));
    ranks(x, T, rx), ranks(y, T, ry);
    double rho = pearson(rx, ry, T);
    double sink_share = 0;
    for (int j = 0; j < 4; j++) sink_share += cs[j] / T;
    printf("# mean pairwise cos %.3f, norm cv %.3f, cos(mean q, mean k) %.3f, rho %.3f, sink share %.3f\n",
           mean_cos, cv, qk_cos, rho, sink_share);
    assert_true(mean_cos > 0.4);    /* nearly collinear */
    assert_true(cv < 0.1);          /* norms tightly clustered */
    assert_true(qk_cos < -0.5);     /* queries lean against the mean key */
    assert_true(rho > 0.2);         /* distinctive keys receive more attention */
    assert_true(sink_share > 0.2);  /* four sinks draw a large share */
    free_unit(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_seed_same_values),
        cmocka_unit_test(written_colsum_is_exact),
        cmocka_unit_test(key_geometry),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
