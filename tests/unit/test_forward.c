/* The forward pass against a plain-loop reference in double, on a tiny
 * random model built here (GQA with 2 query heads per kv head, both RoPE
 * layouts; with and without QKV biases, per-head q/k norms and RoPE
 * frequency divisors), and chunk-size invariance of logits and attention
 * weights. */
#include "testutil.h"

#include <math.h>

#include "model/forward.h"
#include "core/rng.h"

enum { L = 2, DIM = 16, H = 4, K = 2, D = 4, FFN = 24, V = 20, T = 11 };

static float *rand_vec(kv_rng *r, size_t n, double scale)
{
    float *x = malloc(sizeof(float) * n);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal(r));
    return x;
}

enum { F_BIAS = 1, F_QKNORM = 2, F_ROPEDIV = 4 };
static double ROPE_DIV[D / 2] = {1.0, 5.5}; /* pair 1 turns 5.5 times slower */

static void build(kv_model *m, rope_style style, int features)
{
    memset(m, 0, sizeof *m);
    model_config *c = &m->cfg;
    snprintf(c->architecture, sizeof c->architecture, "llama");
    c->n_layers = L, c->dim = DIM, c->ffn_dim = FFN, c->n_heads = H, c->n_kv_heads = K, c->head_dim = D;
    c->vocab_size = V, c->rope_theta = 10000.0, c->norm_eps = 1e-5, c->rope = style;
    kv_rng r;
    rng_init(&r, 99, 0, 0, 0);
    m->tok_embd = rand_vec(&r, V * DIM, 1.0);
    m->output_norm = rand_vec(&r, DIM, 0.2);
    for (int i = 0; i < DIM; i++) m->output_norm[i] += 1.0f;
    m->output = rand_vec(&r, V * DIM, 0.5);
    m->layers = calloc(L, sizeof *m->layers);
    for (int l = 0; l < L; l++) {
        model_layer *w = &m->layers[l];
        w->attn_norm = rand_vec(&r, DIM, 0.2), w->ffn_norm = rand_vec(&r, DIM, 0.2);
        for (int i = 0; i < DIM; i++) w->attn_norm[i] += 1.0f, w->ffn_norm[i] += 1.0f;
        w->wq = rand_vec(&r, H * D * DIM, 0.6), w->wk = rand_vec(&r, K * D * DIM, 0.6);
        w->wv = rand_vec(&r, K * D * DIM, 0.5), w->wo = rand_vec(&r, DIM * H * D, 0.3);
        w->w_gate = rand_vec(&r, FFN * DIM, 0.4), w->w_up = rand_vec(&r, FFN * DIM, 0.4);
        w->w_down = rand_vec(&r, DIM * FFN, 0.3);
        if (features & F_BIAS)
            w->bq = rand_vec(&r, H * D, 0.5), w->bk = rand_vec(&r, K * D, 0.5), w->bv = rand_vec(&r, K * D, 0.5);
        if (features & F_QKNORM) w->q_norm = rand_vec(&r, D, 1.0), w->k_norm = rand_vec(&r, D, 1.0);
    }
    if (features & F_ROPEDIV) m->rope_div = ROPE_DIV;
}

static void destroy(kv_model *m)
{
    free(m->tok_embd), free(m->output_norm), free(m->output);
    for (int l = 0; l < L; l++) {
        model_layer *w = &m->layers[l];
        free(w->attn_norm), free(w->ffn_norm), free(w->wq), free(w->wk), free(w->wv), free(w->wo);
        free(w->w_gate), free(w->w_up), free(w->w_down);
        free(w->bq), free(w->bk), free(w->bv), free(w->q_norm), free(w->k_norm);
    }
    free(m->layers);
}

/* y[out] = W[out][in] x[in] */
static void matvec(const float *w, const double *x, double *y, int out, int in)
{
    for (int o = 0; o < out; o++) {
        y[o] = 0;
        for (int i = 0; i < in; i++) y[o] += (double)w[o * in + i] * x[i];
    }
}

static void rmsnorm_n(const double *x, const float *w, double *out, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

static void rmsnorm(const double *x, const float *w, double *out)
{
    rmsnorm_n(x, w, out, DIM);
}

/* bias, per-head norm and RoPE of one row's heads x[heads][D] */
static void qk_head(double *x, int heads, const float *bias, const float *norm, int pos, const kv_model *m)
{
    for (int i = 0; bias && i < heads * D; i++) x[i] += bias[i];
    for (int h = 0; h < heads; h++) {
        double *v = x + h * D;
        if (norm) rmsnorm_n(v, norm, v, D);
        for (int p = 0; p < D / 2; p++) {
            double ang = pos * pow(10000.0, -2.0 * p / D) / (m->rope_div ? m->rope_div[p] : 1.0);
            int a = m->cfg.rope == ROPE_INTERLEAVED ? 2 * p : p;
            int b = m->cfg.rope == ROPE_INTERLEAVED ? 2 * p + 1 : p + D / 2;
            double xa = v[a], xb = v[b];
            v[a] = xa * cos(ang) - xb * sin(ang);
            v[b] = xa * sin(ang) + xb * cos(ang);
        }
    }
}

/* Whole-sequence reference: logits[T][V] and attention weights att[L][H][T][T]. */
static void reference(const kv_model *m, const int32_t *tok, double *logits, double *att)
{
    static double x[T][DIM], xb[DIM], q[T][H * D], k[T][K * D], v[T][K * D], o[H * D], tmp[DIM], g[FFN], u[FFN];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < DIM; i++) x[t][i] = ((const float *)m->tok_embd)[tok[t] * DIM + i];
    for (int l = 0; l < L; l++) {
        const model_layer *w = &m->layers[l];
        for (int t = 0; t < T; t++) {
            rmsnorm(x[t], w->attn_norm, xb);
            matvec(w->wq, xb, q[t], H * D, DIM), matvec(w->wk, xb, k[t], K * D, DIM), matvec(w->wv, xb, v[t], K * D, DIM);
            qk_head(q[t], H, w->bq, w->q_norm, t, m);
            qk_head(k[t], K, w->bk, w->k_norm, t, m);
            for (int i = 0; w->bv && i < K * D; i++) v[t][i] += w->bv[i];
        }
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < H; h++) {
                int kv = h / (H / K);
                double s[T], mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    s[j] = 0;
                    for (int d = 0; d < D; d++) s[j] += q[t][h * D + d] * k[j][kv * D + d];
                    s[j] /= sqrt((double)D);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                for (int d = 0; d < D; d++) o[h * D + d] = 0;
                for (int j = 0; j < T; j++) {
                    double a = j <= t ? exp(s[j] - mx) / sum : 0;
                    att[((l * H + h) * T + t) * T + j] = a;
                    for (int d = 0; d < D && j <= t; d++) o[h * D + d] += a * v[j][kv * D + d];
                }
            }
            matvec(w->wo, o, tmp, DIM, H * D);
            for (int i = 0; i < DIM; i++) x[t][i] += tmp[i];
        }
        for (int t = 0; t < T; t++) {
            rmsnorm(x[t], w->ffn_norm, xb);
            matvec(w->w_gate, xb, g, FFN, DIM), matvec(w->w_up, xb, u, FFN, DIM);
            for (int i = 0; i < FFN; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            matvec(w->w_down, g, tmp, DIM, FFN);
            for (int i = 0; i < DIM; i++) x[t][i] += tmp[i];
        }
    }
    for (int t = 0; t < T; t++) {
        rmsnorm(x[t], m->output_norm, xb);
        matvec(m->output, xb, logits + t * V, V, DIM);
    }
}

typedef struct {
    float logits[T * V];
    float att[L * H * T * T];
} observed;

static int on_attention(void *ctx, int64_t l, int64_t h, int64_t pos0, int64_t n, const float *p, kv_err *err)
{
    (void)err;
    observed *o = ctx;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < pos0 + n; j++) o->att[((l * H + h) * T + pos0 + i) * T + j] = p[i * (pos0 + n) + j];
    return KV_OK;
}

static int on_logits(void *ctx, int64_t pos0, int64_t n, const float *logits, kv_err *err)
{
    (void)err;
    memcpy(((observed *)ctx)->logits + pos0 * V, logits, sizeof(float) * (size_t)(n * V));
    return KV_OK;
}

static void run_chunks(const kv_model *m, const int32_t *tok, int64_t B, observed *o)
{
    forward_state s;
    kv_err err = {0};
    memset(o, 0, sizeof *o);
    assert_int_equal(forward_init(&s, m, &FORWARD_CPU, NULL, T, B, &err), 0);
    forward_observer obs = {.ctx = o, .on_attention = on_attention, .on_logits = on_logits};
    for (int64_t p0 = 0; p0 < T; p0 += B) assert_int_equal(forward_chunk(&s, tok + p0, T - p0 < B ? T - p0 : B, &obs, &err), 0);
    forward_free(&s);
}

static void matches_reference(void **state)
{
    (void)state;
    const int32_t tok[T] = {1, 5, 7, 19, 0, 3, 3, 12, 8, 2, 11};
    for (int style = 0; style < 2; style++) {
        for (int features = 0; features < 8; features++) {
            kv_model m;
            build(&m, (rope_style)style, features);
            static double ref_logits[T * V], ref_att[L * H * T * T];
            reference(&m, tok, ref_logits, ref_att);
            static observed o;
            const int64_t chunks[] = {1, 3, 4, T};
            for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
                run_chunks(&m, tok, chunks[c], &o);
                char what[96];
                snprintf(what, sizeof what, "logits (%s rope, features %d, B=%lld)", style ? "neox" : "interleaved",
                         features, (long long)chunks[c]);
                assert_int_equal(tu_close_array(what, ref_logits, o.logits, T * V, 1e-5, 1e-4), 0);
                snprintf(what, sizeof what, "attention (%s rope, features %d, B=%lld)",
                         style ? "neox" : "interleaved", features, (long long)chunks[c]);
                assert_int_equal(tu_close_array(what, ref_att, o.att, L * H * T * T, 1e-6, 1e-4), 0);
            }
            destroy(&m);
        }
    }
}

static void rejects_bad_tokens_and_overflow(void **state)
{
    (void)state;
    kv_model m;
    build(&m, ROPE_INTERLEAVED, 0);
    forward_state s;
    kv_err err = {0};
    assert_int_equal(forward_init(&s, &m, &FORWARD_CPU, NULL, 4, 2, &err), 0);
    int32_t bad[2] = {1, V};
    assert_int_equal(forward_chunk(&s, bad, 2, NULL, &err), KV_EINPUT);
    kv_err_clear(&err);
    int32_t ok[3] = {1, 2, 3};
    assert_int_equal(forward_chunk(&s, ok, 3, NULL, &err), KV_EFAIL); /* above max_chunk */
    kv_err_clear(&err);
    assert_int_equal(forward_chunk(&s, ok, 2, NULL, &err), 0);
    assert_int_equal(forward_chunk(&s, ok, 2, NULL, &err), 0);
    assert_int_equal(forward_chunk(&s, ok, 1, NULL, &err), KV_EFAIL); /* cache full */
    forward_free(&s);
    destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_reference),
        cmocka_unit_test(rejects_bad_tokens_and_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
