/* model: the model description's life: an empty model, ownership of the
 * weights, the one config check every loader runs before it sizes anything
 * from the config, llama3 RoPE scaling, and the dimensions and features the
 * loaders' tensor tables name. Which loader fills it is model/load.c's. */
#include "model/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits that keep every size product of the config far from overflow
 * (vocab * dim < 2^47, ffn * dim < 2^43) and still admit every public model. */
#define MAX_LAYERS 4096
#define MAX_DIM (1 << 20)
#define MAX_FFN (1 << 22)
#define MAX_HEADS 4096
#define MAX_HEAD_DIM 4096
#define MAX_VOCAB (1 << 26)
#define MAX_CONTEXT (1LL << 32)

static int out_of_range(const char *where, const char *what, int64_t v, int64_t lo, int64_t hi,
                        kv_err *err)
{
    return kv_fail(err, KV_EINPUT, "%s: %s = %" PRId64 " is outside [%" PRId64 ", %" PRId64 "]",
                   where, what, v, lo, hi);
}

int model_config_check(const model_config *c, const char *where, kv_err *err)
{
    const struct {
        const char *what;
        int64_t v, lo, hi;
    } R[] = {
        {"n_layers", c->n_layers, 1, MAX_LAYERS},
        {"dim", c->dim, 1, MAX_DIM},
        {"ffn_dim", c->ffn_dim, 1, MAX_FFN},
        {"n_heads", c->n_heads, 1, MAX_HEADS},
        {"n_kv_heads", c->n_kv_heads, 1, c->n_heads},
        {"head_dim", c->head_dim, 2, MAX_HEAD_DIM},
        {"vocab_size", c->vocab_size, 1, MAX_VOCAB},
        {"context_len", c->context_len, 0, MAX_CONTEXT},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++)
        if (R[i].v < R[i].lo || R[i].v > R[i].hi)
            return out_of_range(where, R[i].what, R[i].v, R[i].lo, R[i].hi, err);
    if (c->n_heads % c->n_kv_heads != 0)
        return kv_fail(err, KV_EINPUT, "%s: n_heads %" PRId64 " is not a multiple of n_kv_heads %"
                       PRId64, where, c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2 != 0)
        return kv_fail(err, KV_EINPUT, "%s: head_dim %" PRId64 " is odd (RoPE rotates pairs)",
                       where, c->head_dim);
    if (c->n_heads * c->head_dim > MAX_DIM)
        return kv_fail(err, KV_EINPUT, "%s: n_heads x head_dim = %" PRId64 " is over %d", where,
                       c->n_heads * c->head_dim, MAX_DIM);
    if (!(isfinite(c->rope_theta) && c->rope_theta > 1.0))
        return kv_fail(err, KV_EINPUT, "%s: rope theta %g is not a finite number > 1", where,
                       c->rope_theta);
    if (!(isfinite(c->norm_eps) && c->norm_eps >= 0.0 && c->norm_eps < 1.0))
        return kv_fail(err, KV_EINPUT, "%s: RMSNorm epsilon %g is outside [0, 1)", where,
                       c->norm_eps);
    if (c->rope != ROPE_INTERLEAVED && c->rope != ROPE_NEOX)
        return kv_fail(err, KV_EINPUT, "%s: unknown RoPE style %d", where, (int)c->rope);
    if (c->architecture[0] == '\0')
        return kv_fail(err, KV_EINPUT, "%s: no architecture", where);
    return KV_OK;
}

float *model_alloc(kv_model *m, size_t n, const char *what, kv_err *err)
{
    return model_alloc_raw(m, n, sizeof(float), what, err);
}

void *model_alloc_raw(kv_model *m, size_t n, size_t size, const char *what, kv_err *err)
{
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 32;
        void **p = realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) {
            kv_fail(err, KV_EFAIL, "%s: out of memory", what);
            return NULL;
        }
        m->owned = p, m->cap_owned = cap;
    }
    void *f = kv_calloc(n, size, what, err);
    if (f) m->owned[m->n_owned++] = f;
    return f;
}

void model_release(kv_model *m, void *p)
{
    for (int i = m->n_owned - 1; p && i >= 0; i--)
        if (m->owned[i] == p) {
            free(p);
            m->owned[i] = m->owned[--m->n_owned];
            return;
        }
}

struct model_keep {
    void (*close)(void *);
    void *obj;
};

int model_keep_file(kv_model *m, void (*close)(void *), void *obj, kv_err *err)
{
    if (m->n_kept == m->cap_kept) {
        int cap = m->cap_kept ? 2 * m->cap_kept : 8;
        struct model_keep *k = realloc(m->kept, (size_t)cap * sizeof *k);
        if (!k) {
            close(obj);
            return kv_fail(err, KV_EFAIL, "out of memory for the model's file list");
        }
        m->kept = k, m->cap_kept = cap;
    }
    m->kept[m->n_kept++] = (struct model_keep){close, obj};
    return KV_OK;
}

int model_set_llama3_scaling(kv_model *m, double factor, double low, double high,
                             double orig_ctx, const char *where, kv_err *err)
{
    if (!(isfinite(factor) && factor >= 1.0 && isfinite(low) && low > 0 && isfinite(high) &&
          high > low && isfinite(orig_ctx) && orig_ctx >= 1.0))
        return kv_fail(err, KV_EINPUT, "%s: llama3 rope scaling needs factor >= 1, 0 < "
                       "low_freq_factor < high_freq_factor and original_max_position_embeddings "
                       ">= 1 (got %g, %g, %g, %g)", where, factor, low, high, orig_ctx);
    const model_config *c = &m->cfg;
    m->rope_div = model_alloc_raw(m, (size_t)(c->head_dim / 2), sizeof(double), "rope", err);
    if (!m->rope_div) return KV_EFAIL;
    rope_llama3_divisors(m->rope_div, c->head_dim, c->rope_theta, factor, low, high, orig_ctx);
    snprintf(m->cfg.rope_scaling, sizeof m->cfg.rope_scaling, "llama3 factor=%g low_freq_factor=%g "
             "high_freq_factor=%g original_max_position_embeddings=%g", factor, low, high, orig_ctx);
    return KV_OK;
}

int model_alloc_layers(kv_model *m, kv_err *err)
{
    KV_ASSERT(!m->layers && m->cfg.n_layers > 0);
    m->layers = kv_calloc((size_t)m->cfg.n_layers, sizeof *m->layers, "model layers", err);
    return m->layers ? KV_OK : KV_EFAIL;
}

int model_tensor_read(kv_model *m, const char *file_name, kv_err *err)
{
    if (m->n_read == m->cap_read) {
        int64_t cap = m->cap_read ? 2 * m->cap_read : 64;
        const char **grown = realloc(m->read_names, sizeof *grown * (size_t)cap);
        if (!grown) return kv_fail(err, KV_EFAIL, "out of memory for the model's tensor list");
        m->read_names = grown, m->cap_read = cap;
    }
    m->read_names[m->n_read++] = file_name;
    return KV_OK;
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(const char *const *)a, y = (uintptr_t)*(const char *const *)b;
    return x < y ? -1 : x > y;
}

int model_tensors_exact(kv_model *m, const char *where, const char *implies, int64_t n,
                        const char *(*name_at)(const void *file, int64_t i), const void *file, kv_err *err)
{
    qsort(m->read_names, (size_t)m->n_read, sizeof *m->read_names, ptr_cmp);
    int rc = KV_OK;
    for (int64_t i = 0; i < n && !rc; i++) {
        const char *name = name_at(file, i);
        if (!m->n_read || !bsearch(&name, m->read_names, (size_t)m->n_read, sizeof *m->read_names, ptr_cmp))
            rc = kv_fail(err, KV_EINPUT, "%s: holds tensor %.200s, which its metadata (%s) does not imply: the "
                         "metadata and the tensors disagree", where, name, implies);
    }
    free(m->read_names);
    m->read_names = NULL, m->n_read = m->cap_read = 0;
    return rc;
}

void model_init(kv_model *m)
{
    memset(m, 0, sizeof *m);
    m->vocab.bos = m->vocab.eos = m->vocab.unk = -1;
}

void model_free(kv_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    for (int i = 0; i < m->n_kept; i++) m->kept[i].close(m->kept[i].obj);
    free(m->kept);
    free(m->layers);
    free(m->read_names);
    vocab_free(&m->vocab);
    model_init(m);
}

int64_t model_dim_size(const model_config *c, int dim)
{
    switch (dim) {
    case MODEL_DIM_HIDDEN: return c->dim;
    case MODEL_DIM_Q: return c->n_heads * c->head_dim;
    case MODEL_DIM_KV: return c->n_kv_heads * c->head_dim;
    case MODEL_DIM_FFN: return c->ffn_dim;
    case MODEL_DIM_HEAD: return c->head_dim;
    default: return 0;
    }
}

bool model_has(const model_config *c, int need)
{
    switch (need) {
    case MODEL_NEED_QKV_BIAS: return c->qkv_bias;
    case MODEL_NEED_QK_NORM: return c->qk_norm;
    default: return true;
    }
}
