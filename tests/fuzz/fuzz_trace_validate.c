/* fuzz_trace_validate: a structure-aware libFuzzer harness for the trace
 * validation layer (trace_open_hid, trace_read_*, trace_describe).
 *
 * The input bytes are a sequence of decisions. A header picks a well-formed
 * small trace (L, H, K, D <= 6, T <= 40, f32 or f16 storage, full or evict
 * mode, which optional datasets exist); every following group of bytes is
 * one mutation of a *model* of the file: attributes (deleted, re-valued,
 * re-typed, turned into strings/arrays/null dataspaces), datasets (absent,
 * replaced by a group, another shape, rank or element type, chunking and
 * filters, unwritten with a fill value) and single values (NaN, inf,
 * negative, random bits, token ids outside the vocabulary). Missing bytes
 * read as 0, and an empty input is "no mutation": a valid trace.
 *
 * The model is then written into an in-memory HDF5 file (core driver, no
 * backing store, optionally re-opened read-only from its file image) and
 * given to trace_open_hid. An independent oracle, written from SPEC §3 and
 * trace.h rather than from core/, says whether the file is valid:
 *   - valid   => trace_open_hid must succeed (no false rejection), the meta
 *                must equal the attributes, trace_read_tokens/rows/head must
 *                return exactly the stored numbers, or fail with KV_EINPUT
 *                exactly when a value in the slice is NaN/inf (or a negative
 *                column sum / attention weight);
 *   - invalid => trace_open_hid must fail (no false acceptance).
 * Every failure must be code 1 or 3 with a non-empty one-line message, and no
 * HDF5 id may outlive the run. Any violation calls abort().
 */
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5util.h"
#include "core/kv_error.h"
#include "core/trace.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
const char *__ubsan_default_options(void);

/* `make fuzz` builds with recoverable UBSan checks: stop at the first report
 * so that libFuzzer saves the input (UBSAN_OPTIONS still overrides this). */
const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- failure reporting ----------------------------------------------- */

static char g_ctx[4096];  /* what the oracle decided, for the report */

__attribute__((format(printf, 2, 3))) static _Noreturn void fail_at(int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\nfuzz_trace_validate.c:%d: ", line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  oracle: %s\n", g_ctx);
    abort();
}
#define CHECK(c, ...) \
    do {                                  \
        if (!(c)) fail_at(__LINE__, "check '" #c "' failed: " __VA_ARGS__); \
    } while (0)
/* An HDF5 call made by the harness itself must work. */
#define H5OK(c) \
    do {                                                   \
        if ((c) < 0) fail_at(__LINE__, "harness HDF5 call failed: " #c); \
    } while (0)

static void check_err(const kv_err *err, const char *what)
{
    CHECK(err->code == KV_EINPUT || err->code == KV_EFAIL, "%s: err.code = %d (msg '%s')", what,
          err->code, err->msg);
    CHECK(err->msg[0] != '\0', "%s: empty error message", what);
    CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL, "%s: unterminated message", what);
#ifndef FUZZ_IGNORE_CONTROL_CHARS /* only to look past this while it is being fixed */
    CHECK(strchr(err->msg, '\n') == NULL && strchr(err->msg, '\r') == NULL,
          "%s: message is not one line: '%s'", what, err->msg);
#endif
}

#ifdef FUZZ_STATS /* -DFUZZ_STATS: how often each outcome happens (tuning aid) */
static unsigned long g_stat[8];
static const char *const STAT_NAME[8] = {"runs", "valid", "invalid", "f16 valid", "evict valid",
                                         "reads ok", "reads refused (bad value)", "reopened"};
static void print_stats(void)
{
    for (int i = 0; i < 8; i++) fprintf(stderr, "stat %-28s %lu\n", STAT_NAME[i], g_stat[i]);
}
#define STAT(i) (g_stat[i]++)
#else
#define STAT(i) ((void)0)
#endif

/* ---- input bytes ------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t n;
} src;

static uint8_t u8(src *s)
{
    if (!s->n) return 0;
    s->n--;
    return *s->p++;
}

static uint16_t u16(src *s) { return (uint16_t)(u8(s) | (unsigned)u8(s) << 8); }

static uint64_t u64(src *s)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)u8(s) << (8 * i);
    return v;
}

static uint64_t g_rng;
static uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rnd_unit(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* ---- element types ----------------------------------------------------- */

typedef enum {
    ET_I8, ET_U8, ET_I16, ET_U16, ET_I32, ET_U32, ET_I64, ET_U64,
    ET_F16, ET_F32, ET_F64,
    ET_BF16,      /* a 2-byte float that is not IEEE binary16 */
    ET_I128,      /* a 16-byte integer */
    ET_ENUM,      /* enum over int32 */
    ET_COMPOUND,  /* {int32 a; float b} */
    ET_STR,       /* fixed-length string, 6 bytes */
    ET_ARR,       /* array type of 2 int64 (one element holds two numbers) */
    ET_COUNT
} etype;

/* What SPEC §3 calls each: any integer (<= 64 bits), IEEE f16/f32/f64, else other. */
typedef enum { K_INT, K_F16, K_F32, K_F64, K_OTHER, K_STRING } okind;

static okind kind_of(etype e)
{
    if (e <= ET_U64) return K_INT;
    if (e == ET_F16) return K_F16;
    if (e == ET_F32) return K_F32;
    if (e == ET_F64) return K_F64;
    if (e == ET_STR) return K_STRING;
    return K_OTHER;
}

static size_t esize(etype e)
{
    static const size_t S[ET_COUNT] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8, 2, 16, 4, 8, 6, 16};
    return S[e];
}

static bool is_signed(etype e) { return e == ET_I8 || e == ET_I16 || e == ET_I32 || e == ET_I64; }

static const char *type_label(etype e)
{
    static const char *const N[ET_COUNT] = {"int8", "uint8", "int16", "uint16", "int32", "uint32",
                                            "int64", "uint64", "float16", "float32", "float64"};
    return e <= ET_F64 ? N[e] : "?";
}

static hid_t small_float(size_t epos, size_t esz, size_t msz, size_t bias)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5OK(t);
    H5OK(H5Tset_fields(t, 15, epos, esz, 0, msz));
    H5OK(H5Tset_size(t, 2));
    H5OK(H5Tset_ebias(t, bias));
    return t;
}

/* The file type (`be`: big endian where it applies) or the memory type
 * (little endian, the raw layout of the model's bytes). Caller closes. */
static hid_t make_type(etype e, bool be)
{
    static const hid_t *const INTS[8] = {&H5T_STD_I8LE_g,  &H5T_STD_U8LE_g,  &H5T_STD_I16LE_g,
                                         &H5T_STD_U16LE_g, &H5T_STD_I32LE_g, &H5T_STD_U32LE_g,
                                         &H5T_STD_I64LE_g, &H5T_STD_U64LE_g};
    hid_t t;
    switch (e) {
    case ET_F16: t = small_float(10, 5, 10, 15); break;
    case ET_BF16: t = small_float(7, 8, 7, 127); break;
    case ET_F32: t = H5Tcopy(H5T_IEEE_F32LE); break;
    case ET_F64: t = H5Tcopy(H5T_IEEE_F64LE); break;
    case ET_I128:
        t = H5Tcopy(H5T_STD_I64LE);
        H5OK(t);
        H5OK(H5Tset_size(t, 16));
        return t;
    case ET_ENUM: {
        t = H5Tenum_create(H5T_NATIVE_INT32);
        H5OK(t);
        int32_t a = 0, b = 1;
        H5OK(H5Tenum_insert(t, "A", &a));
        H5OK(H5Tenum_insert(t, "B", &b));
        return t;
    }
    case ET_COMPOUND:
        t = H5Tcreate(H5T_COMPOUND, 8);
        H5OK(t);
        H5OK(H5Tinsert(t, "a", 0, H5T_NATIVE_INT32));
        H5OK(H5Tinsert(t, "b", 4, H5T_NATIVE_FLOAT));
        return t;
    case ET_STR:
        t = H5Tcopy(H5T_C_S1);
        H5OK(t);
        H5OK(H5Tset_size(t, 6));
        return t;
    case ET_ARR: {
        hsize_t two = 2;
        t = H5Tarray_create2(H5T_STD_I64LE, 1, &two);
        H5OK(t);
        return t;
    }
    default: t = H5Tcopy(*INTS[e]); break;
    }
    H5OK(t);
    if (be) H5OK(H5Tset_order(t, H5T_ORDER_BE));
    return t;
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

static void put_le(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Stores v in an element of type e (integers truncate, as a cast would). */
static void encode(etype e, uint8_t *p, double v, int64_t iv)
{
    memset(p, 0, esize(e));
    switch (kind_of(e)) {
    case K_INT: put_le(p, (uint64_t)iv, esize(e)); break;
    case K_F16: put_le(p, crude_half(v), 2); break;
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
            put_le(p, b >> 16, 2);
        } else if (e == ET_COMPOUND) {
            float f = (float)v;
            put_le(p, (uint64_t)iv, 4);
            memcpy(p + 4, &f, 4);
        } else if (e == ET_ARR) {
            put_le(p, (uint64_t)iv, 8);
        } else {
            put_le(p, (uint64_t)iv, e == ET_I128 ? 8 : 4);
            if (e == ET_I128 && iv < 0) memset(p + 8, 0xFF, 8);
        }
    }
}

/* Integer value of an integer element; false when it does not fit int64. */
static bool decode_int(etype e, const uint8_t *p, int64_t *out)
{
    size_t n = esize(e);
    uint64_t u = get_le(p, n);
    if (is_signed(e) && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~0ull << (8 * n);
    if (e == ET_U64 && u > (uint64_t)INT64_MAX) {
        *out = INT64_MAX;
        return false;
    }
    *out = (int64_t)u;
    return true;
}

/* What a float32 reader must see for a float element. */
static float decode_f32(etype e, const uint8_t *p)
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

static double decode_f64(etype e, const uint8_t *p)
{
    if (kind_of(e) == K_INT) {
        int64_t v;
        decode_int(e, p, &v);
        if (e == ET_U64) return (double)get_le(p, 8);
        return (double)v;
    }
    if (e == ET_F64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    return (double)decode_f32(e, p);
}

/* ---- the model of the file --------------------------------------------- */

enum { NDS = TRACE_NDSETS, MAX_RANK = 6, MAX_ELEMS = 100000, MAX_STR = 700 };

static const char *const DS_PATH[NDS] = {
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
};

/* What sits at a dataset's path: nothing, a dataset, a group, a committed
 * datatype, or a soft link to nowhere. */
typedef enum { OBJ_ABSENT, OBJ_DSET, OBJ_GROUP, OBJ_NAMED_TYPE, OBJ_DANGLING } objkind;

enum { F_SHUFFLE = 1, F_DEFLATE = 2, F_FLETCHER = 4 };

typedef struct {
    objkind obj;
    int rank;
    hsize_t dims[MAX_RANK];
    etype et;
    bool be;
    bool chunked;
    bool compact;      /* compact layout (when not chunked and small) */
    unsigned filters;
    bool unwritten;    /* no H5Dwrite: every element reads as the fill value */
    bool fill_never;   /* ... or, with H5D_FILL_TIME_NEVER, is undefined */
    double fill_v;     /* the fill value, encoded in `et` by finalize() */
    int64_t fill_i;
    uint8_t fill[16];
    uint8_t *raw;      /* nelem elements, memory (little-endian) layout */
    size_t nelem;
} dmodel;

typedef enum {
    A_SCHEMA, A_CREATOR, A_MODEL, A_ARCH, A_ROPE_STYLE, A_MODE, A_STORAGE,
    A_LAYERS, A_HEADS, A_KV_HEADS, A_HEAD_DIM, A_TOKENS, A_PROMPT, A_VOCAB,
    A_THETA, A_CHUNK, A_EV_POLICY, A_EV_PARAMS, A_EV_BUDGET, A_EV_CHUNK, NATTR
} attr_id;

static const char *const ATTR_NAME[NATTR] = {
    "kvtrace_schema", "creator", "model_name", "architecture", "rope_style", "capture_mode",
    "storage_dtype", "n_layers", "n_heads", "n_kv_heads", "head_dim", "n_tokens", "prompt_len",
    "vocab_size", "rope_theta", "capture_chunk", "evict_policy", "evict_params", "evict_budget",
    "evict_chunk",
};

/* String flavours: variable length (UTF-8 / ASCII), fixed length with each padding. */
enum { S_VL_UTF8, S_VL_ASCII, S_FIX_NULLTERM, S_FIX_NULLPAD, S_FIX_SPACEPAD, S_NFLAVORS };
#define S_FIX_UTF8 8 /* or-ed into a fixed-length flavour: UTF-8 character set */

typedef struct {
    bool present;
    etype et;          /* ET_STR: a string attribute (flavour `sflavor`) */
    bool be;
    int n;             /* elements: 0 = null dataspace */
    bool as_array;     /* n == 1 written as 1-D [1] instead of scalar */
    uint8_t raw[2][16];
    int sflavor;
    uint8_t s[MAX_STR];
    size_t slen;
} amodel;

typedef struct {
    int64_t L, H, K, D, T, V;   /* what the data was built with */
    bool f16, evict;
    amodel a[NATTR];
    dmodel d[NDS];
    int attention_as;           /* 0 group, 1 a dataset named /attention */
    int evict_as;               /* 0 group, 1 a dataset named /evict */
    bool extra;                 /* unknown extra attribute, dataset and group */
    bool reopen;                /* open read-only from the file image */
} model;

static void set_int_attr(amodel *a, int64_t v)
{
    memset(a, 0, sizeof *a);
    a->present = true, a->et = ET_I64, a->n = 1;
    put_le(a->raw[0], (uint64_t)v, 8);
}

static void set_str_attr(amodel *a, const char *s, int flavor)
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

/* Plausible contents for dataset `which` in its current shape and type. */
static void gen_values(model *m, int which)
{
    dmodel *d = &m->d[which];
    free(d->raw);
    d->nelem = nelem_of(d);
    d->raw = calloc(d->nelem ? d->nelem : 1, esize(d->et));
    CHECK(d->raw, "out of memory");
    hsize_t last = d->rank ? d->dims[d->rank - 1] : 1;
    for (size_t i = 0; i < d->nelem; i++) {
        double v = 0;
        int64_t iv = 0;
        size_t col = last ? i % last : 0, row = last ? i / last : 0;
        switch (which) {
        case TRACE_TOKENS: iv = (int64_t)(rnd() % (uint64_t)m->V), v = (double)iv; break;
        case TRACE_COLSUM: v = rnd_unit() * (double)m->T; break;
        case TRACE_ATTN_FULL:
            v = col <= row % (size_t)m->T ? rnd_unit() : 0.0;
            break;
        case TRACE_LOGPROBS: v = (row + 1 == (size_t)m->T || i + 1 == d->nelem) ? NAN : -3 * rnd_unit(); break;
        case TRACE_EVICT_RETAINED:
            iv = col < (size_t)m->T ? (int64_t)col : -1, v = (double)iv;
            break;
        case TRACE_EVICT_STEP_END: iv = (int64_t)(i < (size_t)m->T ? i : (size_t)m->T - 1), v = (double)iv; break;
        default: v = (rnd_unit() - 0.5) * 6, iv = (int64_t)(rnd() % 7); break;
        }
        encode(d->et, d->raw + i * esize(d->et), v, iv);
    }
}

static void set_dset(model *m, int which, int rank, const int64_t *dims, etype et)
{
    dmodel *d = &m->d[which];
    d->obj = OBJ_DSET, d->rank = rank, d->et = et, d->be = false;
    d->chunked = true, d->filters = 0, d->unwritten = false;
    for (int i = 0; i < rank; i++) d->dims[i] = (hsize_t)dims[i];
    gen_values(m, which);
}

enum { OPT_Q = 1, OPT_COLSUM = 2, OPT_LOGITS = 4, OPT_LOGPROBS = 8, OPT_FULL = 16, OPT_EVICT = 32 };

static void build_valid(model *m, src *in)
{
    memset(m, 0, sizeof *m);
    uint8_t b[10];
    for (int i = 0; i < 10; i++) b[i] = u8(in);
    m->L = 1 + (b[0] + 1) % 6;
    m->K = 1 + (b[1] + 1) % 6;
    m->H = m->K * (1 + (b[2] + 1) % (6 / m->K));
    m->D = 1 + (b[3] + 3) % 6;
    m->T = 1 + (b[4] + 7) % 40;
    m->V = 1 + (b[5] + 15) % 200;
    m->f16 = b[6] & 1;
    m->evict = b[6] & 2;
    m->reopen = b[6] & 4;
    bool contiguous = b[6] & 8;
    unsigned filt = (b[6] >> 4) & 7;
    unsigned deflt = m->evict ? (OPT_Q | OPT_LOGITS | OPT_LOGPROBS | OPT_EVICT)
                              : (OPT_Q | OPT_COLSUM | OPT_LOGITS | OPT_LOGPROBS);
    unsigned opt = b[7] ^ deflt;
    if (m->evict) opt &= ~(unsigned)OPT_COLSUM;
    else opt &= ~(unsigned)OPT_EVICT;
    g_rng = 0x1234567ull + b[8] + ((uint64_t)b[9] << 8);
    int64_t S = 1 + (int64_t)(rnd() % 3), N = 1 + (int64_t)(rnd() % (uint64_t)m->T);

    amodel *a = m->a;
    a[A_SCHEMA] = (amodel){.present = true, .et = ET_I64, .n = 2};
    put_le(a[A_SCHEMA].raw[0], 1, 8);
    set_str_attr(&a[A_CREATOR], "kvtrace-fuzz 0.1", S_VL_UTF8);
    set_str_attr(&a[A_MODEL], "fuzz-model", S_VL_UTF8);
    set_str_attr(&a[A_ARCH], (rnd() & 1) ? "llama" : "qwen3", S_VL_UTF8);
    set_str_attr(&a[A_ROPE_STYLE], (rnd() & 1) ? "interleaved" : "neox", S_VL_UTF8);
    set_str_attr(&a[A_MODE], m->evict ? "evict" : "full", S_VL_UTF8);
    set_str_attr(&a[A_STORAGE], m->f16 ? "f16" : "f32", S_VL_UTF8);
    set_int_attr(&a[A_LAYERS], m->L);
    set_int_attr(&a[A_HEADS], m->H);
    set_int_attr(&a[A_KV_HEADS], m->K);
    set_int_attr(&a[A_HEAD_DIM], m->D);
    set_int_attr(&a[A_TOKENS], m->T);
    set_int_attr(&a[A_PROMPT], 1 + (int64_t)(rnd() % (uint64_t)m->T));
    set_int_attr(&a[A_VOCAB], m->V);
    a[A_THETA] = (amodel){.present = true, .et = ET_F64, .n = 1};
    encode(ET_F64, a[A_THETA].raw[0], 10000.0, 0);
    set_int_attr(&a[A_CHUNK], (int64_t)(rnd() % 3) * 16);
    if (m->evict) {
        set_str_attr(&a[A_EV_POLICY], "h2o", S_VL_UTF8);
        set_str_attr(&a[A_EV_PARAMS], "recent=0.5", S_VL_UTF8);
        set_int_attr(&a[A_EV_BUDGET], N);
        set_int_attr(&a[A_EV_CHUNK], 1);
    }

    etype st = m->f16 ? ET_F16 : ET_F32;
    const int64_t L = m->L, H = m->H, K = m->K, D = m->D, T = m->T;
    set_dset(m, TRACE_TOKENS, 1, (int64_t[]){T}, ET_I32);
    set_dset(m, TRACE_KEYS, 4, (int64_t[]){L, K, T, D}, st);
    set_dset(m, TRACE_VALUES, 4, (int64_t[]){L, K, T, D}, st);
    if (opt & OPT_Q) set_dset(m, TRACE_QUERIES, 4, (int64_t[]){L, H, T, D}, st);
    if (opt & OPT_COLSUM) set_dset(m, TRACE_COLSUM, 3, (int64_t[]){L, H, T}, ET_F32);
    if (opt & OPT_FULL) set_dset(m, TRACE_ATTN_FULL, 4, (int64_t[]){L, H, T, T}, ET_F32);
    if (opt & OPT_LOGITS) set_dset(m, TRACE_LOGITS, 2, (int64_t[]){T, m->V}, ET_F32);
    if (opt & OPT_LOGPROBS) set_dset(m, TRACE_LOGPROBS, 1, (int64_t[]){T}, ET_F32);
    if (opt & OPT_EVICT) {
        set_dset(m, TRACE_EVICT_RETAINED, 4, (int64_t[]){S, L, K, N}, ET_I32);
        set_dset(m, TRACE_EVICT_STEP_END, 1, (int64_t[]){S}, ET_I32);
    }
    for (int i = 0; i < NDS; i++) {
        if (m->d[i].obj != OBJ_DSET) continue;
        m->d[i].chunked = !contiguous;
        m->d[i].filters = contiguous ? 0 : filt;
    }
}

/* ---- mutations --------------------------------------------------------- */

static int64_t interesting_int(src *in, int64_t cur)
{
    static const int64_t V[] = {0, -1, 1, 2, 1023, 1024, 1025, 4096, 4097, (1 << 24),
                                (1 << 24) + 1, INT32_MAX, (int64_t)1 << 31, ((int64_t)1 << 31) + 1,
                                INT64_MAX, INT64_MIN, -((int64_t)1 << 40)};
    uint8_t k = u8(in);
    switch (k % 4) {
    case 0: return (int64_t)((uint64_t)cur + (uint64_t)(k / 4 % 5) - 2); /* wraps */
    case 1: return V[(k / 4) % (sizeof V / sizeof V[0])];
    case 2: return (int64_t)u64(in);
    default: return (int64_t)(k / 4) - 8;
    }
}

static void mut_attr(model *m, src *in, int op)
{
    amodel *a = &m->a[u8(in) % NATTR];
    bool was_str = a->present && a->et == ET_STR;
    double dv = a->present && !was_str ? decode_f64(a->et, a->raw[0]) : 0;
    int64_t iv = 0;
    if (a->present && kind_of(a->et) == K_INT) decode_int(a->et, a->raw[0], &iv);
    else iv = (int64_t)(isfinite(dv) && fabs(dv) < 9e18 ? dv : 0);
    switch (op) {
    case 0: a->present = false; break;
    case 1: { /* an integer value, keeping an integer type if it had one */
        etype et = a->present && kind_of(a->et) == K_INT ? a->et : ET_I64;
        bool be = a->be;
        int n = a->present && !was_str ? a->n : 1;
        int64_t v = interesting_int(in, iv);
        memset(a, 0, sizeof *a);
        a->present = true, a->et = et, a->be = be, a->n = n ? n : 1;
        for (int i = 0; i < a->n && i < 2; i++) encode(et, a->raw[i], (double)v, i ? 0 : v);
        break;
    }
    case 2: { /* another numeric type, same value (as far as the type holds it) */
        uint8_t k = u8(in);
        static const etype NUM[] = {ET_I8, ET_U8, ET_I16, ET_U16, ET_I32, ET_U32, ET_I64, ET_U64,
                                    ET_F16, ET_F32, ET_F64, ET_BF16, ET_I128, ET_ENUM, ET_COMPOUND,
                                    ET_ARR};
        etype et = NUM[k % (sizeof NUM / sizeof NUM[0])];
        int64_t second = 0;
        if (a->present && kind_of(a->et) == K_INT && a->n == 2) decode_int(a->et, a->raw[1], &second);
        int n = a->present && !was_str && a->n ? a->n : 1;
        bool as_array = a->as_array;
        memset(a, 0, sizeof *a);
        a->present = true, a->et = et, a->be = k & 0x80, a->n = n, a->as_array = as_array;
        if (k & 0x40) { /* a special number instead of the same value */
            static const double F[] = {NAN, INFINITY, -INFINITY, 0, -0.0, -1, 1e-300, 1e300, 0.5, 1e-8};
            dv = F[u8(in) % (sizeof F / sizeof F[0])];
            iv = isfinite(dv) && fabs(dv) < 9e18 ? (int64_t)dv : 0;
        }
        encode(et, a->raw[0], was_str ? 1.5 : dv, iv);
        encode(et, a->raw[1], (double)second, second);
        break;
    }
    case 3: { /* random bytes as a string (long ones too) */
        size_t len = u8(in);
        if (len & 1) len *= 3;
        if (len > MAX_STR) len = MAX_STR;
        uint8_t f = u8(in);
        int flavor = f % S_NFLAVORS | ((f & 0x80) && f % S_NFLAVORS > S_VL_ASCII ? S_FIX_UTF8 : 0);
        memset(a, 0, sizeof *a);
        a->present = true, a->et = ET_STR, a->n = 1, a->sflavor = flavor, a->slen = len;
        for (size_t i = 0; i < len; i++) a->s[i] = in->n ? u8(in) : (uint8_t)('a' + i % 26);
        break;
    }
    case 4: { /* a known word, a near miss, or a control character */
        static const char *const W[] = {
            "llama", "qwen2", "qwen3", "mistral", "interleaved", "neox", "full", "evict", "f32",
            "f16", "h2o", "", "Full", "evict ", "f32\n", "f64", "ful", "llama\nx", "neox\r",
            "f16 ", " f32", "evict\x01", "qwen", "tova:window=4", "llama\tb"};
        uint8_t k = u8(in), f = u8(in);
        set_str_attr(a, W[k % (sizeof W / sizeof W[0])],
                     f % S_NFLAVORS | ((f & 0x80) && f % S_NFLAVORS > S_VL_ASCII ? S_FIX_UTF8 : 0));
        break;
    }
    case 5: { /* element count and dataspace shape */
        if (!a->present) break;
        uint8_t k = u8(in) % 4;
        if (k == 0) a->n = 0;
        else if (k == 1) a->n = 1, a->as_array = !a->as_array;
        else if (k == 2) {
            if (a->n == 1 && a->et != ET_STR) memcpy(a->raw[1], a->raw[0], 16);
            a->n = 2;
        } else a->n = 1;
        break;
    }
    }
}

static int pick_dset(src *in) { return u8(in) % NDS; }

static bool shape_ok(const dmodel *d)
{
    double n = 1;
    for (int i = 0; i < d->rank; i++) n *= (double)d->dims[i];
    return n <= MAX_ELEMS;
}

static void default_dset(model *m, int which)
{
    etype st = m->f16 ? ET_F16 : ET_F32;
    const int64_t L = m->L, H = m->H, K = m->K, D = m->D, T = m->T;
    switch (which) {
    case TRACE_TOKENS: set_dset(m, which, 1, (int64_t[]){T}, ET_I32); break;
    case TRACE_KEYS:
    case TRACE_VALUES: set_dset(m, which, 4, (int64_t[]){L, K, T, D}, st); break;
    case TRACE_QUERIES: set_dset(m, which, 4, (int64_t[]){L, H, T, D}, st); break;
    case TRACE_COLSUM: set_dset(m, which, 3, (int64_t[]){L, H, T}, ET_F32); break;
    case TRACE_ATTN_FULL: set_dset(m, which, 4, (int64_t[]){L, H, T, T}, ET_F32); break;
    case TRACE_LOGITS: set_dset(m, which, 2, (int64_t[]){T, m->V}, ET_F32); break;
    case TRACE_LOGPROBS: set_dset(m, which, 1, (int64_t[]){T}, ET_F32); break;
    case TRACE_EVICT_RETAINED: set_dset(m, which, 4, (int64_t[]){2, L, K, T}, ET_I32); break;
    default: set_dset(m, which, 1, (int64_t[]){2}, ET_I32); break;
    }
}

/* One value, or a run of them: random bits, special numbers, the edges of
 * what the dataset may hold (token ids V-1..V+1, negative column sums). */
static void poke_values(const model *m, dmodel *d, src *in)
{
    if (!d->nelem) return;
    size_t at = u16(in) % d->nelem, run = 1;
    uint8_t k = u8(in);
    static const double F[] = {NAN, INFINITY, -INFINITY, -1, -0.0, 1e30, 1e300, -1e300,
                               1e-40, 65504, 70000, -1e-7, 3.4e38, 0};
    static const int64_t I[] = {-1, 0, 1, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN,
                                (int64_t)1 << 40, 255, 256, 65535, 65536};
    double v = 0;
    int64_t iv = 0;
    switch (k % 4) {
    case 0: /* raw random bits */
        for (size_t i = 0; i < esize(d->et); i++) d->raw[at * esize(d->et) + i] = u8(in);
        break;
    case 1: /* the edge of what this dataset may hold */
        if (kind_of(d->et) == K_INT) iv = m->V - 1 + (int64_t)(k / 4 % 3); /* V-1, V, V+1 */
        else v = (k / 4) % 2 ? -ldexp(1, -(int)(k / 8 % 30)) : (k / 8) % 2 ? NAN : INFINITY;
        run = 1 + (size_t)(k >> 6);
        break;
    default:
        if (kind_of(d->et) == K_INT) {
            uint8_t j = u8(in);
            iv = j % 2 ? I[(j / 2) % (sizeof I / sizeof I[0])] : (int64_t)(j / 2) - 5;
        } else {
            v = F[(k / 4) % (sizeof F / sizeof F[0])];
        }
        break;
    }
    if (k % 4 != 0)
        for (size_t i = at; i < at + run && i < d->nelem; i++) encode(d->et, d->raw + i * esize(d->et), v, iv);
}

/* Chunked / contiguous / compact, filters, unwritten with a fill value (or none). */
static void set_layout(const model *m, dmodel *d, src *in)
{
    uint8_t k = u8(in);
    d->chunked = k & 1;
    d->filters = d->chunked ? (k >> 1) & 7 : 0;
    d->compact = !d->chunked && (k & 2);
    d->unwritten = (k >> 4) & 1;
    d->fill_never = d->unwritten && !d->compact && (k & 0x20);
    if (d->unwritten) {
        static const double F[] = {0, NAN, 1.5, -1, INFINITY, 0.25};
        uint8_t j = u8(in);
        int64_t iv = (int64_t)(j % 5) - 1; /* -1..3 */
        if (j & 0x80) iv = m->V;
        d->fill_v = F[j % 6], d->fill_i = iv;
    }
}

static void mut_dset(model *m, src *in, int op)
{
    int which = pick_dset(in);
    dmodel *d = &m->d[which];
    if (op != 0 && d->obj != OBJ_DSET) return;
    switch (op) {
    case 0: { /* absent, a group, or (back to) a well-formed dataset */
        uint8_t k = u8(in) % 5;
        if (k == 0) d->obj = OBJ_ABSENT;
        else if (k == 1) d->obj = OBJ_GROUP;
        else if (k == 2) d->obj = OBJ_NAMED_TYPE;
        else if (k == 3) d->obj = OBJ_DANGLING;
        else default_dset(m, which);
        break;
    }
    case 1: { /* one dimension off */
        if (!d->rank) break;
        uint8_t k = u8(in);
        int ax = k % d->rank;
        hsize_t old = d->dims[ax];
        switch ((k >> 3) % 6) {
        case 0: d->dims[ax] = old + 1; break;
        case 1: d->dims[ax] = old ? old - 1 : 0; break;
        case 2: d->dims[ax] = 0; break;
        case 3: d->dims[ax] = old * 2; break;
        case 4: d->dims[ax] = 37; break;
        default: d->dims[ax] = 1000 + u8(in); break;
        }
        if (!shape_ok(d)) d->dims[ax] = old;
        gen_values(m, which);
        break;
    }
    case 2: { /* another rank */
        uint8_t k = u8(in) % 3;
        if (k == 0 && d->rank < MAX_RANK) d->dims[d->rank++] = 1;
        else if (k == 1 && d->rank > 0) d->rank--;
        else d->rank = 0; /* scalar */
        gen_values(m, which);
        break;
    }
    case 3: { /* another element type */
        uint8_t k = u8(in);
        d->et = (etype)(k % ET_COUNT);
        d->be = k & 0x80;
        gen_values(m, which);
        break;
    }
    case 4: poke_values(m, d, in); break;
    case 5: set_layout(m, d, in); break;
    }
}

static void mutate(model *m, src *in)
{
    int rounds = 0;
    while (in->n && rounds++ < 64) {
        uint8_t op = u8(in) % 14;
        if (op < 6) mut_attr(m, in, op);
        else if (op < 12) mut_dset(m, in, op - 6);
        else if (op == 12) {
            uint8_t k = u8(in);
            m->attention_as = k & 1;
            m->evict_as = (k >> 1) & 1;
        } else {
            m->extra = !m->extra;
        }
    }
}

/* Later mutations may have changed an unwritten dataset's type or shape:
 * what it holds is its fill value, in its final type. */
static void finalize(model *m)
{
    for (int i = 0; i < NDS; i++) {
        dmodel *d = &m->d[i];
        if (d->obj != OBJ_DSET || !d->unwritten) continue;
        /* Never filled and never written, its contents are undefined: a
         * reader must refuse them, so the model holds NaN (an integer
         * dataset is marked instead, see oracle()). */
        if (d->fill_never) d->fill_v = NAN;
        encode(d->et, d->fill, d->fill_v, d->fill_i);
        for (size_t k = 0; k < d->nelem; k++) memcpy(d->raw + k * esize(d->et), d->fill, esize(d->et));
    }
}

/* ---- the oracle (SPEC §3, trace.h) ------------------------------------- */

typedef struct {
    int64_t L, H, K, D, T, V, prompt, chunk, budget, evchunk, smajor, sminor;
    double theta;
    char creator[MAX_STR + 1], model_name[MAX_STR + 1], arch[MAX_STR + 1], rope[MAX_STR + 1];
    char mode[MAX_STR + 1], storage[MAX_STR + 1], policy[MAX_STR + 1], params[MAX_STR + 1];
    bool evict, f16;
    bool present[NDS];
} expect;

static bool why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool why(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_ctx, sizeof g_ctx, fmt, ap);
    va_end(ap);
    return false;
}

static bool o_int(const model *m, attr_id id, int n, int64_t *out)
{
    const amodel *a = &m->a[id];
    if (!a->present) return why("attribute %s missing", ATTR_NAME[id]);
    if (kind_of(a->et) != K_INT) return why("attribute %s is not an integer (type %d)", ATTR_NAME[id], a->et);
    if (a->n != n) return why("attribute %s has %d elements", ATTR_NAME[id], a->n);
    for (int i = 0; i < n; i++) decode_int(a->et, a->raw[i], &out[i]); /* > INT64_MAX reads as INT64_MAX */
    return true;
}

static bool o_range(const char *name, int64_t v, int64_t lo, int64_t hi)
{
    if (v < lo || v > hi) return why("%s = %lld outside [%lld, %lld]", name, (long long)v, (long long)lo, (long long)hi);
    return true;
}

/* What a reader sees of a string attribute (NUL ends it; SPACEPAD trims). */
static bool o_str(const model *m, attr_id id, size_t cap, char *out)
{
    const amodel *a = &m->a[id];
    if (!a->present) return why("attribute %s missing", ATTR_NAME[id]);
    if (a->et != ET_STR) return why("attribute %s is not a string", ATTR_NAME[id]);
    if (a->n != 1) return why("attribute %s has %d elements", ATTR_NAME[id], a->n);
    size_t len = a->slen;
    if ((a->sflavor & ~S_FIX_UTF8) == S_FIX_SPACEPAD)
        while (len && a->s[len - 1] == ' ') len--;
    memcpy(out, a->s, len);
    out[len] = '\0';
    if (strlen(out) >= cap) return why("attribute %s too long (%zu)", ATTR_NAME[id], strlen(out));
    return true;
}

static bool o_word(const char *name, const char *v, const char *const *ok)
{
    for (; *ok; ok++)
        if (strcmp(v, *ok) == 0) return true;
    return why("%s = '%s' not allowed", name, v);
}

static bool elem_fits(const expect *e, int which, etype et)
{
    okind k = kind_of(et);
    switch (which) {
    case TRACE_TOKENS:
    case TRACE_EVICT_RETAINED:
    case TRACE_EVICT_STEP_END: return k == K_INT;
    case TRACE_KEYS:
    case TRACE_VALUES:
    case TRACE_QUERIES: return k == (e->f16 ? K_F16 : K_F32);
    default: return k == K_F16 || k == K_F32 || k == K_F64;
    }
}

/* Shape SPEC §3 wants from the attributes (-1: free axis). */
static int want_dims(const expect *e, int which, int64_t w[4])
{
    const int64_t L = e->L, H = e->H, K = e->K, D = e->D, T = e->T;
    int64_t s[NDS][5] = {
        [TRACE_TOKENS] = {1, T},
        [TRACE_KEYS] = {4, L, K, T, D},
        [TRACE_VALUES] = {4, L, K, T, D},
        [TRACE_QUERIES] = {4, L, H, T, D},
        [TRACE_COLSUM] = {3, L, H, T},
        [TRACE_ATTN_FULL] = {4, L, H, T, T},
        [TRACE_LOGITS] = {2, T, e->V},
        [TRACE_LOGPROBS] = {1, T},
        [TRACE_EVICT_RETAINED] = {4, -1, L, K, -1},
        [TRACE_EVICT_STEP_END] = {1, -1},
    };
    memcpy(w, &s[which][1], 4 * sizeof(int64_t));
    return (int)s[which][0];
}

static bool visible(const model *m, int which)
{
    if ((which == TRACE_COLSUM || which == TRACE_ATTN_FULL) && m->attention_as) return false;
    if ((which == TRACE_EVICT_RETAINED || which == TRACE_EVICT_STEP_END) && m->evict_as) return false;
    return m->d[which].obj != OBJ_ABSENT;
}

/* Datasets against the attributes: presence, mode, kind, element type,
 * shape, the eviction pair, and the token ids. */
static bool o_datasets(const model *m, expect *e)
{
    for (int i = 0; i < NDS; i++) {
        const dmodel *d = &m->d[i];
        bool required = i == TRACE_TOKENS || i == TRACE_KEYS || i == TRACE_VALUES;
        e->present[i] = visible(m, i);
        if (!e->present[i]) {
            if (required) return why("%s missing", DS_PATH[i]);
            continue;
        }
        if (i == TRACE_COLSUM && e->evict) return why("colsum in evict mode");
        if ((i == TRACE_EVICT_RETAINED || i == TRACE_EVICT_STEP_END) && !e->evict)
            return why("%s in full mode", DS_PATH[i]);
        if (d->obj != OBJ_DSET) return why("%s is not a dataset", DS_PATH[i]);
        if (!elem_fits(e, i, d->et)) return why("%s has element type %d", DS_PATH[i], d->et);
        int64_t w[4];
        int rank = want_dims(e, i, w);
        if (d->rank != rank) return why("%s has rank %d", DS_PATH[i], d->rank);
        for (int a = 0; a < rank; a++)
            if (w[a] >= 0 && (int64_t)d->dims[a] != w[a])
                return why("%s axis %d is %llu, want %lld", DS_PATH[i], a, (unsigned long long)d->dims[a],
                           (long long)w[a]);
    }
    if (e->present[TRACE_EVICT_RETAINED] != e->present[TRACE_EVICT_STEP_END]) return why("evict pair incomplete");
    if (e->present[TRACE_EVICT_RETAINED] &&
        (m->d[TRACE_EVICT_RETAINED].dims[0] != m->d[TRACE_EVICT_STEP_END].dims[0] ||
         m->d[TRACE_EVICT_RETAINED].dims[3] < 1))
        return why("evict S mismatch or N < 1");
    const dmodel *tok = &m->d[TRACE_TOKENS];
    if (tok->unwritten && tok->fill_never && tok->nelem) return why("/tokens never written, no fill value");
    for (size_t i = 0; i < tok->nelem; i++) {
        int64_t v;
        bool fits = decode_int(tok->et, tok->raw + i * esize(tok->et), &v);
        if (!fits || v < 0 || v >= e->V) return why("token %zu = %lld outside [0, %lld)", i, (long long)v, (long long)e->V);
    }
    return true;
}

static bool oracle(const model *m, expect *e)
{
    static const char *const ARCHS[] = {"llama", "qwen2", "qwen3", "mistral", NULL};
    static const char *const ROPES[] = {"interleaved", "neox", NULL};
    static const char *const MODES[] = {"full", "evict", NULL};
    static const char *const STORES[] = {"f32", "f16", NULL};
    const int64_t TMAX = (int64_t)1 << 31;
    memset(e, 0, sizeof *e);
    int64_t schema[2];
    if (!o_int(m, A_SCHEMA, 2, schema)) return false;
    if (schema[0] != 1) return why("schema major %lld", (long long)schema[0]);
    e->smajor = schema[0], e->sminor = schema[1];
    if (!o_int(m, A_LAYERS, 1, &e->L) || !o_int(m, A_HEADS, 1, &e->H) || !o_int(m, A_KV_HEADS, 1, &e->K) ||
        !o_int(m, A_HEAD_DIM, 1, &e->D) || !o_int(m, A_TOKENS, 1, &e->T) || !o_int(m, A_PROMPT, 1, &e->prompt) ||
        !o_int(m, A_VOCAB, 1, &e->V) || !o_int(m, A_CHUNK, 1, &e->chunk))
        return false;
    if (!o_str(m, A_CREATOR, 128, e->creator) || !o_str(m, A_MODEL, 256, e->model_name) ||
        !o_str(m, A_ARCH, 16, e->arch) || !o_str(m, A_ROPE_STYLE, 16, e->rope) ||
        !o_str(m, A_MODE, 8, e->mode) || !o_str(m, A_STORAGE, 8, e->storage))
        return false;
    const amodel *th = &m->a[A_THETA];
    if (!th->present || th->n != 1) return why("rope_theta missing or not one element");
    okind tk = kind_of(th->et);
    if (tk != K_INT && tk != K_F16 && tk != K_F32 && tk != K_F64) return why("rope_theta not a number");
    e->theta = decode_f64(th->et, th->raw[0]);
    if (!o_word("storage_dtype", e->storage, STORES)) return false;
    e->f16 = strcmp(e->storage, "f16") == 0;
    if (!o_range("n_layers", e->L, 1, 1024) || !o_range("n_heads", e->H, 1, 1024) ||
        !o_range("n_kv_heads", e->K, 1, e->H) || !o_range("head_dim", e->D, 1, 4096) ||
        !o_range("vocab_size", e->V, 1, 1 << 24) || !o_range("capture_chunk", e->chunk, 0, TMAX) ||
        !o_range("n_tokens", e->T, 1, TMAX) || !o_range("prompt_len", e->prompt, 1, e->T))
        return false;
    if (e->H % e->K) return why("H %% K != 0");
    if (!(isfinite(e->theta) && e->theta > 0)) return why("rope_theta = %g", e->theta);
    if (!o_word("architecture", e->arch, ARCHS) || !o_word("rope_style", e->rope, ROPES) ||
        !o_word("capture_mode", e->mode, MODES))
        return false;
    e->evict = strcmp(e->mode, "evict") == 0;
    if (e->evict) {
        if (!o_str(m, A_EV_POLICY, 64, e->policy) || !o_str(m, A_EV_PARAMS, 256, e->params) ||
            !o_int(m, A_EV_BUDGET, 1, &e->budget) || !o_int(m, A_EV_CHUNK, 1, &e->evchunk))
            return false;
        if (!o_range("evict_budget", e->budget, 1, TMAX) || !o_range("evict_chunk", e->evchunk, 1, TMAX))
            return false;
        if (!e->policy[0]) return why("evict_policy empty");
    }
    if (!o_datasets(m, e)) return false;
    snprintf(g_ctx, sizeof g_ctx, "valid (L=%lld H=%lld K=%lld D=%lld T=%lld V=%lld %s %s)", (long long)e->L,
             (long long)e->H, (long long)e->K, (long long)e->D, (long long)e->T, (long long)e->V, e->storage, e->mode);
    return true;
}

/* ---- writing the model ------------------------------------------------- */

static void write_attr(hid_t root, const char *name, const amodel *a)
{
    hid_t space;
    if (a->n == 0) space = H5Screate(H5S_NULL);
    else if (a->n == 1 && !a->as_array) space = H5Screate(H5S_SCALAR);
    else {
        hsize_t n = (hsize_t)a->n;
        space = H5Screate_simple(1, &n, NULL);
    }
    H5OK(space);
    hid_t ftype, mtype;
    const void *buf;
    const char *strs[2];
    uint8_t fixed[2 * MAX_STR + 2];
    uint8_t nums[32];
    if (a->et == ET_STR) {
        if (a->sflavor <= S_VL_ASCII) {
            ftype = H5Tcopy(H5T_C_S1);
            H5OK(ftype);
            H5OK(H5Tset_size(ftype, H5T_VARIABLE));
            H5OK(H5Tset_cset(ftype, a->sflavor == S_VL_UTF8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII));
            memcpy(fixed, a->s, a->slen);
            fixed[a->slen] = '\0';
            strs[0] = strs[1] = (const char *)fixed;
            buf = strs;
        } else {
            size_t sz = a->slen ? a->slen : 1;
            int pad = a->sflavor & ~S_FIX_UTF8;
            ftype = H5Tcopy(H5T_C_S1);
            H5OK(ftype);
            H5OK(H5Tset_size(ftype, sz));
            H5OK(H5Tset_strpad(ftype, pad == S_FIX_NULLTERM ? H5T_STR_NULLTERM
                                      : pad == S_FIX_NULLPAD ? H5T_STR_NULLPAD
                                                             : H5T_STR_SPACEPAD));
            if (a->sflavor & S_FIX_UTF8) H5OK(H5Tset_cset(ftype, H5T_CSET_UTF8));
            memset(fixed, 0, sizeof fixed);
            memcpy(fixed, a->s, a->slen);
            memcpy(fixed + sz, a->s, a->slen);
            buf = fixed;
        }
        mtype = H5Tcopy(ftype);
    } else {
        ftype = make_type(a->et, a->be);
        mtype = make_type(a->et, false);
        size_t es = esize(a->et);
        memcpy(nums, a->raw[0], es);
        memcpy(nums + es, a->raw[1], es);
        buf = nums;
    }
    H5OK(mtype);
    hid_t attr = H5Acreate2(root, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    H5OK(attr);
    if (a->n > 0) H5OK(H5Awrite(attr, mtype, buf));
    H5OK(H5Aclose(attr));
    H5OK(H5Tclose(mtype));
    H5OK(H5Tclose(ftype));
    H5OK(H5Sclose(space));
}

static void write_dset(hid_t file, const char *path, const dmodel *d)
{
    if (d->obj == OBJ_GROUP) {
        hid_t g = H5Gcreate2(file, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5OK(g);
        H5OK(H5Gclose(g));
        return;
    }
    if (d->obj == OBJ_NAMED_TYPE) {
        hid_t t = H5Tcopy(H5T_IEEE_F32LE);
        H5OK(t);
        H5OK(H5Tcommit2(file, path, t, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5OK(H5Tclose(t));
        return;
    }
    if (d->obj == OBJ_DANGLING) {
        H5OK(H5Lcreate_soft("/no/such/object", file, path, H5P_DEFAULT, H5P_DEFAULT));
        return;
    }
    hid_t space;
    if (d->rank == 0) space = H5Screate(H5S_SCALAR);
    else {
        hsize_t max[MAX_RANK];
        for (int i = 0; i < d->rank; i++) max[i] = d->chunked ? H5S_UNLIMITED : d->dims[i];
        /* (compact storage needs fixed dims: it is never chunked) */
        space = H5Screate_simple(d->rank, d->dims, max);
    }
    H5OK(space);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5OK(dcpl);
    H5OK(H5Pset_obj_track_times(dcpl, 0));
    hid_t ftype = make_type(d->et, d->be), mtype = make_type(d->et, false);
    if (d->chunked && d->rank > 0) {
        hsize_t chunk[MAX_RANK];
        for (int i = 0; i < d->rank; i++) chunk[i] = d->dims[i] ? (d->dims[i] > 64 ? 64 : d->dims[i]) : 1;
        H5OK(H5Pset_chunk(dcpl, d->rank, chunk));
        if (d->filters & F_SHUFFLE) H5OK(H5Pset_shuffle(dcpl));
        if (d->filters & F_DEFLATE) H5OK(H5Pset_deflate(dcpl, 1));
        if (d->filters & F_FLETCHER) H5OK(H5Pset_fletcher32(dcpl));
    }
    bool compact = d->compact && !d->chunked && d->nelem * esize(d->et) < 32000;
    if (compact) H5OK(H5Pset_layout(dcpl, H5D_COMPACT));
    if (d->unwritten) H5OK(H5Pset_fill_value(dcpl, mtype, d->fill));
    if (d->fill_never && !compact) H5OK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    hid_t ds = H5Dcreate2(file, path, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5OK(ds);
    if (!d->unwritten && d->nelem) H5OK(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->raw));
    H5OK(H5Dclose(ds));
    H5OK(H5Tclose(mtype));
    H5OK(H5Tclose(ftype));
    H5OK(H5Pclose(dcpl));
    H5OK(H5Sclose(space));
}

static void container(hid_t file, const char *name, int as, bool needed)
{
    if (as == 1) {
        dmodel d = {.obj = OBJ_DSET, .rank = 1, .dims = {2}, .et = ET_F32};
        float v[2] = {1, 2};
        d.raw = (uint8_t *)v, d.nelem = 2;
        write_dset(file, name, &d);
    } else if (needed) {
        hid_t g = H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5OK(g);
        H5OK(H5Gclose(g));
    }
}

static int g_file_no;

/* Writes the model into a new in-memory file; returns it open (maybe read-only). */
static hid_t write_model(const model *m, char *name, size_t cap)
{
    snprintf(name, cap, "fuzz-mem-%d", g_file_no++);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5OK(fapl);
    H5OK(H5Pset_fapl_core(fapl, 1 << 16, 0));
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5OK(fcpl);
    H5OK(H5Pset_obj_track_times(fcpl, 0));
    hid_t file = H5Fcreate(name, H5F_ACC_TRUNC, fcpl, fapl);
    H5OK(file);
    hid_t root = H5Gopen2(file, "/", H5P_DEFAULT);
    H5OK(root);
    for (int i = 0; i < NATTR; i++)
        if (m->a[i].present) write_attr(root, ATTR_NAME[i], &m->a[i]);
    if (m->extra) {
        amodel x = {.present = true, .et = ET_F64, .n = 1};
        write_attr(root, "x_unknown", &x);
    }
    H5OK(H5Gclose(root));
    container(file, "/attention", m->attention_as,
              m->d[TRACE_COLSUM].obj != OBJ_ABSENT || m->d[TRACE_ATTN_FULL].obj != OBJ_ABSENT);
    container(file, "/evict", m->evict_as,
              m->d[TRACE_EVICT_RETAINED].obj != OBJ_ABSENT || m->d[TRACE_EVICT_STEP_END].obj != OBJ_ABSENT);
    for (int i = 0; i < NDS; i++)
        if (m->d[i].obj != OBJ_ABSENT && visible(m, i)) write_dset(file, DS_PATH[i], &m->d[i]);
    if (m->extra) {
        hid_t g = H5Gcreate2(file, "/x_group", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5OK(g);
        H5OK(H5Gclose(g));
    }
    H5OK(H5Pclose(fcpl));
    if (m->reopen) {
        H5OK(H5Fflush(file, H5F_SCOPE_GLOBAL));
        ssize_t size = H5Fget_file_image(file, NULL, 0);
        CHECK(size > 0, "file image size %zd", size);
        void *img = malloc((size_t)size);
        CHECK(img, "out of memory");
        CHECK(H5Fget_file_image(file, img, (size_t)size) == size, "file image");
        H5OK(H5Fclose(file));
        H5OK(H5Pset_file_image(fapl, img, (size_t)size));
        free(img);
        file = H5Fopen(name, H5F_ACC_RDONLY, fapl);
        H5OK(file);
    }
    H5OK(H5Pclose(fapl));
    return file;
}

/* ---- what a successful open must give ---------------------------------- */

static void check_meta(const trace_meta *t, const expect *e)
{
    CHECK(t->schema_major == 1, "schema_major %d", t->schema_major);
    int64_t minor = e->sminor >= 0 && e->sminor <= 1000000 ? e->sminor : 0;
    CHECK(t->schema_minor == minor, "schema_minor %d want %lld", t->schema_minor, (long long)minor);
    CHECK(t->n_layers == e->L && t->n_heads == e->H && t->n_kv_heads == e->K && t->head_dim == e->D,
          "L/H/K/D %lld/%lld/%lld/%lld", (long long)t->n_layers, (long long)t->n_heads,
          (long long)t->n_kv_heads, (long long)t->head_dim);
    CHECK(t->n_tokens == e->T && t->prompt_len == e->prompt && t->vocab_size == e->V &&
          t->capture_chunk == e->chunk, "T/prompt/V/chunk");
    CHECK(t->rope_theta == e->theta, "rope_theta %.17g want %.17g", t->rope_theta, e->theta);
    CHECK(strcmp(t->creator, e->creator) == 0, "creator '%s' want '%s'", t->creator, e->creator);
    CHECK(strcmp(t->model_name, e->model_name) == 0, "model_name");
    CHECK(strcmp(t->architecture, e->arch) == 0 && strcmp(t->rope_style, e->rope) == 0 &&
          strcmp(t->capture_mode, e->mode) == 0, "architecture/rope_style/capture_mode");
    CHECK(t->storage == (e->f16 ? TRACE_F16 : TRACE_F32), "storage");
    if (e->evict)
        CHECK(strcmp(t->evict_policy, e->policy) == 0 && strcmp(t->evict_params, e->params) == 0 &&
              t->evict_budget == e->budget && t->evict_chunk == e->evchunk, "evict_*");
}

static void check_describe(trace *tr, const model *m, const expect *e)
{
    for (int i = 0; i < NDS; i++) {
        CHECK(trace_has(tr, (trace_dset)i) == e->present[i], "trace_has(%s)", DS_PATH[i]);
        trace_dset_info info;
        kv_err err;
        kv_err_clear(&err);
        int rc = trace_describe(tr, (trace_dset)i, &info, &err);
        if (!e->present[i]) {
            CHECK(rc != KV_OK, "describe of absent %s succeeded", DS_PATH[i]);
            check_err(&err, "trace_describe");
            continue;
        }
        const dmodel *d = &m->d[i];
        CHECK(rc == KV_OK, "describe %s: %s", DS_PATH[i], err.msg);
        CHECK(info.rank == d->rank, "describe rank");
        for (int a = 0; a < d->rank; a++) CHECK(info.dims[a] == (int64_t)d->dims[a], "describe dims");
        CHECK(memchr(info.type, '\0', sizeof info.type) && strcmp(info.type, type_label(d->et)) == 0,
              "describe %s type '%s' want '%s'", DS_PATH[i], info.type, type_label(d->et));
        char want[64] = "";
        if (d->chunked && d->rank > 0 && d->filters) {
            if (d->filters & F_SHUFFLE) strcat(want, "+shuffle");
            if (d->filters & F_DEFLATE) strcat(want, "+deflate");
            if (d->filters & F_FLETCHER) strcat(want, "+fletcher32");
        } else {
            strcpy(want, "+none");
        }
        CHECK(memchr(info.filters, '\0', sizeof info.filters) && strcmp(info.filters, want + 1) == 0,
              "describe %s filters '%s' want '%s'", DS_PATH[i], info.filters, want + 1);
    }
}

/* Rows [t0, t0+n) of (layer, head) of dataset `which` as the reader must return them. */
static bool expected_rows(const model *m, int which, int64_t nheads, int64_t width, int64_t layer,
                          int64_t head, int64_t t0, int64_t n, float *out)
{
    const dmodel *d = &m->d[which];
    const int64_t T = (int64_t)d->dims[2];
    bool nonneg = which == TRACE_COLSUM || which == TRACE_ATTN_FULL, ok = true;
    size_t es = esize(d->et);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < width; c++) {
            size_t idx = (size_t)((((layer * nheads + head) * T) + t0 + r) * width + c);
            float v = decode_f32(d->et, d->raw + idx * es);
            out[r * width + c] = v;
            if (!isfinite(v) || (nonneg && v < 0)) ok = false;
        }
    return ok;
}

static void check_one_read(trace *tr, const model *m, int which, int64_t nheads, int64_t width,
                           int64_t layer, int64_t head, int64_t t0, int64_t n, bool whole, float *got,
                           float *want)
{
    kv_err err;
    kv_err_clear(&err);
    int rc = whole ? trace_read_head(tr, (trace_dset)which, layer, head, got, &err)
                   : trace_read_rows(tr, (trace_dset)which, layer, head, t0, n, got, &err);
    bool ok = expected_rows(m, which, nheads, width, layer, head, t0, n, want);
    STAT(ok ? 5 : 6);
    if (!ok) {
        CHECK(rc == KV_EINPUT, "%s[%lld,%lld] rows %lld+%lld has a bad value but read returned %d",
              DS_PATH[which], (long long)layer, (long long)head, (long long)t0, (long long)n, rc);
        check_err(&err, "trace_read_rows");
        return;
    }
    CHECK(rc == KV_OK, "%s[%lld,%lld] rows %lld+%lld: rejected: %s", DS_PATH[which], (long long)layer,
          (long long)head, (long long)t0, (long long)n, err.msg);
    for (int64_t i = 0; i < n * width; i++)
        CHECK(memcmp(&got[i], &want[i], sizeof(float)) == 0,
              "%s[%lld,%lld] element %lld = %a, stored %a", DS_PATH[which], (long long)layer, (long long)head,
              (long long)i, (double)got[i], (double)want[i]);
}

static void check_reads(trace *tr, const model *m, const expect *e)
{
    const int64_t T = e->T;
    int32_t *tok = calloc((size_t)T, sizeof *tok);
    CHECK(tok, "out of memory");
    kv_err err;
    kv_err_clear(&err);
    CHECK(trace_read_tokens(tr, tok, &err) == KV_OK, "trace_read_tokens: %s", err.msg);
    const dmodel *td = &m->d[TRACE_TOKENS];
    for (int64_t t = 0; t < T; t++) {
        int64_t v;
        decode_int(td->et, td->raw + (size_t)t * esize(td->et), &v);
        CHECK(tok[t] == v, "token %lld = %d, stored %lld", (long long)t, tok[t], (long long)v);
    }
    free(tok);

    static const int PER_HEAD[] = {TRACE_KEYS, TRACE_VALUES, TRACE_QUERIES, TRACE_COLSUM, TRACE_ATTN_FULL};
    float *got = malloc(sizeof(float) * (size_t)(T * (T > e->D ? T : e->D) + 1));
    float *want = malloc(sizeof(float) * (size_t)(T * (T > e->D ? T : e->D) + 1));
    CHECK(got && want, "out of memory");
    for (size_t k = 0; k < sizeof PER_HEAD / sizeof PER_HEAD[0]; k++) {
        int which = PER_HEAD[k];
        int64_t nheads = which == TRACE_KEYS || which == TRACE_VALUES ? e->K : e->H;
        int64_t width = which == TRACE_COLSUM ? 1 : which == TRACE_ATTN_FULL ? T : e->D;
        if (!e->present[which]) {
            kv_err_clear(&err);
            CHECK(trace_read_head(tr, (trace_dset)which, 0, 0, got, &err) != KV_OK, "read of absent %s",
                  DS_PATH[which]);
            check_err(&err, "read of an absent dataset");
            continue;
        }
        for (int64_t l = 0; l < e->L; l++)
            for (int64_t h = 0; h < nheads; h++)
                check_one_read(tr, m, which, nheads, width, l, h, 0, T, true, got, want);
        /* a few partial reads, some outside the dataset */
        for (int i = 0; i < 4; i++) {
            int64_t l = (int64_t)(rnd() % (uint64_t)(e->L + 1)) - (i == 3);
            int64_t h = (int64_t)(rnd() % (uint64_t)(nheads + 1));
            int64_t t0 = (int64_t)(rnd() % (uint64_t)(T + 1)) - (i == 2);
            int64_t n = (int64_t)(rnd() % (uint64_t)(T + 2));
            if (l >= 0 && l < e->L && h < nheads && t0 >= 0 && n >= 1 && t0 + n <= T) {
                check_one_read(tr, m, which, nheads, width, l, h, t0, n, false, got, want);
            } else {
                kv_err_clear(&err);
                CHECK(trace_read_rows(tr, (trace_dset)which, l, h, t0, n, got, &err) == KV_EFAIL,
                      "out-of-range read (%lld, %lld, %lld, %lld) not refused", (long long)l, (long long)h,
                      (long long)t0, (long long)n);
                check_err(&err, "out-of-range read");
            }
        }
    }
    kv_err_clear(&err);
    CHECK(trace_read_rows(tr, TRACE_LOGITS, 0, 0, 0, 1, got, &err) == KV_EFAIL, "read_rows on logits");
    check_err(&err, "read_rows on logits");
    free(got);
    free(want);
}

/* ---- HDF5 id accounting ------------------------------------------------ */

/* HDF5 1.10 has no public count of transient ids (H5Inmembers refuses
 * library types), but it hands out ids of one type with increasing serial
 * numbers: an id of that type made before the run and one made after it
 * bracket every id the run created, and each of those must be gone. Files,
 * groups, datasets and attributes are also counted by H5Fget_obj_count. */
enum { PROBE_SPACE, PROBE_TYPE, PROBE_PLIST, NPROBE };

static hid_t probe(int k)
{
    hid_t id = k == PROBE_SPACE ? H5Screate(H5S_SCALAR)
             : k == PROBE_TYPE  ? H5Tcopy(H5T_NATIVE_INT)
                                : H5Pcreate(H5P_DATASET_XFER);
    H5OK(id);
    H5OK(k == PROBE_SPACE ? H5Sclose(id) : k == PROBE_TYPE ? H5Tclose(id) : H5Pclose(id));
    return id;
}

static void probe_all(hid_t *out)
{
    for (int k = 0; k < NPROBE; k++) out[k] = probe(k);
}

static void check_no_leaked_ids(const hid_t *before)
{
    static const char *const WHAT[NPROBE] = {"dataspace", "datatype", "property list"};
    hid_t after[NPROBE];
    probe_all(after);
    for (int k = 0; k < NPROBE; k++) {
        CHECK(after[k] > before[k] && after[k] - before[k] < 10000000, "id probe order");
        for (hid_t id = before[k] + 1; id < after[k]; id++)
            CHECK(H5Iis_valid(id) <= 0, "a %s id (%lld) outlived the run", WHAT[k], (long long)id);
    }
}

static void free_model(model *m)
{
    for (int i = 0; i < NDS; i++) free(m->d[i].raw);
}

static void run_one(const uint8_t *data, size_t size)
{
    src in = {data, size};
    model m;
    build_valid(&m, &in);
    bool mutated = in.n > 0;
    mutate(&m, &in);
    finalize(&m);
    expect e;
    bool valid = oracle(&m, &e);
    CHECK(valid || mutated, "the unmutated trace must be valid");
    STAT(0);
    STAT(valid ? 1 : 2);
    if (valid && e.f16) STAT(3);
    if (valid && e.evict) STAT(4);
    if (m.reopen) STAT(7);

    hid_t ids_before[NPROBE];
    probe_all(ids_before);
    char name[64];
    hid_t file = write_model(&m, name, sizeof name);
    trace *tr = (trace *)0x1;
    kv_err err;
    kv_err_clear(&err);
    int rc = trace_open_hid(file, name, &tr, &err);
    if (rc != KV_OK) {
        CHECK(tr == NULL, "failed open left *out set");
        check_err(&err, "trace_open_hid");
        CHECK(rc == err.code, "rc %d != err.code %d", rc, err.code);
        CHECK(!valid, "valid trace rejected: %s", err.msg);
        /* SPEC §2: an error names the file (then the object and the problem) */
        if (err.code == KV_EINPUT)
            CHECK(strncmp(err.msg, name, strlen(name)) == 0, "message does not name the file: '%s'", err.msg);
    } else {
        CHECK(tr != NULL && err.code == KV_OK, "open succeeded without a trace");
        CHECK(valid, "invalid trace accepted");
        check_meta(trace_get_meta(tr), &e);
        CHECK(strcmp(trace_path(tr), name) == 0, "trace_path");
        check_describe(tr, &m, &e);
        check_reads(tr, &m, &e);
        trace_close(tr);
    }
    H5OK(H5Fclose(file));
    ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    CHECK(open == 0, "%zd HDF5 objects still open after closing the file", open);
    check_no_leaked_ids(ids_before);
    free_model(&m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    h5u_quiet();
#ifdef FUZZ_STATS
    atexit(print_stats);
#endif
    /* Warm HDF5 up on a few well-formed traces: it initialises packages and
     * registers some ids once, lazily, and those must not count as leaks. */
    static const uint8_t warm[][10] = {
        {0, 0, 0, 0, 0, 0, 0x00, 0x10, 0, 0},
        {1, 2, 3, 4, 5, 6, 0x77, 0x10, 1, 0},
        {2, 3, 1, 0, 9, 9, 0x0E, 0x00, 2, 0},
    };
    for (size_t w = 0; w < sizeof warm / sizeof warm[0]; w++) {
        src in = {warm[w], sizeof warm[w]};
        model m;
        build_valid(&m, &in);
        char name[64];
        hid_t f = write_model(&m, name, sizeof name);
        trace *tr;
        kv_err err;
        kv_err_clear(&err);
        if (trace_open_hid(f, name, &tr, &err) == KV_OK) trace_close(tr);
        H5Fclose(f);
        free_model(&m);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_one(data, size);
    return 0;
}
