/* weights: weight matrices as the host holds them (weights.h). */
#include "model/weights.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/finite.h"
#include "core/half.h"
#include "model/formats/ggml_types.h"

size_t weights_size(model_wtype t)
{
    return t == MODEL_W_GGML ? 0 : t == MODEL_W_F16 || t == MODEL_W_BF16 ? 2 : 4;
}

const char *weights_name(model_wtype t)
{
    return t == MODEL_W_GGML ? "the file's ggml types" : t == MODEL_W_F16 ? "f16" : t == MODEL_W_BF16 ? "bf16" : "f32";
}

void weights_widen(const model_mat *w, model_wtype t, size_t i0, size_t n, float *dst)
{
    if (t == MODEL_W_GGML) {
        const weights_ggml *g = w;
        const ggml_type_info *ti = ggml_type_get(g->type);
        KV_ASSERT(ti && ti->to_f32 && i0 % ti->blck == 0 && n % ti->blck == 0);
        ti->to_f32(g->data + i0 / ti->blck * ti->size, dst, n);
    } else if (t == MODEL_W_BF16) {
        const uint16_t *s = (const uint16_t *)w + i0;
        for (size_t i = 0; i < n; i++) { /* exact: bfloat16 is float32's top half */
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &u, sizeof u);
        }
    } else if (t == MODEL_W_F16) {
        half_to_float_array((const kv_half *)w + i0, dst, n);
    } else {
        memcpy(dst, (const float *)w + i0, n * sizeof(float));
    }
}

void weights_narrow(const float *src, model_wtype t, uint16_t *dst, size_t n)
{
    if (t == MODEL_W_F16) half_from_float_array(src, dst, n);
    else
        for (size_t i = 0; i < n; i++) dst[i] = bf16_from_float(src[i]);
}

int64_t weights_first_nonfinite(const void *words, model_wtype t, size_t n)
{
    if (t == MODEL_W_F32) return kv_first_nonfinite(words, (int64_t)n);
    const uint16_t *w = words;
    const uint16_t exp = t == MODEL_W_F16 ? 0x7c00 : 0x7f80; /* all-ones exponent: inf or NaN */
    for (size_t i = 0; i < n; i++)
        if ((w[i] & exp) == exp) return (int64_t)i;
    return -1;
}

int weights_from_file(kv_model *m, const char *where, const char *name, const void *data, bool same_type, size_t n,
                      weights_read_fn read, const void *file, const void *tensor, model_mat **out, bool *in_place,
                      kv_err *err)
{
    if (same_type && (uintptr_t)data % weights_size(m->wtype) == 0) {
        const int64_t bad = weights_first_nonfinite(data, m->wtype, n);
        if (bad >= 0) {
            float v;
            weights_widen(data, m->wtype, (size_t)bad, 1, &v);
            return kv_fail(err, KV_EINPUT, "%s: tensor %s holds a non-finite value: element %" PRId64 " is %s",
                           where, name, bad, isnan(v) ? "NaN" : "infinite");
        }
        *out = (model_mat *)data; /* read-only: the walk never writes weights */
        *in_place = true;
        return KV_OK;
    }
    if (m->wtype == MODEL_W_F32) { /* another type, or unaligned: read as float32 */
        float *f = model_alloc(m, n, name, err);
        *out = f;
        return f ? read(file, tensor, f, n, err) : KV_EFAIL;
    }
    float *tmp = kv_calloc(n, sizeof(float), name, err);
    uint16_t *dst = tmp ? model_alloc_raw(m, n, sizeof(uint16_t), name, err) : NULL;
    int rc = dst ? read(file, tensor, tmp, n, err) : KV_EFAIL;
    if (!rc) weights_narrow(tmp, m->wtype, dst, n);
    free(tmp);
    *out = dst;
    return rc;
}

/* *slot (float32, n elements, owned by m) replaced by its 16-bit rounding (m->wtype_want's type). */
static int narrow_one(kv_model *m, model_mat **slot, size_t n, kv_err *err)
{
    uint16_t *h = model_alloc_raw(m, n, sizeof(uint16_t), "16-bit weights", err);
    if (!h) return KV_EFAIL;
    weights_narrow(*slot, m->wtype_want, h, n);
    model_release(m, *slot);
    *slot = h;
    return KV_OK;
}

/* *slot (a weights_ggml of n elements) replaced by its float32 values, owned by m. */
static int widen_one(kv_model *m, model_mat **slot, size_t n, kv_err *err)
{
    float *f = model_alloc(m, n, "float32 weights", err);
    if (!f) return KV_EFAIL;
    weights_widen(*slot, MODEL_W_GGML, 0, n, f);
    *slot = f;
    return KV_OK;
}

/* fn on every matrix slot of m with its element count (the tied output once). */
static int each_matrix(kv_model *m, int (*fn)(kv_model *, model_mat **, size_t, kv_err *), kv_err *err)
{
    const model_config *c = &m->cfg;
    const size_t dim = (size_t)c->dim, ffn = (size_t)c->ffn_dim, V = (size_t)c->vocab_size;
    const size_t qd = (size_t)(c->n_heads * c->head_dim), kvd = (size_t)(c->n_kv_heads * c->head_dim);
    const bool tied = m->output == m->tok_embd;
    int rc = fn(m, &m->tok_embd, V * dim, err);
    if (!rc) rc = tied ? (m->output = m->tok_embd, KV_OK) : fn(m, &m->output, V * dim, err);
    for (int64_t l = 0; !rc && l < c->n_layers; l++) {
        model_layer *y = &m->layers[l];
        if ((rc = fn(m, &y->wq, qd * dim, err)) || (rc = fn(m, &y->wk, kvd * dim, err)) ||
            (rc = fn(m, &y->wv, kvd * dim, err)) || (rc = fn(m, &y->w_gate, ffn * dim, err)) ||
            (rc = fn(m, &y->w_up, ffn * dim, err)))
            break;
        rc = fn(m, &y->w_down, dim * ffn, err);
    }
    return rc;
}

int weights_narrow_model(kv_model *m, model_wtype t, kv_err *err)
{
    KV_ASSERT(m->wtype == MODEL_W_F32 && weights_size(t) == 2);
    const model_wtype want = m->wtype_want;
    m->wtype_want = t;
    int rc = each_matrix(m, narrow_one, err);
    m->wtype_want = want;
    if (!rc) m->wtype = t;
    return rc;
}

int weights_widen_model(kv_model *m, kv_err *err)
{
    KV_ASSERT(m->wtype == MODEL_W_GGML);
    int rc = each_matrix(m, widen_one, err);
    if (!rc) m->wtype = MODEL_W_F32;
    return rc;
}

enum { CHECK_TILE = 1 << 16 }; /* values decoded at a time to check a kept matrix (a multiple of every block) */

int weights_ggml_keep(kv_model *m, const char *where, const char *name, const void *data, uint32_t type, size_t n,
                      model_mat **out, kv_err *err)
{
    const ggml_type_info *ti = ggml_type_get(type);
    char types[160];
    if (!ti || !ti->to_f32)
        return kv_fail(err, KV_EINPUT, "%s: tensor %s has type %s (%u), kvtrace reads %s", where, name,
                       ti ? ti->name : "unknown", (unsigned)type, ggml_readable_types(types, sizeof types));
    weights_ggml *g = model_alloc_raw(m, 1, sizeof *g, name, err);
    float *tile = g ? kv_calloc(CHECK_TILE, sizeof(float), name, err) : NULL;
    if (!tile) return KV_EFAIL;
    *g = (weights_ggml){.data = data, .type = type, .mapped = true}; /* the GGUF file's mapping */
    int rc = KV_OK;
    for (size_t i0 = 0; !rc && i0 < n; i0 += CHECK_TILE) {
        const size_t k = n - i0 < CHECK_TILE ? n - i0 : CHECK_TILE;
        weights_widen(g, MODEL_W_GGML, i0, k, tile);
        for (size_t i = 0; i < k && !rc; i++)
            if (!isfinite(tile[i]))
                rc = kv_fail(err, KV_EINPUT, "%s: tensor %s: element %zu is %s", where, name, i0 + i,
                             isnan(tile[i]) ? "NaN" : "infinite");
    }
    free(tile);
    *out = g;
    return rc;
}

/* Bytes of n weights of matrix w as held (type t). */
static double mat_bytes(const model_mat *w, model_wtype t, double n)
{
    if (t != MODEL_W_GGML) return n * (double)weights_size(t);
    const ggml_type_info *ti = ggml_type_get(((const weights_ggml *)w)->type);
    return n / ti->blck * ti->size;
}

double weights_bytes(const kv_model *m)
{
    const model_config *c = &m->cfg;
    const double dim = (double)c->dim, qd = (double)(c->n_heads * c->head_dim);
    const double kvd = (double)(c->n_kv_heads * c->head_dim), ffn = (double)c->ffn_dim, V = (double)c->vocab_size;
    const model_wtype t = m->wtype;
    double bytes = mat_bytes(m->tok_embd, t, V * dim) + (m->output == m->tok_embd ? 0 : mat_bytes(m->output, t, V * dim));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const model_layer *y = &m->layers[l];
        bytes += mat_bytes(y->wq, t, qd * dim) + mat_bytes(y->wk, t, kvd * dim) + mat_bytes(y->wv, t, kvd * dim) +
                 mat_bytes(y->w_gate, t, ffn * dim) + mat_bytes(y->w_up, t, ffn * dim) +
                 mat_bytes(y->w_down, t, ffn * dim) + 4.0 * dim * qd; /* W_o: float32 */
    }
    return bytes;
}
