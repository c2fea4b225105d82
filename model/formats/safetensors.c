/* safetensors: bounds-checked reader (format in safetensors.h).
 *
 * The header length is checked against the file before a byte of JSON is
 * read; jansson parses exactly those bytes (duplicate names refused); each
 * entry's dtype, shape and offsets are then checked in integer arithmetic
 * that cannot overflow (shape products against the data size, offsets
 * against the data size) before any pointer is formed. */
#include "model/formats/safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/filemap.h"
#include "core/half.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors.c copies float32 as is");

#define NAME_CAP 200                      /* longest name quoted in a message */
#define MAX_HEADER ((uint64_t)100 << 20)  /* the format's own limit: 100 MB */

struct st_file {
    char *where;
    const uint8_t *data;  /* [size] the file image */
    size_t size;
    kv_filemap map;       /* st_open's mapping (zeroed for a borrowed buffer) */
    int64_t n;
    st_tensor *t;         /* [n] sorted by name */
};

typedef void (*to_f32_fn)(const uint8_t *src, float *dst, uint64_t n);

static void f32_to_f32(const uint8_t *src, float *dst, uint64_t n)
{
    memcpy(dst, src, n * sizeof(float));
}


/* The dtypes of the format; a converter where kvtrace reads one. */
static const struct {
    const char *name;
    uint32_t size;
    to_f32_fn to_f32;
} DTYPES[] = {
    {"F32", 4, f32_to_f32},
    {"F16", 2, half_le_bytes_to_float},
    {"BF16", 2, bf16_le_bytes_to_float},
    {"F64", 8, NULL},       {"I64", 8, NULL},       {"I32", 4, NULL},
    {"I16", 2, NULL},       {"I8", 1, NULL},        {"U8", 1, NULL},
    {"BOOL", 1, NULL},      {"U16", 2, NULL},       {"U32", 4, NULL},
    {"U64", 8, NULL},       {"F8_E4M3", 1, NULL},   {"F8_E5M2", 1, NULL},
};
#define N_DTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

const char *st_dtype_name(int d) { return d >= 0 && d < N_DTYPES ? DTYPES[d].name : "?"; }
uint32_t st_dtype_size(int d) { return d >= 0 && d < N_DTYPES ? DTYPES[d].size : 0; }
const char *st_where(const st_file *f) { return f->where; }
int64_t st_tensor_count(const st_file *f) { return f->n; }

const st_tensor *st_tensor_at(const st_file *f, int64_t i)
{
    return i >= 0 && i < f->n ? &f->t[i] : NULL;
}

/* ---- one header entry --------------------------------------------------- */

static int bad_entry(const st_file *f, const char *name, const char *what, kv_err *err)
{
    return kv_fail(err, KV_EINPUT, "%s: tensor %.*s: %s", f->where, NAME_CAP, name, what);
}

static int parse_dtype(const st_file *f, const char *name, json_t *v, int *dtype, kv_err *err)
{
    if (!json_is_string(v)) return bad_entry(f, name, "\"dtype\" is not a string", err);
    for (int d = 0; d < N_DTYPES; d++)
        if (strcmp(json_string_value(v), DTYPES[d].name) == 0) return *dtype = d, KV_OK;
    return kv_fail(err, KV_EINPUT, "%s: tensor %.*s: unknown dtype '%.32s'", f->where, NAME_CAP,
                   name, json_string_value(v));
}

/* shape: up to ST_MAX_DIMS non-negative integers whose product, at the dtype's
 * size, fits in `room` bytes (a shape with a 0 is empty, whatever its other
 * dimensions). */
static int parse_shape(const st_file *f, st_tensor *t, json_t *v, uint64_t room, kv_err *err)
{
    if (!json_is_array(v) || json_array_size(v) > ST_MAX_DIMS)
        return bad_entry(f, t->name, "\"shape\" is not an array of at most 8 integers", err);
    t->n_dims = (int)json_array_size(v);
    bool empty = false;
    for (int d = 0; d < t->n_dims; d++) {
        json_t *e = json_array_get(v, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return bad_entry(f, t->name, "\"shape\" holds something other than a non-negative "
                             "integer", err);
        t->shape[d] = json_integer_value(e);
        empty |= t->shape[d] == 0;
    }
    uint64_t n = empty ? 0 : 1, max = room / DTYPES[t->dtype].size;
    for (int d = 0; d < t->n_dims && !empty; d++) {
        uint64_t x = (uint64_t)t->shape[d];
        if (n > max / x) {
            char msg[160];
            snprintf(msg, sizeof msg, "shape dimension %d = %" PRIu64 " makes the tensor larger "
                     "than the data section (%" PRIu64 " bytes)", d, x, room);
            return bad_entry(f, t->name, msg, err);
        }
        n *= x;
    }
    t->n_elems = n;
    t->nbytes = n * DTYPES[t->dtype].size; /* <= room: no overflow */
    return KV_OK;
}

/* data_offsets [begin, end] inside the data section of `room` bytes, end -
 * begin = nbytes; the tensor's data then lies at data_start + begin. */
static int parse_offsets(const st_file *f, st_tensor *t, json_t *v, uint64_t data_start,
                         uint64_t room, kv_err *err)
{
    json_t *b = json_array_get(v, 0), *e = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(b) ||
        !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < 0)
        return bad_entry(f, t->name, "\"data_offsets\" is not [begin, end] of non-negative "
                         "integers", err);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (begin > end || end > room)
        return kv_fail(err, KV_EINPUT, "%s: tensor %.*s: data_offsets [%" PRIu64 ", %" PRIu64
                       "] run past the end of the data (%" PRIu64 " bytes; truncated file?)",
                       f->where, NAME_CAP, t->name, begin, end, room);
    if (end - begin != t->nbytes)
        return kv_fail(err, KV_EINPUT, "%s: tensor %.*s: data_offsets span %" PRIu64 " bytes, "
                       "its shape and dtype %s need %" PRIu64, f->where, NAME_CAP, t->name,
                       end - begin, DTYPES[t->dtype].name, t->nbytes);
    t->offset = data_start + begin;
    t->data = f->data + t->offset;
    return KV_OK;
}

static int parse_entry(const st_file *f, st_tensor *t, const char *name, json_t *v,
                       uint64_t data_start, kv_err *err)
{
    uint64_t room = f->size - data_start;
    if (!(t->name = strdup(name))) return kv_fail(err, KV_EFAIL, "%s: out of memory", f->where);
    if (!json_is_object(v)) return bad_entry(f, name, "entry is not an object", err);
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x)
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return kv_fail(err, KV_EINPUT, "%s: tensor %.*s: unexpected field '%.64s'", f->where,
                           NAME_CAP, name, key);
    int rc = parse_dtype(f, name, json_object_get(v, "dtype"), &t->dtype, err);
    if (!rc) rc = parse_shape(f, t, json_object_get(v, "shape"), room, err);
    if (!rc) rc = parse_offsets(f, t, json_object_get(v, "data_offsets"), data_start, room, err);
    return rc;
}

/* ---- the header --------------------------------------------------------- */

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* No two tensors with data share a byte. */
static int check_overlap(const st_file *f, kv_err *err)
{
    if (f->n < 2) return KV_OK;
    const st_tensor **by = kv_calloc((size_t)f->n, sizeof *by, "safetensors index", err);
    if (!by) return KV_EFAIL;
    int64_t m = 0;
    for (int64_t i = 0; i < f->n; i++)
        if (f->t[i].nbytes) by[m++] = &f->t[i];
    if (m > 1) qsort(by, (size_t)m, sizeof *by, cmp_offset);
    int rc = KV_OK;
    for (int64_t i = 1; i < m && !rc; i++)
        if (by[i - 1]->offset + by[i - 1]->nbytes > by[i]->offset)
            rc = kv_fail(err, KV_EINPUT, "%s: tensors %.*s and %.*s overlap", f->where, NAME_CAP,
                         by[i - 1]->name, NAME_CAP, by[i]->name);
    free(by);
    return rc;
}

static int check_metadata(const st_file *f, json_t *meta, kv_err *err)
{
    const char *key;
    json_t *x;
    if (!json_is_object(meta))
        return kv_fail(err, KV_EINPUT, "%s: \"__metadata__\" is not an object", f->where);
    json_object_foreach(meta, key, x)
        if (!json_is_string(x))
            return kv_fail(err, KV_EINPUT, "%s: \"__metadata__\" entry '%.64s' is not a string",
                           f->where, key);
    return KV_OK;
}

static int parse_json(st_file *f, json_t *root, uint64_t data_start, kv_err *err)
{
    if (!json_is_object(root))
        return kv_fail(err, KV_EINPUT, "%s: the header is not a JSON object", f->where);
    json_t *meta = json_object_get(root, "__metadata__");
    int rc = meta ? check_metadata(f, meta, err) : KV_OK;
    if (rc) return rc;
    size_t n = json_object_size(root) - (meta ? 1 : 0);
    f->t = kv_calloc(n ? n : 1, sizeof *f->t, "safetensors tensors", err);
    if (!f->t) return KV_EFAIL;
    const char *name;
    json_t *v;
    json_object_foreach(root, name, v) {
        if (v == meta) continue;
        rc = parse_entry(f, &f->t[f->n++], name, v, data_start, err);
        if (rc) return rc;
    }
    if (f->n > 1) qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_name);
    return check_overlap(f, err);
}

static int parse_header(st_file *f, kv_err *err)
{
    if (f->size < 8)
        return kv_fail(err, KV_EINPUT, "%s: truncated: %zu bytes, a safetensors file starts "
                       "with an 8-byte header length", f->where, f->size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)f->data[i] << (8 * i);
    if (n > f->size - 8 || n > MAX_HEADER)
        return kv_fail(err, KV_EINPUT, "%s: header length %" PRIu64 " runs past the end of the "
                       "file (%zu bytes)%s", f->where, n, f->size,
                       n > MAX_HEADER ? " or over the 100 MB limit" : "");
    json_error_t je;
    json_t *root = json_loadb((const char *)f->data + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return kv_fail(err, KV_EINPUT, "%s: malformed JSON header at byte %d: %.200s", f->where,
                       8 + je.position, je.text);
    int rc = parse_json(f, root, 8 + n, err);
    json_decref(root);
    return rc;
}

/* ---- open / close / read ------------------------------------------------ */

int st_parse_buffer(const uint8_t *data, size_t size, const char *where, st_file **out,
                    kv_err *err)
{
    *out = NULL;
    st_file *f = kv_calloc(1, sizeof *f, "safetensors", err);
    if (!f) return KV_EFAIL;
    f->data = data, f->size = size;
    int rc = (f->where = strdup(where)) ? KV_OK : kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc) rc = parse_header(f, err);
    if (rc) {
        st_close(f);
        return rc;
    }
    *out = f;
    return KV_OK;
}

int st_open(const char *path, st_file **out, kv_err *err)
{
    *out = NULL;
    kv_filemap fm;
    int rc = kv_filemap_open(path, &fm, err);
    if (!rc) rc = st_parse_buffer(fm.data, fm.size, path, out, err);
    if (rc) {
        kv_filemap_close(&fm);
        return rc;
    }
    (*out)->map = fm;
    kv_filemap_will_read(&fm); /* the loader reads it all, in order */
    return KV_OK;
}

void st_close(st_file *f)
{
    if (!f) return;
    for (int64_t i = 0; i < f->n; i++) free((char *)f->t[i].name);
    free(f->t);
    kv_filemap_close(&f->map);
    free(f->where);
    free(f);
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    st_tensor key = {.name = name};
    return f->n ? bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, cmp_name) : NULL;
}

int st_tensor_readable(const st_file *f, const st_tensor *t, kv_err *err)
{
    if (DTYPES[t->dtype].to_f32) return KV_OK;
    return kv_fail(err, KV_EINPUT, "%s: tensor %.*s has dtype %s, kvtrace reads F32, F16 and BF16",
                   f->where, NAME_CAP, t->name, DTYPES[t->dtype].name);
}

int st_tensor_read_f32(const st_file *f, const st_tensor *t, float *dst, uint64_t n, kv_err *err)
{
    if (n != t->n_elems)
        return kv_fail(err, KV_EFAIL, "%s: tensor %.*s: asked for %" PRIu64 " values, it has %"
                       PRIu64, f->where, NAME_CAP, t->name, n, t->n_elems);
    int rc = st_tensor_readable(f, t, err);
    if (rc) return rc;
    DTYPES[t->dtype].to_f32(t->data, dst, n);
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return kv_fail(err, KV_EINPUT, "%s: tensor %.*s: element %" PRIu64 " is %s", f->where,
                           NAME_CAP, t->name, i, isnan(dst[i]) ? "NaN" : "infinite");
    return KV_OK;
}
