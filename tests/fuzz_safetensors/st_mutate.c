/* st_mutate: a structure-aware mutator for fuzz_safetensors.
 *
 * Byte-level mutation of a safetensors file mostly breaks the header length
 * or the JSON, so the reader's later checks are rarely reached. This
 * mutator parses the input as a model (the header JSON and the data
 * section), makes one or two edits to it, and writes it back with a correct
 * header length, so that most outputs are well-formed files that differ
 * from a valid one in one field:
 *
 * - a tensor's dtype (any of the format's, or a near miss), its shape (a
 *   dimension added, removed, set to 0, 1, an edge value, a non-integer),
 *   its data_offsets (moved by a few bytes, swapped, huge, another
 *   tensor's, the wrong arity or type), a field removed or added, the entry
 *   made a non-object;
 * - tensors added (a copy under a new name), removed or renamed;
 * - "__metadata__" made a non-object or given a non-string value;
 * - the data: one tensor's bytes set to NaN, infinities, subnormals, -0 or
 *   random bits; the section cut short or extended;
 * - the header: its length off by a few bytes, or padded with a non-space.
 *
 * After a shape or dtype edit the offsets are usually laid out again
 * (tensors packed in order, their old bytes kept), so the file stays valid
 * and the conversions are reached with the new shapes and dtypes. An input
 * that does not parse, and one edit in eight, goes to libFuzzer's own
 * byte mutations. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz_safetensors/st_fuzz.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed);

#define MAX_DATA (1u << 16) /* data bytes a relayout makes */

typedef struct {
    uint64_t s; /* xorshift64 state */
    json_t *head;
    uint8_t *data;
    size_t len;
    int64_t len_delta; /* added to the header length when written */
    char pad;          /* the header's padding byte */
} model;

static uint64_t rnd(model *m, uint64_t n)
{
    m->s ^= m->s << 13, m->s ^= m->s >> 7, m->s ^= m->s << 17;
    return n ? m->s % n : 0;
}

static bool parse(model *m, const uint8_t *d, size_t size)
{
    if (size < 8) return false;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)d[i] << (8 * i);
    if (n > size - 8) return false;
    m->head = json_loadb((const char *)d + 8, (size_t)n, 0, NULL);
    if (!json_is_object(m->head)) return false;
    m->len = size - 8 - (size_t)n;
    m->data = malloc(m->len + 1);
    if (m->data) memcpy(m->data, d + 8 + n, m->len);
    return m->data != NULL;
}

/* A random entry other than "__metadata__" (NULL when there is none); its name in *name. */
static json_t *pick(model *m, const char **name)
{
    size_t n = json_object_size(m->head), k = (size_t)rnd(m, n + 1), i = 0;
    const char *key;
    json_t *v, *last = NULL;
    json_object_foreach(m->head, key, v) {
        if (strcmp(key, "__metadata__") == 0) continue;
        last = v, *name = key;
        if (i++ >= k) break;
    }
    return last;
}

static json_t *edge_int(model *m)
{
    static const json_int_t E[] = {0, 1, 2, 3, 7, 8, 255, 65536, -1, INT32_MAX, (json_int_t)1 << 32,
                                   ((json_int_t)1 << 62) + 1, INT64_MAX, INT64_MIN};
    return json_integer(E[rnd(m, sizeof E / sizeof E[0])]);
}

/* Something that is not a non-negative integer, or an edge integer. */
static json_t *odd_value(model *m)
{
    switch (rnd(m, 6)) {
    case 0: return json_real(rnd(m, 2) ? 1.5 : 2.0);
    case 1: return json_string("3");
    case 2: return json_null();
    case 3: return json_array();
    case 4: return json_true();
    default: return edge_int(m);
    }
}

static void mutate_dtype(model *m, json_t *e)
{
    static const char *const NEAR[] = {"f32", "F128", "", "F32 ", "BF8", "Q8_0", "F8_E4M3FN"};
    const char *name = rnd(m, 4) ? STZ_DTYPES[rnd(m, (uint64_t)STZ_N_DTYPES)].name
                                 : NEAR[rnd(m, sizeof NEAR / sizeof NEAR[0])];
    json_object_set_new(e, "dtype", rnd(m, 16) ? json_string(name) : odd_value(m));
}

static void mutate_shape(model *m, json_t *e)
{
    json_t *s = json_object_get(e, "shape");
    if (!json_is_array(s)) {
        json_object_set_new(e, "shape", json_pack("[ii]", (json_int_t)rnd(m, 5), (json_int_t)rnd(m, 5)));
        return;
    }
    size_t n = json_array_size(s), i = (size_t)rnd(m, n ? n : 1);
    json_t *d = json_array_get(s, i);
    uint64_t v = json_is_integer(d) ? (uint64_t)json_integer_value(d) : 1; /* wraps */
    switch (rnd(m, 6)) {
    case 0: json_array_insert_new(s, (size_t)rnd(m, n + 1), json_integer((json_int_t)rnd(m, 5))); break;
    case 1: json_array_remove(s, i); break;
    case 2: if (n) json_array_set_new(s, i, json_integer((json_int_t)(v + 2 * rnd(m, 2) - 1))); break;
    case 3: if (n) json_array_set_new(s, i, odd_value(m)); break;
    case 4: while (json_array_size(s) <= 8) json_array_append_new(s, json_integer(1)); break;
    default: if (n) json_array_set_new(s, i, json_integer(rnd(m, 2) ? 0 : 1)); break;
    }
}

static void mutate_offsets(model *m, json_t *e)
{
    json_t *o = json_object_get(e, "data_offsets");
    /* unsigned arithmetic: wraps, never overflows */
    uint64_t b = (uint64_t)json_integer_value(json_array_get(o, 0));
    uint64_t x = (uint64_t)json_integer_value(json_array_get(o, 1));
    uint64_t k = rnd(m, 9) - 4, L = m->len, size = x - b;
    const char *other;
    json_t *p;
    switch (rnd(m, 7)) {
    case 0: b += k, x += k; break;
    case 1: if (rnd(m, 2)) b += k; else x += k; break;
    case 2: { uint64_t t = b; b = x, x = t; } break;
    case 3: b = L - size + rnd(m, 2), x = b + size; break;
    case 4:
        if ((p = json_object_get(pick(m, &other), "data_offsets"))) {
            json_object_set(e, "data_offsets", p);
            return;
        }
        break;
    case 5: json_object_set_new(e, "data_offsets", rnd(m, 2) ? json_pack("[I]", (json_int_t)b) :
                                json_pack("[III]", (json_int_t)b, (json_int_t)x, (json_int_t)x)); return;
    default: json_object_set_new(e, "data_offsets", json_pack("[oo]", odd_value(m), odd_value(m))); return;
    }
    json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)b, (json_int_t)x));
}

/* Packs every entry whose dtype and shape are valid, in order, keeping its
 * old bytes where its old offsets were inside the data. */
static void relayout(model *m)
{
    uint8_t *out = calloc(MAX_DATA, 1);
    size_t off = 0;
    const char *key;
    json_t *e;
    if (!out) return;
    json_object_foreach(m->head, key, e) {
        json_t *s = json_object_get(e, "shape"), *d;
        uint32_t es = json_is_string(json_object_get(e, "dtype")) ?
                      stz_dtype_size(json_string_value(json_object_get(e, "dtype"))) : 0;
        uint64_t n = es;
        size_t i;
        if (!es || !json_is_array(s)) continue;
        json_array_foreach(s, i, d) n = json_is_integer(d) && json_integer_value(d) >= 0 &&
                                        json_integer_value(d) < MAX_DATA ? n * (uint64_t)json_integer_value(d)
                                                                         : MAX_DATA + 1;
        if (n > MAX_DATA - off) continue;
        json_t *o = json_object_get(e, "data_offsets");
        json_int_t b = json_integer_value(json_array_get(o, 0));
        for (uint64_t j = 0; j < n; j++)
            out[off + j] = b >= 0 && (uint64_t)b + j < m->len ? m->data[b + j] : (uint8_t)rnd(m, 256);
        json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)off, (json_int_t)(off + n)));
        off += n;
    }
    free(m->data);
    m->data = out, m->len = off;
}

/* One tensor's bytes set to special values of a float type. */
static void mutate_values(model *m, json_t *e)
{
    static const uint32_t F32[] = {0x7fc00000, 0x7f800000, 0xff800000, 0x80000000, 0x00000001,
                                   0x7f7fffff, 0x7fa00000};
    static const uint16_t F16[] = {0x7e00, 0x7c00, 0xfc00, 0x8000, 0x0001, 0x7bff, 0x7f80, 0xff81};
    json_t *o = json_object_get(e, "data_offsets");
    json_int_t b = json_integer_value(json_array_get(o, 0)), x = json_integer_value(json_array_get(o, 1));
    if (b < 0 || x <= b || (uint64_t)x > m->len) return;
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    uint32_t es = dt ? stz_dtype_size(dt) : 1;
    uint64_t at = (uint64_t)b + rnd(m, (uint64_t)(x - b) / (es ? es : 1)) * es;
    if (at + es > (uint64_t)x) return;
    if (es == 4) memcpy(m->data + at, &F32[rnd(m, sizeof F32 / 4)], 4);
    else if (es == 2) memcpy(m->data + at, &F16[rnd(m, sizeof F16 / 2)], 2);
    else m->data[at] = (uint8_t)rnd(m, 256);
}

static void mutate_entry(model *m, const char *name, json_t *e)
{
    char buf[300];
    switch (rnd(m, 12)) {
    case 0: case 1: mutate_dtype(m, e); if (rnd(m, 4)) relayout(m); break;
    case 2: case 3: mutate_shape(m, e); if (rnd(m, 4)) relayout(m); break;
    case 4: case 5: mutate_offsets(m, e); break;
    case 6: case 7: mutate_values(m, e); break;
    case 8:
        snprintf(buf, sizeof buf, "%s%c", rnd(m, 8) ? name : "", (char)('.' + rnd(m, 64)));
        json_object_set_new(m->head, buf, json_deep_copy(e));
        relayout(m);
        break;
    case 9: json_object_del(m->head, name); break;
    case 10: json_object_del(e, rnd(m, 3) ? (rnd(m, 2) ? "dtype" : "shape") : "data_offsets"); break;
    default: json_object_set_new(e, rnd(m, 2) ? "extra" : "offsets", odd_value(m)); break;
    }
}

static void mutate_file(model *m)
{
    const char *name = NULL;
    json_t *e = pick(m, &name), *meta;
    switch (rnd(m, 10)) {
    case 0:
        meta = json_object_get(m->head, "__metadata__");
        if (!json_is_object(meta) || !rnd(m, 3)) json_object_set_new(m->head, "__metadata__",
            rnd(m, 2) ? json_pack("{ss}", "format", "pt") : odd_value(m));
        else json_object_set_new(meta, "k", rnd(m, 2) ? json_string("v") : odd_value(m));
        break;
    case 1: m->len = (size_t)rnd(m, m->len + 1); break;
    case 2: m->len_delta = (int64_t)rnd(m, 17) - 8; break;
    case 3: m->pad = (char)(rnd(m, 2) ? '\0' : '\n'); break;
    case 4: relayout(m); break;
    default:
        if (e && json_is_object(e)) mutate_entry(m, name, e);
        else if (name) json_object_set_new(m->head, name, json_pack("{ss s[i] s[ii]}", "dtype", "F32",
                                           "shape", 1, "data_offsets", 0, 4));
        break;
    }
}

/* The model as a file in out[max] (padded to 8 bytes); 0 when it does not fit. */
static size_t write_file(const model *m, uint8_t *out, size_t max)
{
    char *h = json_dumps(m->head, JSON_COMPACT);
    if (!h) return 0;
    size_t hl = strlen(h), padded = hl + (8 - hl % 8) % 8, total = 8 + padded + m->len;
    if (total > max) {
        free(h);
        return 0;
    }
    uint64_t n = (uint64_t)((int64_t)padded + m->len_delta);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(n >> (8 * i));
    memcpy(out + 8, h, hl);
    memset(out + 8 + hl, m->pad, padded - hl);
    if (m->len) memcpy(out + 8 + padded, m->data, m->len);
    free(h);
    return total;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    model m = {.s = seed * 0x9E3779B97F4A7C15ull + 1, .pad = ' '};
    size_t out = 0;
    if (rnd(&m, 8) && parse(&m, data, size)) {
        mutate_file(&m);
        if (rnd(&m, 3) == 0) mutate_file(&m);
        out = write_file(&m, data, max_size);
    }
    json_decref(m.head);
    free(m.data);
    return out ? out : LLVMFuzzerMutate(data, size, max_size);
}
