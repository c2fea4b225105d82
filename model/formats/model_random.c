/* model_random: "random:NAME[:SEED][:TYPE]", a model of the shape NAME from
 * core/model_shapes.h with seeded random weights, for benchmarks and device
 * tests on machines without the checkpoint. No vocabulary (--tokens only).
 * TYPE (q8_0, q4_0, q4_k, q6_k) makes the matrices (all but W_o) quantised
 * blocks of that ggml type directly, as a GGUF of the type would hold them
 * (MODEL_W_GGML; widened on load when another --weights is asked for):
 * random codes, and scales such that the values span the same [-a, a]
 * (docs/capture.md).
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

#include "core/half.h"
#include "model/arch.h"
#include "model/formats/ggml_types.h"
#include "model/formats/format.h"
#include "model/model.h"
#include "model/weights.h"
#include "core/model_shapes.h"
#include "core/parallel.h"
#include "core/rng.h"

#define CHUNK ((size_t)1 << 20)
#define DEFAULT_MAX_GIB 8.0
#define MAX_GIB_ENV "KVTRACE_RANDOM_MAX_GB"

enum { T_EMBD, T_WQ, T_WK, T_WV, T_WO, T_GATE, T_UP, T_DOWN, T_BQ, T_BK, T_BV };
#define MAX_PER_LAYER 10 /* random tensors of a layer: 7 matrices, 3 biases */

/* The quantised types random:NAME:TYPE generates: the TYPE word, ggml's id,
 * and the scale fields set in every block of random codes, in units of the
 * amplitude a: f16 fields at byte offsets (d = a * mul), and constant bytes. */
typedef struct {
    const char *word;
    uint32_t ggml;
    struct { uint32_t at; double mul; } f16[2];
    uint32_t const_at, const_n;
    uint8_t const_bytes[16];
    uint32_t codes_at, codes_n; /* codes made symmetric about zero (sym: 4 bits, or 8) */
    int sym;
} rand_quant;

static const rand_quant RAND_QUANTS[] = {
    /* x = d q, q in [-127, 127] (-128 becomes 0: a mean of zero) */
    {"q8_0", 8, {{0, 1.0 / 127}, {0, 0}}, 0, 0, {0}, 2, 32, 8},
    /* x = d (q - 8), q in [1, 15] (code 0 becomes 8: a mean of zero) */
    {"q4_0", 2, {{0, 1.0 / 7}, {0, 0}}, 0, 0, {0}, 2, 16, 4},
    /* x = d sc q - dmin m with every (sc, m) = (8, 60), packed 6-bit: x = a (8q - 60) / 60 */
    {"q4_k", 12, {{0, 1.0 / 60}, {2, 1.0 / 60}}, 4, 12, {8, 8, 8, 8, 0xFC, 0xFC, 0xFC, 0xFC, 0xC8, 0xC8, 0xC8, 0xC8},
     0, 0, 0},
    /* x = d sc (q - 32) with every int8 scale 1 */
    {"q6_k", 14, {{208, 1.0 / 32}, {0, 0}}, 192, 16, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 0},
};

typedef struct {
    void *dst;          /* [n] of type t (MODEL_W_GGML: blocks of quant's type) */
    model_wtype t;
    const rand_quant *quant;
    size_t n;
    double amp;
    uint64_t seed, kind, layer, chunk;
} fill_job;

/* n values as blocks of q's type: random bits, then the scale fields. */
static void fill_blocks(const rand_quant *q, uint8_t *dst, size_t n, double amp, kv_rng *r)
{
    const ggml_type_info *ti = ggml_type_get(q->ggml);
    const size_t bytes = n / ti->blck * ti->size;
    for (size_t i = 0; i < bytes; i += 8) {
        const uint64_t v = rng_u64(r);
        memcpy(dst + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
    uint16_t d[2];
    for (int k = 0; k < 2; k++) d[k] = half_from_float((float)(amp * q->f16[k].mul));
    for (uint8_t *b = dst; b < dst + bytes; b += ti->size) {
        for (int k = 0; k < 2; k++)
            if (q->f16[k].mul > 0) b[q->f16[k].at] = (uint8_t)(d[k] & 0xFF), b[q->f16[k].at + 1] = (uint8_t)(d[k] >> 8);
        memcpy(b + q->const_at, q->const_bytes, q->const_n);
        for (uint8_t *c = b + q->codes_at; c < b + q->codes_at + q->codes_n; c++) {
            if (q->sym == 8 && *c == 0x80) *c = 0;
            if (q->sym == 4 && (*c & 0x0F) == 0) *c |= 0x08;
            if (q->sym == 4 && (*c & 0xF0) == 0) *c |= 0x80;
        }
    }
}

static void fill_job_run(void *ctx, int item, int thread)
{
    (void)thread;
    const fill_job *j = &((const fill_job *)ctx)[item];
    kv_rng r;
    rng_init(&r, j->seed, j->kind, j->layer, j->chunk);
    if (j->t == MODEL_W_GGML) {
        fill_blocks(j->quant, j->dst, j->n, j->amp, &r);
        return;
    }
    float *f = j->dst;
    uint16_t *h = j->dst;
    for (size_t i = 0; i < j->n; i++) {
        const float x = (float)((2.0 * rng_uniform(&r) - 1.0) * j->amp);
        if (j->t == MODEL_W_F32) f[i] = x;
        else weights_narrow(&x, j->t, &h[i], 1); /* the float32 model's value, rounded */
    }
}

typedef struct {
    void *dst;    /* [n] of type t (MODEL_W_GGML: the blocks) */
    size_t n, fan_in;
    uint64_t kind, layer;
    model_wtype t;
} rand_tensor;

/* Bytes of n values of type t (MODEL_W_GGML: blocks of the quant's type). */
static double bytes_of(model_wtype t, const rand_quant *q, double n)
{
    if (t != MODEL_W_GGML) return n * (double)weights_size(t);
    const ggml_type_info *ti = ggml_type_get(q->ggml);
    return n / ti->blck * ti->size;
}

/* Fills every tensor in t[n_t], chunk by chunk, on all CPUs. */
static int fill_tensors(const rand_tensor *t, int n_t, const rand_quant *quant, uint64_t seed, kv_err *err)
{
    size_t n_jobs = 0;
    for (int i = 0; i < n_t; i++) n_jobs += (t[i].n + CHUNK - 1) / CHUNK;
    fill_job *jobs = kv_calloc(n_jobs, sizeof *jobs, "random weights", err); /* [n_jobs] */
    if (!jobs) return KV_EFAIL;
    size_t k = 0;
    for (int i = 0; i < n_t; i++)
        for (size_t c = 0; c * CHUNK < t[i].n; c++) {
            size_t len = t[i].n - c * CHUNK < CHUNK ? t[i].n - c * CHUNK : CHUNK;
            jobs[k++] = (fill_job){(char *)t[i].dst + (size_t)bytes_of(t[i].t, quant, (double)(c * CHUNK)), t[i].t,
                                   quant, len, sqrt(3.0 / (double)t[i].fan_in), seed, t[i].kind, t[i].layer, c};
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

/* A matrix of n values of type t: its memory (MODEL_W_GGML: a weights_ggml over blocks) into *slot, and
 * where the random values go into *dst. */
static int alloc_matrix(kv_model *m, model_wtype t, const rand_quant *q, size_t n, const char *what, void **slot,
                        void **dst, kv_err *err)
{
    if (t != MODEL_W_GGML) {
        *slot = *dst = model_alloc_raw(m, n, weights_size(t), what, err);
        return *slot ? KV_OK : KV_EFAIL;
    }
    weights_ggml *g = model_alloc_raw(m, 1, sizeof *g, what, err);
    uint8_t *blocks = g ? model_alloc_raw(m, (size_t)bytes_of(t, q, (double)n), 1, what, err) : NULL;
    if (!blocks) return KV_EFAIL;
    *g = (weights_ggml){.data = blocks, .type = q->ggml};
    *slot = g, *dst = blocks;
    return KV_OK;
}

/* Allocates every tensor, norms set to 1, the random ones listed in t[]. */
static int alloc_weights(kv_model *m, const rand_quant *q, rand_tensor *t, int *n_t, kv_err *err)
{
    const model_config *c = &m->cfg;
    size_t dim = (size_t)c->dim, ffn = (size_t)c->ffn_dim, V = (size_t)c->vocab_size;
    size_t qd = (size_t)(c->n_heads * c->head_dim), kvd = (size_t)(c->n_kv_heads * c->head_dim);
    int rc = model_alloc_layers(m, err);
    if (rc) return rc;
    *n_t = 0;
    const model_wtype wt = m->wtype;
    void *dst = NULL;
    if ((rc = alloc_matrix(m, wt, q, V * dim, "random token_embd", (void **)&m->tok_embd, &dst, err))) /* [V][dim] */
        return rc;
    m->output = m->tok_embd;                                         /* tied */
    m->output_norm = ones(m, dim, "random output_norm", err);        /* [dim] */
    if (!m->output_norm) return KV_EFAIL;
    t[(*n_t)++] = (rand_tensor){dst, V * dim, dim, T_EMBD, 0, wt};
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
            if ((rc = alloc_matrix(m, W[i].t, q, W[i].rows * W[i].cols, "random weights", W[i].slot, &dst, err)))
                return rc;
            t[(*n_t)++] = (rand_tensor){dst, W[i].rows * W[i].cols, W[i].cols, W[i].kind, (uint64_t)l, W[i].t};
        }
    }
    return KV_OK;
}

static double weight_bytes(const model_config *c, model_wtype t, const rand_quant *q)
{
    double dim = (double)c->dim, qd = (double)(c->n_heads * c->head_dim);
    double kvd = (double)(c->n_kv_heads * c->head_dim), ffn = (double)c->ffn_dim;
    double mats = (double)c->vocab_size * dim + (double)c->n_layers * (dim * qd + 2 * dim * kvd + 3 * dim * ffn);
    /* W_o is float32 always; biases and norms are tiny */
    return bytes_of(t, q, mats) + 4.0 * (double)c->n_layers * (dim * qd + 2 * dim);
}

static int check_size(const char *spec, const model_config *c, model_wtype t, const rand_quant *q, kv_err *err)
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
    double gib = weight_bytes(c, t, q) / (1024.0 * 1024.0 * 1024.0);
    if (gib > max_gib)
        return kv_fail(err, KV_EUSAGE, "%s: %.3g GiB of %s weights is over the %g GiB limit "
                       "(set %s to raise it)", spec, gib, q ? q->word : t == MODEL_W_F32 ? "float32" :
                       t == MODEL_W_F16 ? "float16" : "bfloat16", max_gib, MAX_GIB_ENV);
    return KV_OK;
}

/* The quantised type named `w` (RAND_QUANTS), or NULL. */
static const rand_quant *quant_find(const char *w)
{
    for (size_t i = 0; i < sizeof RAND_QUANTS / sizeof *RAND_QUANTS; i++)
        if (strcmp(RAND_QUANTS[i].word, w) == 0) return &RAND_QUANTS[i];
    return NULL;
}

/* "random:NAME[:SEED][:TYPE]" into the shape, the seed (default 0) and the quantised type (NULL: none). */
static int parse_spec(const char *spec, const model_shape **shape, uint64_t *seed, const rand_quant **quant,
                      kv_err *err)
{
    char buf[128], *parts[4];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", spec + strlen("random:"));
    for (char *p = buf, *c; n < 4 && p; p = c ? c + 1 : NULL) {
        c = strchr(p, ':');
        if (c) *c = '\0';
        parts[n++] = p;
    }
    *shape = strlen(spec) < sizeof buf + 7 ? model_shape_find(parts[0]) : NULL;
    if (!*shape)
        return kv_fail(err, KV_EUSAGE, "%.300s: unknown model shape (known: %s)", spec,
                       model_shape_names());
    *seed = 0, *quant = NULL;
    int k = 1;
    if (k < n && (!parts[k][0] || strchr("+-0123456789", parts[k][0]))) { /* a seed, or a bad one */
        char *end;
        errno = 0;
        unsigned long long v = strtoull(parts[k], &end, 10);
        if (!parts[k][0] || strspn(parts[k], "0123456789") != strlen(parts[k]) || *end || errno)
            return kv_fail(err, KV_EUSAGE, "%.300s: the seed '%.64s' is not an integer in [0, 2^64)", spec, parts[k]);
        *seed = v, k++;
    }
    if (k < n && (*quant = quant_find(parts[k]))) k++;
    if (k < n)
        return kv_fail(err, KV_EUSAGE, "%.300s: '%.64s' is neither a seed (an integer in [0, 2^64)) nor a quantised "
                       "type (q8_0, q4_0, q4_k, q6_k): random:NAME[:SEED][:TYPE]", spec, parts[k]);
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
    const rand_quant *quant = NULL;
    uint64_t seed = 0;
    int rc = parse_spec(spec, &sh, &seed, &quant, err);
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
    /* a 16-bit type asked for is generated directly (no float32 pass); a quantised type as its blocks (widened
     * after when another type is asked for); else float32 */
    m->wtype = quant ? MODEL_W_GGML : weights_size(m->wtype_want) == 2 ? m->wtype_want : MODEL_W_F32;
    if ((rc = model_config_check(c, spec, err)) || (rc = check_size(spec, c, m->wtype, quant, err))) return rc;
    const uint32_t blck = quant ? ggml_type_get(quant->ggml)->blck : 1;
    if (c->dim % blck || c->ffn_dim % blck)
        return kv_fail(err, KV_EUSAGE, "%s: %s blocks hold %u values and a matrix row must be whole blocks, but the "
                       "shape's width is %lld and its FFN width %lld", spec, quant->word, (unsigned)blck,
                       (long long)c->dim, (long long)c->ffn_dim);
    if (sh->llama3_factor > 0 &&
        (rc = model_set_llama3_scaling(m, sh->llama3_factor, 1.0, 4.0, 8192.0, spec, err)))
        return rc;
    /* one entry per random tensor: the embedding and up to 10 a layer */
    rand_tensor *t = kv_calloc(1 + MAX_PER_LAYER * (size_t)c->n_layers, sizeof *t,
                               "random weights", err);
    int n_t = 0;
    rc = t ? alloc_weights(m, quant, t, &n_t, err) : KV_EFAIL;
    if (!rc) rc = fill_tensors(t, n_t, quant, seed, err);
    free(t);
    if (!rc && quant && m->wtype_want != MODEL_W_KEEP) rc = weights_widen_model(m, err);
    /* --tokenizer FILE: a llama2.c tokenizer of the shape's V tokens gives the random model a vocabulary
     * (text prompts, --chat aside: it has no template) */
    if (!rc && s->tokenizer && !(rc = vocab_load_llama2c(s->tokenizer, (int32_t)c->vocab_size, &m->vocab, err)))
        m->has_vocab = true;
    return rc;
}
