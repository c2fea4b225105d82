/* model_random: "random:NAME[:SEED]", a model of the shape NAME from
 * core/model_shapes.h with seeded random weights, for benchmarks and device
 * tests on machines without the checkpoint. No vocabulary (--tokens only).
 *
 * A matrix W[out][in] is uniform on [-a, a] with a = sqrt(3 / in): variance
 * 1/in, so y = W x keeps O(1) activations (the variance of N(0, 1/sqrt(in))
 * at a fraction of the cost of Gaussian samples). The embedding has fan-in
 * dim too, because it doubles as the output projection (tied), which keeps
 * the logits O(1). The shape's architecture row (model/arch.c) gives its
 * features: norm weights are 1 (q/k norms too, where the architecture has
 * them); Q/K/V biases (qkv_bias) are uniform with the same amplitude as the
 * projection's weights. llama-3.x shapes run their llama3 RoPE scaling.
 * Every tensor is cut into chunks of
 * 2^20 values with their own stream (seed, tensor, layer, chunk), so the
 * weights depend on the seed alone, never on the thread count. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch.h"
#include "model/formats/format.h"
#include "model/model.h"
#include "model/weights16.h"
#include "core/model_shapes.h"
#include "core/parallel.h"
#include "core/rng.h"

#define CHUNK ((size_t)1 << 20)
#define DEFAULT_MAX_GIB 8.0
#define MAX_GIB_ENV "KVTRACE_RANDOM_MAX_GB"

enum { T_EMBD, T_WQ, T_WK, T_WV, T_WO, T_GATE, T_UP, T_DOWN, T_BQ, T_BK, T_BV };
#define MAX_PER_LAYER 10 /* random tensors of a layer: 7 matrices, 3 biases */

typedef struct {
    void *dst;          /* [n] of type t */
    model_wtype t;
    size_t n;
    double amp;
    uint64_t seed, kind, layer, chunk;
} fill_job;

static void fill_job_run(void *ctx, int item, int thread)
{
    (void)thread;
    const fill_job *j = &((const fill_job *)ctx)[item];
    kv_rng r;
    rng_init(&r, j->seed, j->kind, j->layer, j->chunk);
    float *f = j->dst;
    uint16_t *h = j->dst;
    for (size_t i = 0; i < j->n; i++) {
        const float x = (float)((2.0 * rng_uniform(&r) - 1.0) * j->amp);
        if (j->t == MODEL_W_F32) f[i] = x;
        else weights_narrow(&x, j->t, &h[i], 1); /* the float32 model's value, rounded */
    }
}

typedef struct {
    void *dst;    /* [n] of type t */
    size_t n, fan_in;
    uint64_t kind, layer;
    model_wtype t;
} rand_tensor;

/* Fills every tensor in t[n_t], chunk by chunk, on all CPUs. */
static int fill_tensors(const rand_tensor *t, int n_t, uint64_t seed, kv_err *err)
{
    size_t n_jobs = 0;
    for (int i = 0; i < n_t; i++) n_jobs += (t[i].n + CHUNK - 1) / CHUNK;
    fill_job *jobs = kv_calloc(n_jobs, sizeof *jobs, "random weights", err); /* [n_jobs] */
    if (!jobs) return KV_EFAIL;
    size_t k = 0;
    for (int i = 0; i < n_t; i++)
        for (size_t c = 0; c * CHUNK < t[i].n; c++) {
            size_t len = t[i].n - c * CHUNK < CHUNK ? t[i].n - c * CHUNK : CHUNK;
            jobs[k++] = (fill_job){(char *)t[i].dst + c * CHUNK * weights_size(t[i].t), t[i].t, len,
                                   sqrt(3.0 / (double)t[i].fan_in), seed, t[i].kind, t[i].layer, c};
        }
    kv_parallel_for((int)n_jobs, kv_cpu_count(), fill_job_run, jobs);
    free(jobs);
    return KV_OK;
}

static float *ones(kv_model *m, size_t n, const char *what, kv_err *err)
{
    float *p = model_alloc(m, n, what, err); /* [n] */
    for (size_t i = 0; p && i < n; i++) p[i] = 1.0f;
    return p;
}

/* Q/K/V biases ([H*D], [K*D], [K*D]) of layer l, listed in t[]. */
static int alloc_biases(kv_model *m, int64_t l, rand_tensor *t, int *n_t, kv_err *err)
{
    const model_config *c = &m->cfg;
    size_t dim = (size_t)c->dim, qd = (size_t)(c->n_heads * c->head_dim);
    size_t kvd = (size_t)(c->n_kv_heads * c->head_dim);
    model_layer *y = &m->layers[l];
    if (!(y->bq = model_alloc(m, qd, "random bias", err)) ||
        !(y->bk = model_alloc(m, kvd, "random bias", err)) ||
        !(y->bv = model_alloc(m, kvd, "random bias", err)))
        return KV_EFAIL;
    t[(*n_t)++] = (rand_tensor){y->bq, qd, dim, T_BQ, (uint64_t)l, MODEL_W_F32};
    t[(*n_t)++] = (rand_tensor){y->bk, kvd, dim, T_BK, (uint64_t)l, MODEL_W_F32};
    t[(*n_t)++] = (rand_tensor){y->bv, kvd, dim, T_BV, (uint64_t)l, MODEL_W_F32};
    return KV_OK;
}

/* Allocates every tensor, norms set to 1, the random ones listed in t[]. */
static int alloc_weights(kv_model *m, rand_tensor *t, int *n_t, kv_err *err)
{
    const model_config *c = &m->cfg;
    size_t dim = (size_t)c->dim, ffn = (size_t)c->ffn_dim, V = (size_t)c->vocab_size;
    size_t qd = (size_t)(c->n_heads * c->head_dim), kvd = (size_t)(c->n_kv_heads * c->head_dim);
    int rc = model_alloc_layers(m, err);
    if (rc) return rc;
    *n_t = 0;
    const model_wtype wt = m->wtype;
    m->tok_embd = model_alloc_raw(m, V * dim, weights_size(wt), "random token_embd", err); /* [V][dim] */
    m->output = m->tok_embd;                                         /* tied */
    m->output_norm = ones(m, dim, "random output_norm", err);        /* [dim] */
    if (!m->tok_embd || !m->output_norm) return KV_EFAIL;
    t[(*n_t)++] = (rand_tensor){m->tok_embd, V * dim, dim, T_EMBD, 0, wt};
    for (int64_t l = 0; l < c->n_layers; l++) {
        model_layer *y = &m->layers[l];
        const struct {
            void **slot;
            size_t rows, cols;
            uint64_t kind;
            model_wtype t; /* W_o is float32 always (model.h) */
        } W[] = {
            {&y->wq, qd, dim, T_WQ, wt},          {&y->wk, kvd, dim, T_WK, wt},
            {&y->wv, kvd, dim, T_WV, wt},         {(void **)&y->wo, dim, qd, T_WO, MODEL_W_F32},
            {&y->w_gate, ffn, dim, T_GATE, wt},   {&y->w_up, ffn, dim, T_UP, wt},
            {&y->w_down, dim, ffn, T_DOWN, wt},
        };
        y->attn_norm = ones(m, dim, "random attn_norm", err); /* [dim] */
        y->ffn_norm = ones(m, dim, "random ffn_norm", err);   /* [dim] */
        if (!y->attn_norm || !y->ffn_norm) return KV_EFAIL;
        if (c->qk_norm && (!(y->q_norm = ones(m, (size_t)c->head_dim, "random q_norm", err)) ||
                           !(y->k_norm = ones(m, (size_t)c->head_dim, "random k_norm", err))))
            return KV_EFAIL;
        if (c->qkv_bias && (rc = alloc_biases(m, l, t, n_t, err))) return rc;
        for (size_t i = 0; i < sizeof W / sizeof W[0]; i++) {
            /* [rows][cols] */
            *W[i].slot = model_alloc_raw(m, W[i].rows * W[i].cols, weights_size(W[i].t), "random weights", err);
            if (!*W[i].slot) return KV_EFAIL;
            t[(*n_t)++] = (rand_tensor){*W[i].slot, W[i].rows * W[i].cols, W[i].cols, W[i].kind,
                                        (uint64_t)l, W[i].t};
        }
    }
    return KV_OK;
}

static double weight_bytes(const model_config *c, model_wtype t)
{
    double dim = (double)c->dim, qd = (double)(c->n_heads * c->head_dim);
    double kvd = (double)(c->n_kv_heads * c->head_dim), ffn = (double)c->ffn_dim;
    double layer = 2 * dim + 2 * dim * qd + 2 * dim * kvd + 3 * dim * ffn; /* biases, norms: tiny */
    return (double)weights_size(t) * ((double)c->vocab_size * dim + dim + (double)c->n_layers * layer);
}

static int check_size(const char *spec, const model_config *c, model_wtype t, kv_err *err)
{
    double max_gib = DEFAULT_MAX_GIB;
    const char *env = getenv(MAX_GIB_ENV);
    if (env && env[0]) {
        char *end;
        errno = 0;
        max_gib = strtod(env, &end);
        if (errno || *end || !(isfinite(max_gib) && max_gib > 0))
            return kv_fail(err, KV_EUSAGE, "%s='%.64s' is not a positive number of GiB",
                           MAX_GIB_ENV, env);
    }
    double gib = weight_bytes(c, t) / (1024.0 * 1024.0 * 1024.0);
    if (gib > max_gib)
        return kv_fail(err, KV_EUSAGE, "%s: %.3g GiB of %s weights is over the %g GiB limit "
                       "(set %s to raise it)", spec, gib, t == MODEL_W_F32 ? "float32" : t == MODEL_W_F16 ? "float16" : "bfloat16", max_gib, MAX_GIB_ENV);
    return KV_OK;
}

/* "random:NAME[:SEED]" into the shape and the seed (default 0). */
static int parse_spec(const char *spec, const model_shape **shape, uint64_t *seed, kv_err *err)
{
    const char *name = spec + strlen("random:"), *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    char buf[64];
    *shape = NULL;
    if (len < sizeof buf) {
        memcpy(buf, name, len);
        buf[len] = '\0';
        *shape = model_shape_find(buf);
    }
    if (!*shape)
        return kv_fail(err, KV_EUSAGE, "%.300s: unknown model shape (known: %s)", spec,
                       model_shape_names());
    *seed = 0;
    if (!colon) return KV_OK;
    const char *s = colon + 1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!s[0] || strspn(s, "0123456789") != strlen(s) || *end || errno)
        return kv_fail(err, KV_EUSAGE, "%.300s: the seed '%.64s' is not an integer in [0, 2^64)",
                       spec, s);
    *seed = v;
    return KV_OK;
}

bool model_probe_random(const model_source *s)
{
    return strncmp(s->spec, "random:", 7) == 0;
}

int model_load_random(const model_source *s, kv_model *m, kv_err *err)
{
    const char *spec = s->spec;
    const model_shape *sh;
    uint64_t seed;
    int rc = parse_spec(spec, &sh, &seed, err);
    if (rc) return rc;
    model_config *c = &m->cfg;
    *c = (model_config){.n_layers = sh->n_layers, .dim = sh->dim, .ffn_dim = sh->ffn_dim,
                        .n_heads = sh->n_heads, .n_kv_heads = sh->n_kv_heads,
                        .head_dim = sh->head_dim, .vocab_size = sh->vocab_size,
                        .context_len = sh->context_len, .rope_theta = sh->rope_theta, .norm_eps = 1e-5};
    snprintf(c->name, sizeof c->name, "%.255s", spec);
    const model_arch *a = arch_find(sh->architecture); /* a test checks every shape's */
    KV_ASSERT(a);
    arch_apply(a, c);
    KV_ASSERT(rope_style_parse(sh->rope_style, &c->rope));
    /* a 16-bit type asked for is generated directly (no float32 pass); else float32 */
    m->wtype = weights_size(m->wtype_want) == 2 ? m->wtype_want : MODEL_W_F32;
    if ((rc = model_config_check(c, spec, err)) || (rc = check_size(spec, c, m->wtype, err))) return rc;
    if (sh->llama3_factor > 0 &&
        (rc = model_set_llama3_scaling(m, sh->llama3_factor, 1.0, 4.0, 8192.0, spec, err)))
        return rc;
    /* one entry per random tensor: the embedding and up to 10 a layer */
    rand_tensor *t = kv_calloc(1 + MAX_PER_LAYER * (size_t)c->n_layers, sizeof *t,
                               "random weights", err);
    int n_t = 0;
    rc = t ? alloc_weights(m, t, &n_t, err) : KV_EFAIL;
    if (!rc) rc = fill_tensors(t, n_t, seed, err);
    free(t);
    return rc;
}
