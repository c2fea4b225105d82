/* 16-bit weight matrices (weights16.h). */
#include "model/weights16.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"

size_t weights_size(model_wtype t)
{
    return t == MODEL_W_F16 || t == MODEL_W_BF16 ? 2 : 4;
}

const char *weights_name(model_wtype t)
{
    return t == MODEL_W_F16 ? "f16" : t == MODEL_W_BF16 ? "bf16" : "f32";
}

void weights_widen(const model_mat *w, model_wtype t, size_t i0, size_t n, float *dst)
{
    if (t == MODEL_W_BF16) {
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

int64_t weights_first_nonfinite(const uint16_t *w, model_wtype t, size_t n)
{
    const uint16_t exp = t == MODEL_W_F16 ? 0x7c00 : 0x7f80; /* all-ones exponent: inf or NaN */
    for (size_t i = 0; i < n; i++)
        if ((w[i] & exp) == exp) return (int64_t)i;
    return -1;
}

int weights_from_file(kv_model *m, const char *where, const char *name, const void *data, bool same_type, size_t n,
                      weights_read_fn read, const void *file, const void *tensor, model_mat **out, bool *in_place,
                      kv_err *err)
{
    if (same_type && ((uintptr_t)data & 1) == 0) {
        const int64_t bad = weights_first_nonfinite(data, m->wtype, n);
        if (bad >= 0)
            return kv_fail(err, KV_EINPUT, "%s: tensor %s holds a non-finite value at element %" PRId64, where, name,
                           bad);
        *out = (model_mat *)data; /* read-only: the walk never writes weights */
        *in_place = true;
        return KV_OK;
    }
    float *tmp = kv_calloc(n, sizeof(float), name, err);
    uint16_t *dst = tmp ? model_alloc_raw(m, n, sizeof(uint16_t), name, err) : NULL;
    int rc = dst ? read(file, tensor, tmp, n, err) : KV_EFAIL;
    if (!rc) weights_narrow(tmp, m->wtype, dst, n);
    free(tmp);
    *out = dst;
    return rc;
}

/* *slot (float32, n elements, owned by m) replaced by its 16-bit rounding. */
static int narrow_one(kv_model *m, model_mat **slot, size_t n, model_wtype t, kv_err *err)
{
    uint16_t *h = model_alloc_raw(m, n, sizeof(uint16_t), "16-bit weights", err);
    if (!h) return KV_EFAIL;
    weights_narrow(*slot, t, h, n);
    model_release(m, *slot);
    *slot = h;
    return KV_OK;
}

int weights_narrow_model(kv_model *m, model_wtype t, kv_err *err)
{
    KV_ASSERT(m->wtype == MODEL_W_F32 && weights_size(t) == 2);
    const model_config *c = &m->cfg;
    const size_t dim = (size_t)c->dim, ffn = (size_t)c->ffn_dim, V = (size_t)c->vocab_size;
    const size_t qd = (size_t)(c->n_heads * c->head_dim), kvd = (size_t)(c->n_kv_heads * c->head_dim);
    const bool tied = m->output == m->tok_embd;
    int rc = narrow_one(m, &m->tok_embd, V * dim, t, err);
    if (!rc) rc = tied ? (m->output = m->tok_embd, KV_OK) : narrow_one(m, &m->output, V * dim, t, err);
    for (int64_t l = 0; !rc && l < c->n_layers; l++) {
        model_layer *y = &m->layers[l];
        if ((rc = narrow_one(m, &y->wq, qd * dim, t, err)) || (rc = narrow_one(m, &y->wk, kvd * dim, t, err)) ||
            (rc = narrow_one(m, &y->wv, kvd * dim, t, err)) || (rc = narrow_one(m, &y->w_gate, ffn * dim, t, err)) ||
            (rc = narrow_one(m, &y->w_up, ffn * dim, t, err)))
            break;
        rc = narrow_one(m, &y->w_down, dim * ffn, t, err);
    }
    if (!rc) m->wtype = t;
    return rc;
}

double weights_bytes(const kv_model *m)
{
    const model_config *c = &m->cfg;
    const double dim = (double)c->dim, qd = (double)(c->n_heads * c->head_dim);
    const double kvd = (double)(c->n_kv_heads * c->head_dim), ffn = (double)c->ffn_dim, V = (double)c->vocab_size;
    const double mats = V * dim * (m->output == m->tok_embd ? 1 : 2) +
                        (double)c->n_layers * (qd * dim + 2 * kvd * dim + 3 * ffn * dim);
    return mats * (double)weights_size(m->wtype) + 4.0 * (double)c->n_layers * dim * qd; /* W_o: float32 */
}
