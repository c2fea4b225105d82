/* fuzz_input.c: what the input bytes mean.
 *
 * The bytes are decisions, and missing bytes read as 0. The first 10 pick a
 * small well-formed trace (fz_build_valid); after them, each group of bytes
 * is one mutation of the model (fz_mutate): an op byte, then its arguments.
 * This is the only file that reads the input, so it is the encoding that
 * tests/fuzz/regressions/ and make_seeds.py are written in: changing what a
 * byte means here changes what those files test.
 */
#include <math.h>
#include <string.h>

#include "fuzz_model.h"

/* ---- input bytes ------------------------------------------------------ */

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

/* ---- the header: a valid trace ----------------------------------------- */

enum { OPT_Q = 1, OPT_COLSUM = 2, OPT_LOGITS = 4, OPT_LOGPROBS = 8, OPT_FULL = 16, OPT_EVICT = 32, OPT_KVZIP = 64,
       OPT_REF = 128 /* /attention/out and /attention/lse */ };

/* The attributes of a valid trace of the model's L, H, K, D, T, V; `budget`
 * is the evict budget (N). */
static void valid_attrs(model *m, int64_t budget)
{
    amodel *a = m->a;
    a[A_SCHEMA] = (amodel){.present = true, .et = ET_I64, .n = 2};
    fz_put_le(a[A_SCHEMA].raw[0], 1, 8);
    fz_set_str_attr(&a[A_CREATOR], "kvtrace-fuzz 0.1", S_VL_UTF8);
    fz_set_str_attr(&a[A_MODEL], "fuzz-model", S_VL_UTF8);
    fz_set_str_attr(&a[A_ARCH], (fz_rnd() & 1) ? "llama" : "qwen3", S_VL_UTF8);
    fz_set_str_attr(&a[A_ROPE_STYLE], (fz_rnd() & 1) ? "interleaved" : "neox", S_VL_UTF8);
    fz_set_str_attr(&a[A_MODE], m->evict ? "evict" : "full", S_VL_UTF8);
    fz_set_str_attr(&a[A_STORAGE], m->f16 ? "f16" : "f32", S_VL_UTF8);
    fz_set_int_attr(&a[A_LAYERS], m->L);
    fz_set_int_attr(&a[A_HEADS], m->H);
    fz_set_int_attr(&a[A_KV_HEADS], m->K);
    fz_set_int_attr(&a[A_HEAD_DIM], m->D);
    fz_set_int_attr(&a[A_TOKENS], m->T);
    fz_set_int_attr(&a[A_PROMPT], 1 + (int64_t)(fz_rnd() % (uint64_t)m->T));
    fz_set_int_attr(&a[A_VOCAB], m->V);
    a[A_THETA] = (amodel){.present = true, .et = ET_F64, .n = 1};
    fz_encode(ET_F64, a[A_THETA].raw[0], 10000.0, 0);
    fz_set_int_attr(&a[A_CHUNK], (int64_t)(fz_rnd() % 3) * 16);
    if (m->evict) {
        fz_set_str_attr(&a[A_EV_POLICY], "h2o", S_VL_UTF8);
        fz_set_str_attr(&a[A_EV_PARAMS], "recent=0.5", S_VL_UTF8);
        fz_set_int_attr(&a[A_EV_BUDGET], budget);
        fz_set_int_attr(&a[A_EV_CHUNK], 1);
    }
}

/* The required datasets, and the optional ones `opt` names; an eviction
 * record of S steps keeping N tokens. */
static void valid_dsets(model *m, unsigned opt, int64_t S, int64_t N)
{
    fz_default_dset(m, TRACE_TOKENS);
    fz_default_dset(m, TRACE_KEYS);
    fz_default_dset(m, TRACE_VALUES);
    if (opt & OPT_Q) fz_default_dset(m, TRACE_QUERIES);
    if (opt & OPT_COLSUM) fz_default_dset(m, TRACE_COLSUM);
    if (opt & OPT_FULL) fz_default_dset(m, TRACE_ATTN_FULL);
    if (opt & OPT_KVZIP) fz_default_dset(m, TRACE_KVZIP);
    if (opt & OPT_REF) fz_default_dset(m, TRACE_ATTN_OUT), fz_default_dset(m, TRACE_ATTN_LSE);
    if (opt & OPT_LOGITS) fz_default_dset(m, TRACE_LOGITS);
    if (opt & OPT_LOGPROBS) fz_default_dset(m, TRACE_LOGPROBS);
    if (opt & OPT_EVICT) {
        fz_set_dset(m, TRACE_EVICT_RETAINED, 4, (int64_t[]){S, m->L, m->K, N}, ET_I32);
        fz_set_dset(m, TRACE_EVICT_STEP_END, 1, (int64_t[]){S}, ET_I32);
    }
}

void fz_build_valid(model *m, src *in)
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
    if (m->evict) opt &= ~(unsigned)(OPT_COLSUM | OPT_KVZIP | OPT_REF);
    else opt &= ~(unsigned)OPT_EVICT;
    fz_seed(0x1234567ull + b[8] + ((uint64_t)b[9] << 8));
    int64_t S = 1 + (int64_t)(fz_rnd() % 3), N = 1 + (int64_t)(fz_rnd() % (uint64_t)m->T);

    valid_attrs(m, N);
    valid_dsets(m, opt, S, N);
    for (int i = 0; i < NDS; i++) {
        if (m->d[i].obj != OBJ_DSET) continue;
        m->d[i].chunked = !contiguous;
        m->d[i].filters = contiguous ? 0 : filt;
    }
}

/* ---- attribute mutations ----------------------------------------------- */

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

/* A string flavour from one byte: its low bits pick the flavour, its top
 * bit makes a fixed-length one UTF-8. */
static int str_flavor(uint8_t f)
{
    return f % S_NFLAVORS | ((f & 0x80) && f % S_NFLAVORS > S_VL_ASCII ? S_FIX_UTF8 : 0);
}

/* An integer value (iv: the current one), keeping an integer type if it had one. */
static void attr_int(amodel *a, src *in, int64_t iv, bool was_str)
{
    etype et = a->present && fz_kind_of(a->et) == K_INT ? a->et : ET_I64;
    bool be = a->be;
    int n = a->present && !was_str ? a->n : 1;
    int64_t v = interesting_int(in, iv);
    memset(a, 0, sizeof *a);
    a->present = true, a->et = et, a->be = be, a->n = n ? n : 1;
    for (int i = 0; i < a->n && i < 2; i++) fz_encode(et, a->raw[i], (double)v, i ? 0 : v);
}

/* Another numeric type, same value (dv, iv) as far as the type holds it. */
static void attr_retype(amodel *a, src *in, double dv, int64_t iv, bool was_str)
{
    uint8_t k = u8(in);
    static const etype NUM[] = {ET_I8, ET_U8, ET_I16, ET_U16, ET_I32, ET_U32, ET_I64, ET_U64,
                                ET_F16, ET_F32, ET_F64, ET_BF16, ET_I128, ET_ENUM, ET_COMPOUND,
                                ET_ARR};
    etype et = NUM[k % (sizeof NUM / sizeof NUM[0])];
    int64_t second = 0;
    if (a->present && fz_kind_of(a->et) == K_INT && a->n == 2) fz_decode_int(a->et, a->raw[1], &second);
    int n = a->present && !was_str && a->n ? a->n : 1;
    bool as_array = a->as_array;
    memset(a, 0, sizeof *a);
    a->present = true, a->et = et, a->be = k & 0x80, a->n = n, a->as_array = as_array;
    if (k & 0x40) { /* a special number instead of the same value */
        static const double F[] = {NAN, INFINITY, -INFINITY, 0, -0.0, -1, 1e-300, 1e300, 0.5, 1e-8};
        dv = F[u8(in) % (sizeof F / sizeof F[0])];
        iv = isfinite(dv) && fabs(dv) < 9e18 ? (int64_t)dv : 0;
    }
    fz_encode(et, a->raw[0], was_str ? 1.5 : dv, iv);
    fz_encode(et, a->raw[1], (double)second, second);
}

/* Random bytes as a string (long ones too). */
static void attr_bytes(amodel *a, src *in)
{
    size_t len = u8(in);
    if (len & 1) len *= 3;
    if (len > MAX_STR) len = MAX_STR;
    int flavor = str_flavor(u8(in));
    memset(a, 0, sizeof *a);
    a->present = true, a->et = ET_STR, a->n = 1, a->sflavor = flavor, a->slen = len;
    for (size_t i = 0; i < len; i++) a->s[i] = in->n ? u8(in) : (uint8_t)('a' + i % 26);
}

/* A known word, a near miss, or a control character. */
static void attr_word(amodel *a, src *in)
{
    static const char *const W[] = {
        "llama", "qwen2", "qwen3", "mistral", "interleaved", "neox", "full", "evict", "f32",
        "f16", "h2o", "", "Full", "evict ", "f32\n", "f64", "ful", "llama\nx", "neox\r",
        "f16 ", " f32", "evict\x01", "qwen", "tova:window=4", "llama\tb"};
    uint8_t k = u8(in), f = u8(in);
    fz_set_str_attr(a, W[k % (sizeof W / sizeof W[0])], str_flavor(f));
}

/* Element count and dataspace shape. */
static void attr_shape(amodel *a, src *in)
{
    if (!a->present) return;
    uint8_t k = u8(in) % 4;
    if (k == 0) a->n = 0;
    else if (k == 1) a->n = 1, a->as_array = !a->as_array;
    else if (k == 2) {
        if (a->n == 1 && a->et != ET_STR) memcpy(a->raw[1], a->raw[0], 16);
        a->n = 2;
    } else a->n = 1;
}

static void mut_attr(model *m, src *in, int op)
{
    amodel *a = &m->a[u8(in) % NATTR];
    bool was_str = a->present && a->et == ET_STR;
    double dv = a->present && !was_str ? fz_decode_f64(a->et, a->raw[0]) : 0;
    int64_t iv = 0;
    if (a->present && fz_kind_of(a->et) == K_INT) fz_decode_int(a->et, a->raw[0], &iv);
    else iv = (int64_t)(isfinite(dv) && fabs(dv) < 9e18 ? dv : 0);
    switch (op) {
    case 0: a->present = false; break;
    case 1: attr_int(a, in, iv, was_str); break;
    case 2: attr_retype(a, in, dv, iv, was_str); break;
    case 3: attr_bytes(a, in); break;
    case 4: attr_word(a, in); break;
    case 5: attr_shape(a, in); break;
    }
}

/* ---- dataset mutations ------------------------------------------------- */

static int pick_dset(src *in) { return u8(in) % NDS; }

static bool shape_ok(const dmodel *d)
{
    double n = 1;
    for (int i = 0; i < d->rank; i++) n *= (double)d->dims[i];
    return n <= MAX_ELEMS;
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
        for (size_t i = 0; i < fz_esize(d->et); i++) d->raw[at * fz_esize(d->et) + i] = u8(in);
        break;
    case 1: /* the edge of what this dataset may hold */
        if (fz_kind_of(d->et) == K_INT) iv = m->V - 1 + (int64_t)(k / 4 % 3); /* V-1, V, V+1 */
        else v = (k / 4) % 2 ? -ldexp(1, -(int)(k / 8 % 30)) : (k / 8) % 2 ? NAN : INFINITY;
        run = 1 + (size_t)(k >> 6);
        break;
    default:
        if (fz_kind_of(d->et) == K_INT) {
            uint8_t j = u8(in);
            iv = j % 2 ? I[(j / 2) % (sizeof I / sizeof I[0])] : (int64_t)(j / 2) - 5;
        } else {
            v = F[(k / 4) % (sizeof F / sizeof F[0])];
        }
        break;
    }
    if (k % 4 != 0)
        for (size_t i = at; i < at + run && i < d->nelem; i++)
            fz_encode(d->et, d->raw + i * fz_esize(d->et), v, iv);
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
        else fz_default_dset(m, which);
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
        fz_gen_values(m, which);
        break;
    }
    case 2: { /* another rank */
        uint8_t k = u8(in) % 3;
        if (k == 0 && d->rank < MAX_RANK) d->dims[d->rank++] = 1;
        else if (k == 1 && d->rank > 0) d->rank--;
        else d->rank = 0; /* scalar */
        fz_gen_values(m, which);
        break;
    }
    case 3: { /* another element type */
        uint8_t k = u8(in);
        d->et = (etype)(k % ET_COUNT);
        d->be = k & 0x80;
        fz_gen_values(m, which);
        break;
    }
    case 4: poke_values(m, d, in); break;
    case 5: set_layout(m, d, in); break;
    }
}

/* ---- the sequence ------------------------------------------------------ */

void fz_mutate(model *m, src *in)
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
