/* fuzz_model.c: the model of a trace file that the harness mutates, writes
 * and judges.
 *
 * A model holds every attribute (value, type, byte order, element count,
 * string flavour) and every dataset (what sits at its path, shape, element
 * type, layout, filters, fill value, contents) of one file. Contents live in
 * the raw little-endian bytes of their element type, so that a mutation can
 * set any bit pattern and the oracle sees exactly what was stored. This file
 * owns those bytes: how a number becomes an element and what a reader must
 * get back from one. It reads no input bytes (fuzz_input.c does) and makes
 * no HDF5 call (fuzz_write.c does).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_model.h"

/* ---- the pseudo-random stream (splitmix64) ----------------------------- */

static uint64_t g_rng;

void fz_seed(uint64_t seed) { g_rng = seed; }

uint64_t fz_rnd(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rnd_unit(void) { return (double)(fz_rnd() >> 11) / 9007199254740992.0; }

/* ---- element types ----------------------------------------------------- */

okind fz_kind_of(etype e)
{
    if (e <= ET_U64) return K_INT;
    if (e == ET_F16) return K_F16;
    if (e == ET_F32) return K_F32;
    if (e == ET_F64) return K_F64;
    if (e == ET_STR) return K_STRING;
    return K_OTHER;
}

size_t fz_esize(etype e)
{
    static const size_t S[ET_COUNT] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8, 2, 16, 4, 8, 6, 16};
    return S[e];
}

static bool is_signed(etype e) { return e == ET_I8 || e == ET_I16 || e == ET_I32 || e == ET_I64; }

const char *fz_type_label(etype e)
{
    static const char *const N[ET_COUNT] = {"int8", "uint8", "int16", "uint16", "int32", "uint32",
                                            "int64", "uint64", "float16", "float32", "float64"};
    return e <= ET_F64 ? N[e] : "?";
}

/* IEEE binary16 -> float, exactly (the reference for core's converter). */
static float ref_half(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Any bits for a double; the oracle only ever uses ref_half of the result. */
static uint16_t crude_half(double v)
{
    if (isnan(v)) return 0x7E00;
    uint16_t s = signbit(v) ? 0x8000 : 0;
    v = fabs(v);
    if (v >= 65520.0) return s | 0x7C00;
    if (v < ldexp(1, -14)) return s | (uint16_t)(v / ldexp(1, -24));
    int e;
    double f = frexp(v, &e); /* v = f * 2^e, f in [0.5, 1) */
    return s | (uint16_t)((e + 14) << 10) | (uint16_t)((f * 2 - 1) * 1024);
}

void fz_put_le(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void fz_encode(etype e, uint8_t *p, double v, int64_t iv)
{
    memset(p, 0, fz_esize(e));
    switch (fz_kind_of(e)) {
    case K_INT: fz_put_le(p, (uint64_t)iv, fz_esize(e)); break;
    case K_F16: fz_put_le(p, crude_half(v), 2); break;
    case K_F32: {
        float f = (float)v;
        memcpy(p, &f, 4);
        break;
    }
    case K_F64: memcpy(p, &v, 8); break;
    case K_STRING: memcpy(p, "x\0\0\0\0", 6); break;
    default:
        if (e == ET_BF16) {
            float f = (float)v;
            uint32_t b;
            memcpy(&b, &f, 4);
            fz_put_le(p, b >> 16, 2);
        } else if (e == ET_COMPOUND) {
            float f = (float)v;
            fz_put_le(p, (uint64_t)iv, 4);
            memcpy(p + 4, &f, 4);
        } else if (e == ET_ARR) {
            fz_put_le(p, (uint64_t)iv, 8);
        } else {
            fz_put_le(p, (uint64_t)iv, e == ET_I128 ? 8 : 4);
            if (e == ET_I128 && iv < 0) memset(p + 8, 0xFF, 8);
        }
    }
}

bool fz_decode_int(etype e, const uint8_t *p, int64_t *out)
{
    size_t n = fz_esize(e);
    uint64_t u = get_le(p, n);
    if (is_signed(e) && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~0ull << (8 * n);
    if (e == ET_U64 && u > (uint64_t)INT64_MAX) {
        *out = INT64_MAX;
        return false;
    }
    *out = (int64_t)u;
    return true;
}

float fz_decode_f32(etype e, const uint8_t *p)
{
    if (e == ET_F16) return ref_half((uint16_t)get_le(p, 2));
    if (e == ET_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    double d;
    memcpy(&d, p, 8);
    return (float)d;
}

double fz_decode_f64(etype e, const uint8_t *p)
{
    if (fz_kind_of(e) == K_INT) {
        int64_t v;
        fz_decode_int(e, p, &v);
        if (e == ET_U64) return (double)get_le(p, 8);
        return (double)v;
    }
    if (e == ET_F64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    return (double)fz_decode_f32(e, p);
}

/* ---- the model of the file --------------------------------------------- */

const char *const FZ_DS_PATH[NDS] = {
    [TRACE_TOKENS] = "/tokens",
    [TRACE_KEYS] = "/keys",
    [TRACE_VALUES] = "/values",
    [TRACE_QUERIES] = "/queries",
    [TRACE_COLSUM] = "/attention/colsum",
    [TRACE_ATTN_FULL] = "/attention/full",
    [TRACE_LOGITS] = "/logits",
    [TRACE_LOGPROBS] = "/logprobs",
    [TRACE_EVICT_RETAINED] = "/evict/retained",
    [TRACE_EVICT_STEP_END] = "/evict/step_end",
    [TRACE_KVZIP] = "/attention/kvzip",
    [TRACE_ATTN_OUT] = "/attention/out",
    [TRACE_ATTN_LSE] = "/attention/lse",
    [TRACE_ATTN_MAX] = "/attention/max",
};

const char *const FZ_ATTR_NAME[NATTR] = {
    "kvtrace_schema", "creator", "model_name", "architecture", "rope_style", "capture_mode",
    "storage_dtype", "n_layers", "n_heads", "n_kv_heads", "head_dim", "n_tokens", "prompt_len",
    "vocab_size", "rope_theta", "capture_chunk", "evict_policy", "evict_params", "evict_budget",
    "evict_chunk",
};

void fz_set_int_attr(amodel *a, int64_t v)
{
    memset(a, 0, sizeof *a);
    a->present = true, a->et = ET_I64, a->n = 1;
    fz_put_le(a->raw[0], (uint64_t)v, 8);
}

void fz_set_str_attr(amodel *a, const char *s, int flavor)
{
    memset(a, 0, sizeof *a);
    a->present = true, a->et = ET_STR, a->n = 1, a->sflavor = flavor;
    a->slen = strlen(s);
    memcpy(a->s, s, a->slen);
}

static size_t nelem_of(const dmodel *d)
{
    size_t n = 1;
    for (int i = 0; i < d->rank; i++) n *= (size_t)d->dims[i];
    return n;
}

void fz_gen_values(model *m, int which)
{
    dmodel *d = &m->d[which];
    free(d->raw);
    d->nelem = nelem_of(d);
    d->raw = calloc(d->nelem ? d->nelem : 1, fz_esize(d->et));
    CHECK(d->raw, "out of memory");
    hsize_t last = d->rank ? d->dims[d->rank - 1] : 1;
    for (size_t i = 0; i < d->nelem; i++) {
        double v = 0;
        int64_t iv = 0;
        size_t col = last ? i % last : 0, row = last ? i / last : 0;
        switch (which) {
        case TRACE_TOKENS: iv = (int64_t)(fz_rnd() % (uint64_t)m->V), v = (double)iv; break;
        case TRACE_COLSUM: v = rnd_unit() * (double)m->T; break;
        case TRACE_KVZIP: v = rnd_unit(); break;
        case TRACE_ATTN_FULL:
            v = col <= row % (size_t)m->T ? rnd_unit() : 0.0;
            break;
        case TRACE_LOGPROBS: v = (row + 1 == (size_t)m->T || i + 1 == d->nelem) ? NAN : -3 * rnd_unit(); break;
        case TRACE_EVICT_RETAINED:
            iv = col < (size_t)m->T ? (int64_t)col : -1, v = (double)iv;
            break;
        case TRACE_EVICT_STEP_END: iv = (int64_t)(i < (size_t)m->T ? i : (size_t)m->T - 1), v = (double)iv; break;
        default: v = (rnd_unit() - 0.5) * 6, iv = (int64_t)(fz_rnd() % 7); break;
        }
        fz_encode(d->et, d->raw + i * fz_esize(d->et), v, iv);
    }
}

void fz_set_dset(model *m, int which, int rank, const int64_t *dims, etype et)
{
    dmodel *d = &m->d[which];
    d->obj = OBJ_DSET, d->rank = rank, d->et = et, d->be = false;
    d->chunked = true, d->filters = 0, d->unwritten = false;
    for (int i = 0; i < rank; i++) d->dims[i] = (hsize_t)dims[i];
    fz_gen_values(m, which);
}

void fz_default_dset(model *m, int which)
{
    etype st = m->f16 ? ET_F16 : ET_F32;
    const int64_t L = m->L, H = m->H, K = m->K, D = m->D, T = m->T;
    switch (which) {
    case TRACE_TOKENS: fz_set_dset(m, which, 1, (int64_t[]){T}, ET_I32); break;
    case TRACE_KEYS:
    case TRACE_VALUES: fz_set_dset(m, which, 4, (int64_t[]){L, K, T, D}, st); break;
    case TRACE_QUERIES: fz_set_dset(m, which, 4, (int64_t[]){L, H, T, D}, st); break;
    case TRACE_ATTN_OUT: fz_set_dset(m, which, 4, (int64_t[]){L, H, T, D}, ET_F32); break;
    case TRACE_COLSUM:
    case TRACE_ATTN_LSE:
    case TRACE_ATTN_MAX:
    case TRACE_KVZIP: fz_set_dset(m, which, 3, (int64_t[]){L, H, T}, ET_F32); break;
    case TRACE_ATTN_FULL: fz_set_dset(m, which, 4, (int64_t[]){L, H, T, T}, ET_F32); break;
    case TRACE_LOGITS: fz_set_dset(m, which, 2, (int64_t[]){T, m->V}, ET_F32); break;
    case TRACE_LOGPROBS: fz_set_dset(m, which, 1, (int64_t[]){T}, ET_F32); break;
    case TRACE_EVICT_RETAINED: fz_set_dset(m, which, 4, (int64_t[]){2, L, K, T}, ET_I32); break;
    default: fz_set_dset(m, which, 1, (int64_t[]){2}, ET_I32); break;
    }
}

bool fz_visible(const model *m, int which)
{
    if ((which == TRACE_COLSUM || which == TRACE_ATTN_FULL || which == TRACE_KVZIP || which == TRACE_ATTN_OUT ||
         which == TRACE_ATTN_LSE || which == TRACE_ATTN_MAX) && m->attention_as)
        return false;
    if ((which == TRACE_EVICT_RETAINED || which == TRACE_EVICT_STEP_END) && m->evict_as) return false;
    return m->d[which].obj != OBJ_ABSENT;
}

/* Later mutations may have changed an unwritten dataset's type or shape:
 * what it holds is its fill value, in its final type. */
void fz_finalize(model *m)
{
    for (int i = 0; i < NDS; i++) {
        dmodel *d = &m->d[i];
        if (d->obj != OBJ_DSET || !d->unwritten) continue;
        /* Never filled and never written, its contents are undefined: a
         * reader must refuse them, so the model holds NaN (an integer
         * dataset is marked instead, see fz_oracle()). */
        if (d->fill_never) d->fill_v = NAN;
        fz_encode(d->et, d->fill, d->fill_v, d->fill_i);
        for (size_t k = 0; k < d->nelem; k++) memcpy(d->raw + k * fz_esize(d->et), d->fill, fz_esize(d->et));
    }
}

void fz_free_model(model *m)
{
    for (int i = 0; i < NDS; i++) free(m->d[i].raw);
}
