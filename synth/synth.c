/* Synthetic traces with the key geometry of real LLM caches.
 *
 * The generative model (docs/synth.md has the reasoning and the defaults):
 * per (layer, kv head) a mean key direction u, with its energy in the
 * low-frequency RoPE pairs (so rotation by position barely moves it: keys stay
 * nearly collinear after RoPE, as observed in Llama/Qwen caches), and a
 * shared "local" direction w in the high-frequency pairs (after RoPE, q.k
 * gains a term that depends on i - j only: recency). Keys are u plus small
 * noise, with a few sinks at the first positions and rare outliers pointing
 * away from u; norms are tightly clustered. Queries lean against u (their mean
 * has negative cosine to the mean key), so the keys least aligned with u, the
 * distinctive ones, receive the most attention: the KeyDiff observation. */
#include "synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn_colsum.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "core/rng.h"
#include "synth_ref.h"

enum { STREAM_DIRS, STREAM_KEYS, STREAM_VALUES, STREAM_QUERIES };

void synth_geometry_default(synth_geometry *g)
{
    g->key_spread = 0.3;
    g->layer_spread = 0.3;
    g->norm_spread = 0.05;
    g->sinks = 4;
    g->sink_away = 0.5;
    g->outlier_rate = 0.02;
    g->outlier_spread = 1.5;
    g->score_scale = 8.0;
    g->query_anti = 1.0;
    g->query_spread = 0.3;
    g->head_offset = 0.5;
    g->key_local = 0.5;
    g->query_local = 1.2;
    g->freq_power = 2.0;
}

static void normalize(double *x, int64_t D)
{
    double ss = 0.0;
    for (int64_t d = 0; d < D; d++) ss += x[d] * x[d];
    double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
    for (int64_t d = 0; d < D; d++) x[d] *= inv;
}

/* Unit vector whose pair p has amplitude profile(p) and a random phase. */
static void profiled_direction(kv_rng *r, int64_t D, rope_style style, double power,
                               bool low_freq, double *out)
{
    const int64_t P = D / 2;
    for (int64_t p = 0; p < P; p++) {
        double rank = low_freq ? (double)(p + 1) : (double)(P - p);
        double amp = pow(rank / (double)P, power);
        double phase = 2.0 * M_PI * rng_uniform(r);
        int64_t a, b;
        rope_pair_dims(style, D, p, &a, &b);
        out[a] = amp * cos(phase);
        out[b] = amp * sin(phase);
    }
    normalize(out, D);
}

/* Gaussian vector with E|x|^2 = 1. */
static void noise(kv_rng *r, int64_t D, double *out)
{
    double s = 1.0 / sqrt((double)D);
    for (int64_t d = 0; d < D; d++) out[d] = s * rng_normal(r);
}

/* out = |scale| * unit(unit(base) + local * w), rotated for position t. */
static void finish_vector(double *base, const double *w, double local, double scale, int64_t D,
                          rope_style style, const float *rope_tab, int64_t t, float *out)
{
    normalize(base, D);
    for (int64_t d = 0; d < D; d++) base[d] += local * w[d];
    normalize(base, D);
    for (int64_t d = 0; d < D; d++) out[d] = (float)(scale * base[d]);
    rope_table_apply(out, D, style, rope_tab, t);
}

void synth_unit(const synth_config *cfg, const float *rope_tab, int64_t layer, int64_t kv_head,
                float *keys, float *values, float *queries)
{
    const trace_meta *m = &cfg->meta;
    const synth_geometry *g = &cfg->geo;
    const int64_t D = m->head_dim, T = m->n_tokens, G = m->n_heads / m->n_kv_heads;
    const uint64_t L = (uint64_t)layer, K = (uint64_t)kv_head;
    rope_style style;
    KV_ASSERT(rope_style_parse(m->rope_style, &style));

    double *u = malloc(sizeof(double) * (size_t)D * 4);
    KV_ASSERT(u);
    double *w = u + D, *vmean = u + 2 * D, *x = u + 3 * D;
    kv_rng dirs, rk, rv;
    rng_init(&dirs, cfg->seed, STREAM_DIRS, L, K);
    rng_init(&rk, cfg->seed, STREAM_KEYS, L, K);
    rng_init(&rv, cfg->seed, STREAM_VALUES, L, K);
    profiled_direction(&dirs, D, style, g->freq_power, true, u);
    profiled_direction(&dirs, D, style, g->freq_power, false, w);
    for (int64_t d = 0; d < D; d++) vmean[d] = 0.5 * rng_normal(&dirs);

    /* earlier layers: more diverse keys */
    double depth = m->n_layers > 1 ? (double)layer / (double)(m->n_layers - 1) : 1.0;
    double spread = g->key_spread + g->layer_spread * (1.0 - depth);
    double sqrt_d = sqrt((double)D);
    for (int64_t t = 0; t < T; t++) {
        noise(&rk, D, x);
        bool sink = t < g->sinks;
        bool outlier = !sink && rng_uniform(&rk) < g->outlier_rate;
        double along = sink ? -g->sink_away : 1.0;
        double across = sink ? 1.0 : outlier ? g->outlier_spread : spread;
        for (int64_t d = 0; d < D; d++) x[d] = along * u[d] + across * x[d];
        double norm = sqrt_d * fmax(0.5, 1.0 + g->norm_spread * rng_normal(&rk));
        finish_vector(x, w, g->key_local, norm, D, style, rope_tab, t, keys + t * D);
        for (int64_t d = 0; d < D; d++) values[t * D + d] = (float)(vmean[d] + rng_normal(&rv));
    }

    /* |q| |k| / sqrt(D) = score_scale with |k| ~ sqrt(D): |q| = score_scale */
    for (int64_t j = 0; j < G; j++) {
        uint64_t h = (uint64_t)(kv_head * G + j);
        kv_rng rq;
        rng_init(&rq, cfg->seed, STREAM_QUERIES, L, h);
        double *offset = malloc(sizeof(double) * (size_t)D);
        KV_ASSERT(offset);
        noise(&rq, D, offset);
        normalize(offset, D);
        float *q = queries + j * T * D;
        for (int64_t t = 0; t < T; t++) {
            noise(&rq, D, x);
            for (int64_t d = 0; d < D; d++)
                x[d] = -g->query_anti * u[d] + g->head_offset * offset[d] + g->query_spread * x[d];
            finish_vector(x, w, g->query_local, g->score_scale, D, style, rope_tab, t, q + t * D);
        }
        free(offset);
    }
    free(u);
}

/* Token ids [T]: BOS (id 1, or 0 for a vocabulary of one) then uniform ids. */
static void synth_tokens(const synth_config *cfg, int32_t *tokens)
{
    kv_rng r;
    rng_init(&r, cfg->seed, 0x70c3u, 0, 0);
    const int64_t V = cfg->meta.vocab_size;
    for (int64_t t = 0; t < cfg->meta.n_tokens; t++)
        tokens[t] = t == 0 ? (V > 1 ? 1 : 0) : (int32_t)rng_below(&r, (uint64_t)V);
}

/* Column sums of one query head are split into COLSUM_PARTS fixed row ranges
 * (work items for the threads), each summed into its own partial array, then
 * combined in a fixed order: the same values whatever the thread count. */
enum { COLSUM_PARTS = 8 };

typedef struct {
    int64_t T, D, G;
    int threads;
    float *rope_tab;   /* [T][D] */
    float *keys;       /* [T][D] */
    float *values;     /* [T][D] */
    float *queries;    /* [G][T][D] */
    double *partial;   /* [G][COLSUM_PARTS][T] */
    float *colsum_f;   /* [T] */
    float *ref_out;    /* [G][T][D] /attention/out */
    float *ref_lse;    /* [G][T] /attention/lse */
    float *ref_max;    /* [G][T] /attention/max */
    float *scratch;    /* [threads][attn_colsum_scratch_floats(T)] */
    int32_t *tokens;   /* [T] */
    int64_t bounds[COLSUM_PARTS + 1];
} synth_buffers;

static void buffers_free(synth_buffers *b)
{
    free(b->rope_tab), free(b->keys), free(b->values), free(b->queries);
    free(b->partial), free(b->colsum_f), free(b->scratch), free(b->tokens);
    free(b->ref_out), free(b->ref_lse), free(b->ref_max);
}

static int buffers_alloc(synth_buffers *b, int64_t T, int64_t D, int64_t G, int threads, kv_err *err)
{
    memset(b, 0, sizeof *b);
    b->T = T, b->D = D, b->G = G, b->threads = threads;
    size_t td = (size_t)T * (size_t)D;
    size_t scratch = (size_t)attn_colsum_scratch_floats(T) * (size_t)threads;
    if (!(b->rope_tab = kv_calloc(td, sizeof(float), "rope table", err)) ||
        !(b->keys = kv_calloc(td, sizeof(float), "keys", err)) ||
        !(b->values = kv_calloc(td, sizeof(float), "values", err)) ||
        !(b->queries = kv_calloc(td * (size_t)G, sizeof(float), "queries", err)) ||
        !(b->partial = kv_calloc((size_t)(T * G * COLSUM_PARTS), sizeof(double), "column sums", err)) ||
        !(b->colsum_f = kv_calloc((size_t)T, sizeof(float), "column sums", err)) ||
        !(b->scratch = kv_calloc(scratch, sizeof(float), "attention scratch", err)) ||
        !(b->tokens = kv_calloc((size_t)T, sizeof(int32_t), "tokens", err)) ||
        !(b->ref_out = kv_calloc(td * (size_t)G, sizeof(float), "attention outputs", err)) ||
        !(b->ref_lse = kv_calloc((size_t)(T * G), sizeof(float), "log-sum-exps", err)) ||
        !(b->ref_max = kv_calloc((size_t)(T * G), sizeof(float), "row maxima", err))) {
        buffers_free(b);
        return err->code;
    }
    attn_colsum_partition(T, COLSUM_PARTS, b->bounds);
    return KV_OK;
}

/* Work item: (query head j of the group, row range p). */
static void colsum_item(void *ctx, int item, int thread)
{
    synth_buffers *b = ctx;
    const int64_t T = b->T, D = b->D, j = item / COLSUM_PARTS, p = item % COLSUM_PARTS;
    double *part = b->partial + (j * COLSUM_PARTS + p) * T;
    for (int64_t t = 0; t < T; t++) part[t] = 0.0;
    attn_colsum_row_range(b->queries + j * T * D, b->keys, b->bounds[p], b->bounds[p + 1], D,
                          (float)(1.0 / sqrt((double)D)), part,
                          b->scratch + (size_t)thread * (size_t)attn_colsum_scratch_floats(T));
}

/* Generates and writes one (layer, kv head): keys, values, its query heads,
 * their colsums and their full-cache attention outputs and log-sum-exps. */
static int write_unit(const synth_config *cfg, synth_buffers *b, trace_writer *w, int64_t l,
                      int64_t kv, kv_err *err)
{
    const int64_t T = b->T, D = b->D, G = b->G;
    synth_unit(cfg, b->rope_tab, l, kv, b->keys, b->values, b->queries);
    kv_parallel_for((int)(G * COLSUM_PARTS), b->threads, colsum_item, b);
    int rc = synth_ref_compute(b->queries, b->keys, b->values, T, D, G, b->threads, b->ref_out, b->ref_lse,
                               b->ref_max, err);
    if (!rc) rc = trace_write_rows(w, TRACE_KEYS, l, kv, 0, T, b->keys, err);
    if (!rc) rc = trace_write_rows(w, TRACE_VALUES, l, kv, 0, T, b->values, err);
    for (int64_t j = 0; !rc && j < G; j++) {
        rc = trace_write_rows(w, TRACE_QUERIES, l, kv * G + j, 0, T, b->queries + j * T * D, err);
        const double *part = b->partial + j * COLSUM_PARTS * T;
        for (int64_t t = 0; t < T; t++) {
            double sum = 0.0;
            for (int p = 0; p < COLSUM_PARTS; p++) sum += part[p * T + t];
            b->colsum_f[t] = (float)sum;
        }
        if (!rc) rc = trace_write_rows(w, TRACE_COLSUM, l, kv * G + j, 0, T, b->colsum_f, err);
        if (!rc) rc = trace_write_rows(w, TRACE_ATTN_OUT, l, kv * G + j, 0, T, b->ref_out + j * T * D, err);
        if (!rc) rc = trace_write_rows(w, TRACE_ATTN_LSE, l, kv * G + j, 0, T, b->ref_lse + j * T, err);
        if (!rc) rc = trace_write_rows(w, TRACE_ATTN_MAX, l, kv * G + j, 0, T, b->ref_max + j * T, err);
    }
    return rc;
}

int synth_write(const synth_config *cfg, const char *path, const trace_create_opts *opts_in,
                bool quiet, kv_err *err)
{
    const trace_meta *m = &cfg->meta;
    const int64_t T = m->n_tokens, D = m->head_dim, G = m->n_heads / m->n_kv_heads;
    if (D % 2 != 0)
        return kv_fail(err, KV_EUSAGE, "synth: head dim %lld must be even (RoPE rotates pairs)", (long long)D);
    trace_create_opts opts = *opts_in;
    opts.want[TRACE_QUERIES] = true;
    opts.want[TRACE_COLSUM] = true;
    opts.want[TRACE_ATTN_OUT] = opts.want[TRACE_ATTN_LSE] = opts.want[TRACE_ATTN_MAX] = true;
    opts.expected_tokens = T;

    int threads = kv_threads(cfg->threads);
    kv_blas_single_threaded(); /* our threads split the work; BLAS inside each stays serial */
    synth_buffers b;
    int rc = buffers_alloc(&b, T, D, G, threads, err);
    if (rc) return rc;
    trace_writer *w = NULL;
    rc = trace_create(path, m, &opts, &w, err);
    if (rc) {
        buffers_free(&b);
        return rc;
    }
    rope_table_fill(b.rope_tab, T, D, m->rope_theta);
    synth_tokens(cfg, b.tokens);
    rc = trace_write_tokens(w, 0, T, b.tokens, err);

    kv_progress prog;
    progress_start(&prog, "synth", m->n_layers * m->n_kv_heads, quiet);
    progress_stage(&prog, "heads");
    for (int64_t l = 0; !rc && l < m->n_layers; l++)
        for (int64_t kv = 0; !rc && kv < m->n_kv_heads; kv++) {
            rc = write_unit(cfg, &b, w, l, kv, err);
            progress_update(&prog, l * m->n_kv_heads + kv + 1);
        }
    progress_end(&prog);
    buffers_free(&b);
    if (rc) {
        trace_abort(w);
        return rc;
    }
    return trace_finish(w, err);
}
