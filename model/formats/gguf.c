/* gguf: bounds-checked GGUF v2/v3 reader (format in gguf.h).
 *
 * One cursor walks the image; every read asks `need` first, so no byte past
 * the end is ever touched, and every count is compared with the bytes left
 * (at the smallest size one element can have) before anything is sized from
 * it. Keys and tensor names are indexed by sorting, which also finds
 * duplicates without quadratic work on hostile files. */
#include "model/formats/gguf.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/formats/ggml_types.h"
#include "core/filemap.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gguf.c copies float32 data as is");

#define NAME_CAP 200 /* longest key/name quoted in a message */

struct gguf_kv {
    char *key;          /* NUL-terminated copy */
    size_t key_len;
    uint32_t type, elem_type;
    uint64_t count;     /* arrays: elements; scalars: 1 */
    size_t off;         /* scalar value, or the first array element */
    const uint8_t *val; /* = the image + off */
    char *str;          /* scalar string: NUL-terminated copy */
    size_t str_len;
    size_t *str_off;    /* [count] string arrays: offset of each element's length */
};

typedef struct {
    const char *s;
    size_t len;
    int64_t idx;
} name_ref;

struct gguf_file {
    char *where;
    const uint8_t *data;  /* [size] the file image */
    size_t size;
    kv_filemap map;       /* gguf_open's mapping (zeroed for a borrowed buffer) */
    uint32_t version;
    uint64_t alignment;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;              /* [n_kv] file order */
    gguf_tensor *tensors;     /* [n_tensors] file order */
    size_t *tensor_name_len;  /* [n_tensors] */
    name_ref *kv_index;       /* [n_kv] sorted by key */
    name_ref *tensor_index;   /* [n_tensors] sorted by name */
};

/* ---- type tables ---------------------------------------------------- */

const char *gguf_ggml_type_name(uint32_t t)
{
    const ggml_type_info *ti = ggml_type_get(t);
    return ti ? ti->name : "?";
}

/* ---- cursor ----------------------------------------------------------- */

typedef struct {
    const uint8_t *p;  /* [size] */
    size_t size, pos;
    const char *where;
    kv_err *err;
} cursor;

static int need(cursor *c, uint64_t n, const char *what)
{
    if (n <= c->size - c->pos) return KV_OK;
    return kv_fail(c->err, KV_EINPUT, "%s: truncated: %s at offset %zu needs %" PRIu64
                   " bytes, the file has %zu left", c->where, what, c->pos, n, c->size - c->pos);
}

static int rd_uint(cursor *c, uint32_t nbytes, uint64_t *v, const char *what)
{
    int rc = need(c, nbytes, what);
    if (rc) return rc;
    *v = gguf_read_le(c->p + c->pos, nbytes);
    c->pos += nbytes;
    return KV_OK;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what)
{
    uint64_t x = 0;
    int rc = rd_uint(c, 4, &x, what);
    *v = (uint32_t)x;
    return rc;
}

/* A string: its bytes start at *off and are *len long, all inside the file. */
static int rd_str(cursor *c, size_t *off, size_t *len, const char *what)
{
    uint64_t n;
    size_t at = c->pos;
    int rc = rd_uint(c, 8, &n, what);
    if (rc) return rc;
    if (n > c->size - c->pos)
        return kv_fail(c->err, KV_EINPUT, "%s: %s: string length %" PRIu64
                       " at offset %zu exceeds the file (%zu bytes left)", c->where, what, n, at,
                       c->size - c->pos);
    *off = c->pos, *len = (size_t)n;
    c->pos += (size_t)n;
    return KV_OK;
}

static char *dup_bytes(const uint8_t *p, size_t n, kv_err *err)
{
    char *s = kv_calloc(n + 1, 1, "gguf string", err);
    if (s) memcpy(s, p, n);
    return s;
}

/* ---- header and metadata -------------------------------------------- */

enum { MIN_KV_BYTES = 8 + 4 + 1, MIN_TENSOR_BYTES = 8 + 4 + 8 + 4 + 8 };

static int parse_header(cursor *c, gguf_file *g, uint64_t *n_tensors, uint64_t *n_kv)
{
    if (c->size == 0) return kv_fail(c->err, KV_EINPUT, "%s: empty file", c->where);
    if (c->size < 4 || memcmp(c->p, "GGUF", 4) != 0) {
        uint8_t m[4] = {0};
        memcpy(m, c->p, c->size < 4 ? c->size : 4);
        return kv_fail(c->err, KV_EINPUT, "%s: not a GGUF file (magic %02x %02x %02x %02x, "
                       "expected 'GGUF')", c->where, m[0], m[1], m[2], m[3]);
    }
    c->pos = 4;
    int rc = rd_u32(c, &g->version, "version");
    if (rc) return rc;
    if (g->version != 2 && g->version != 3) {
        uint32_t sw = __builtin_bswap32(g->version);
        return kv_fail(c->err, KV_EINPUT, "%s: GGUF version %" PRIu32 " is not supported "
                       "(kvtrace reads v2 and v3)%s", c->where, g->version,
                       sw == 2 || sw == 3 ? "; a big-endian file?" : "");
    }
    if ((rc = rd_uint(c, 8, n_tensors, "tensor count")) || (rc = rd_uint(c, 8, n_kv, "KV count")))
        return rc;
    size_t left = c->size - c->pos;
    if (*n_tensors > left / MIN_TENSOR_BYTES)
        return kv_fail(c->err, KV_EINPUT, "%s: tensor count %" PRIu64 " exceeds the file "
                       "(%zu bytes after the header): truncated or corrupt", c->where, *n_tensors,
                       left);
    left -= (size_t)*n_tensors * MIN_TENSOR_BYTES;
    if (*n_kv > left / MIN_KV_BYTES)
        return kv_fail(c->err, KV_EINPUT, "%s: KV count %" PRIu64 " exceeds the file "
                       "(%zu bytes after the header): truncated or corrupt", c->where, *n_kv,
                       c->size - c->pos);
    return KV_OK;
}

/* The elements of an array value (type and count already read). */
static int parse_array(cursor *c, gguf_kv *kv)
{
    const char *k = kv->key;
    if (kv->elem_type == GGUF_ARRAY || kv->elem_type >= GGUF_N_VALUE_TYPES)
        return kv_fail(c->err, KV_EINPUT, "%s: key '%.*s': arrays of %s (%" PRIu32 ") are not "
                       "supported", c->where, NAME_CAP, k, gguf_type_name(kv->elem_type),
                       kv->elem_type);
    uint64_t min = kv->elem_type == GGUF_STRING ? 8 : gguf_value_size(kv->elem_type);
    if (kv->count > (c->size - c->pos) / min)
        return kv_fail(c->err, KV_EINPUT, "%s: key '%.*s': array count %" PRIu64 " at offset "
                       "%zu exceeds the file (%zu bytes left)", c->where, NAME_CAP, k, kv->count,
                       kv->off, c->size - c->pos);
    if (kv->elem_type != GGUF_STRING) {
        c->pos += (size_t)(kv->count * min);
        return KV_OK;
    }
    kv->str_off = kv_calloc((size_t)kv->count, sizeof *kv->str_off, "gguf string array", c->err);
    if (!kv->str_off) return KV_EFAIL;
    for (uint64_t i = 0; i < kv->count; i++) {
        size_t off, len;
        kv->str_off[i] = c->pos;
        int rc = rd_str(c, &off, &len, k);
        if (rc) return rc;
    }
    return KV_OK;
}

static int parse_kv(cursor *c, gguf_kv *kv, uint64_t i)
{
    size_t off, len;
    char what[64];
    snprintf(what, sizeof what, "key of KV %" PRIu64, i);
    int rc = rd_str(c, &off, &len, what);
    if (rc) return rc;
    if (!(kv->key = dup_bytes(c->p + off, len, c->err))) return KV_EFAIL;
    kv->key_len = len;
    if ((rc = rd_u32(c, &kv->type, kv->key))) return rc;
    kv->elem_type = kv->type, kv->count = 1;
    if (kv->type >= GGUF_N_VALUE_TYPES)
        return kv_fail(c->err, KV_EINPUT, "%s: key '%.*s' has unknown value type %" PRIu32,
                       c->where, NAME_CAP, kv->key, kv->type);
    if (kv->type == GGUF_ARRAY) {
        if ((rc = rd_u32(c, &kv->elem_type, kv->key)) || (rc = rd_uint(c, 8, &kv->count, kv->key)))
            return rc;
        kv->off = c->pos;
        return parse_array(c, kv);
    }
    kv->off = c->pos;
    if (kv->type == GGUF_STRING) {
        if ((rc = rd_str(c, &off, &kv->str_len, kv->key))) return rc;
        kv->off = off;
        kv->str = dup_bytes(c->p + off, kv->str_len, c->err);
        return kv->str ? KV_OK : KV_EFAIL;
    }
    if ((rc = need(c, gguf_value_size(kv->type), kv->key))) return rc;
    c->pos += gguf_value_size(kv->type);
    return KV_OK;
}

static int cmp_name(const void *a, const void *b)
{
    const name_ref *x = a, *y = b;
    int d = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    if (d) return d;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* Sorts refs[n] by name; KV_EINPUT naming the first duplicate. */
static int sort_unique(gguf_file *g, name_ref *refs, int64_t n, const char *what, kv_err *err)
{
    if (n > 1) qsort(refs, (size_t)n, sizeof *refs, cmp_name);
    for (int64_t i = 1; i < n; i++)
        if (cmp_name(&refs[i - 1], &refs[i]) == 0)
            return kv_fail(err, KV_EINPUT, "%s: duplicate %s '%.*s'", g->where, what, NAME_CAP,
                           refs[i].s);
    return KV_OK;
}

static const name_ref *find_ref(const name_ref *refs, int64_t n, const char *name)
{
    name_ref key = {name, strlen(name), 0};
    if (n == 0) return NULL;
    return bsearch(&key, refs, (size_t)n, sizeof *refs, cmp_name);
}

static int parse_kvs(cursor *c, gguf_file *g)
{
    for (int64_t i = 0; i < g->n_kv; i++) {
        int rc = parse_kv(c, &g->kv[i], (uint64_t)i);
        if (rc) return rc;
        g->kv[i].val = c->p + g->kv[i].off;
        g->kv_index[i] = (name_ref){g->kv[i].key, g->kv[i].key_len, i};
    }
    int rc = sort_unique(g, g->kv_index, g->n_kv, "key", c->err);
    if (rc) return rc;
    uint64_t a = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *akv = gguf_find_kv(g, "general.alignment");
    bool neg = false;
    if (akv && (rc = gguf_kv_int(g, akv, 0, UINT64_MAX, "uint64", &neg, &a, c->err))) return rc;
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
        return kv_fail(c->err, KV_EINPUT, "%s: general.alignment %" PRIu64 " is not a power "
                       "of two up to 2^30", c->where, a);
    g->alignment = a;
    return KV_OK;
}

/* ---- tensor infos ----------------------------------------------------- */

static int tensor_size(cursor *c, gguf_tensor *t)
{
    const char *nm = t->name;
    const ggml_type_info *ti = ggml_type_get(t->type);
    if (!ti)
        return kv_fail(c->err, KV_EINPUT, "%s: tensor %.*s has unknown ggml type %" PRIu32,
                       c->where, NAME_CAP, nm, t->type);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] > (uint64_t)INT64_MAX || (t->ne[d] && n > (uint64_t)INT64_MAX / t->ne[d]))
            return kv_fail(c->err, KV_EINPUT, "%s: tensor %.*s: dimensions overflow (ne[%" PRIu32
                           "] = %" PRIu64 ")", c->where, NAME_CAP, nm, d, t->ne[d]);
        n *= t->ne[d];
    }
    uint32_t blck = ti->blck, bsize = ti->size;
    if (t->ne[0] % blck != 0)
        return kv_fail(c->err, KV_EINPUT, "%s: tensor %.*s: ne[0] = %" PRIu64 " is not a "
                       "multiple of the %s block size %" PRIu32, c->where, NAME_CAP, nm, t->ne[0],
                       ti->name, blck);
    if (n / blck > c->size / bsize) /* the data could never fit: also keeps nbytes exact */
        return kv_fail(c->err, KV_EINPUT, "%s: tensor %.*s: %" PRIu64 " elements of %s exceed "
                       "the file (%zu bytes)", c->where, NAME_CAP, nm, n, ti->name,
                       c->size);
    t->n_elems = n;
    t->nbytes = n / blck * bsize;
    return KV_OK;
}

static int parse_tensor_info(cursor *c, gguf_file *g, int64_t i)
{
    gguf_tensor *t = &g->tensors[i];
    size_t off, len;
    char what[64];
    snprintf(what, sizeof what, "name of tensor %" PRId64, i);
    int rc = rd_str(c, &off, &len, what);
    if (rc) return rc;
    char *name = dup_bytes(c->p + off, len, c->err);
    if (!name) return KV_EFAIL;
    t->name = name;
    g->tensor_name_len[i] = len;
    if ((rc = rd_u32(c, &t->n_dims, name))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return kv_fail(c->err, KV_EINPUT, "%s: tensor %.*s has %" PRIu32 " dimensions "
                       "(1 to %d allowed)", c->where, NAME_CAP, name, t->n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if ((rc = rd_uint(c, 8, &t->ne[d], name))) return rc;
    if ((rc = rd_u32(c, &t->type, name)) || (rc = rd_uint(c, 8, &t->offset, name))) return rc;
    return tensor_size(c, t);
}

static int cmp_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Places every tensor in the data section: aligned, inside the file, no overlap. */
static int place_tensors(cursor *c, gguf_file *g)
{
    uint64_t start = ((uint64_t)c->pos + g->alignment - 1) / g->alignment * g->alignment;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return kv_fail(c->err, KV_EINPUT, "%s: tensor %.*s: offset %" PRIu64 " is not a "
                           "multiple of the alignment %" PRIu64, c->where, NAME_CAP, t->name,
                           t->offset, g->alignment);
        if (start > c->size || t->offset > c->size - start ||
            t->nbytes > c->size - start - t->offset)
            return kv_fail(c->err, KV_EINPUT, "%s: tensor %.*s: data (%" PRIu64 " bytes at "
                           "offset %" PRIu64 " of the data section at %" PRIu64 ") runs past the "
                           "end of the file (%zu bytes)", c->where, NAME_CAP, t->name, t->nbytes,
                           t->offset, start, c->size);
        t->offset += start;
        t->data = c->p + t->offset;
    }
    if (g->n_tensors < 2) return KV_OK;
    const gguf_tensor **by_off = kv_calloc((size_t)g->n_tensors, sizeof *by_off, "gguf", c->err);
    if (!by_off) return KV_EFAIL;
    for (int64_t i = 0; i < g->n_tensors; i++) by_off[i] = &g->tensors[i];
    qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, cmp_offset);
    int rc = KV_OK;
    for (int64_t i = 1; i < g->n_tensors && !rc; i++)
        if (by_off[i - 1]->offset + by_off[i - 1]->nbytes > by_off[i]->offset)
            rc = kv_fail(c->err, KV_EINPUT, "%s: tensors %.*s and %.*s overlap", c->where,
                         NAME_CAP, by_off[i - 1]->name, NAME_CAP, by_off[i]->name);
    free(by_off);
    return rc;
}

static int parse_tensors(cursor *c, gguf_file *g)
{
    int rc;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if ((rc = parse_tensor_info(c, g, i))) return rc;
        g->tensor_index[i] = (name_ref){g->tensors[i].name, g->tensor_name_len[i], i};
    }
    if ((rc = sort_unique(g, g->tensor_index, g->n_tensors, "tensor", c->err))) return rc;
    return place_tensors(c, g);
}

/* ---- open / close ----------------------------------------------------- */

int gguf_parse_buffer(const uint8_t *data, size_t size, const char *where, gguf_file **out,
                      kv_err *err)
{
    *out = NULL;
    gguf_file *g = kv_calloc(1, sizeof *g, "gguf", err);
    if (!g) return KV_EFAIL;
    g->data = data, g->size = size;
    cursor c = {data, size, 0, where, err};
    uint64_t nt = 0, nk = 0;
    int rc = (g->where = dup_bytes((const uint8_t *)where, strlen(where), err)) ? KV_OK : KV_EFAIL;
    if (!rc) rc = parse_header(&c, g, &nt, &nk);
    if (!rc) { /* counts are bounded by the file size now */
        g->n_kv = (int64_t)nk, g->n_tensors = (int64_t)nt;
        g->kv = kv_calloc(nk, sizeof *g->kv, "gguf KVs", err);
        g->kv_index = kv_calloc(nk, sizeof *g->kv_index, "gguf KVs", err);
        g->tensors = kv_calloc(nt, sizeof *g->tensors, "gguf tensors", err);
        g->tensor_name_len = kv_calloc(nt, sizeof *g->tensor_name_len, "gguf tensors", err);
        g->tensor_index = kv_calloc(nt, sizeof *g->tensor_index, "gguf tensors", err);
        if (!g->kv || !g->kv_index || !g->tensors || !g->tensor_name_len || !g->tensor_index)
            rc = KV_EFAIL;
    }
    if (!rc) rc = parse_kvs(&c, g);
    if (!rc) rc = parse_tensors(&c, g);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return KV_OK;
}

int gguf_open(const char *path, gguf_file **out, kv_err *err)
{
    *out = NULL;
    kv_filemap fm;
    int rc = kv_filemap_open(path, &fm, err);
    if (!rc) rc = gguf_parse_buffer(fm.data, fm.size, path, out, err);
    if (rc) {
        kv_filemap_close(&fm);
        return rc;
    }
    (*out)->map = fm;
    return KV_OK;
}

void gguf_close(gguf_file *g)
{
    if (!g) return;
    for (int64_t i = 0; g->kv && i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
        free(g->kv[i].str_off);
    }
    for (int64_t i = 0; g->tensors && i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->kv_index);
    free(g->tensors);
    free(g->tensor_name_len);
    free(g->tensor_index);
    kv_filemap_close(&g->map);
    free(g->where);
    free(g);
}

const char *gguf_where(const gguf_file *g) { return g->where; }
uint32_t gguf_version(const gguf_file *g) { return g->version; }
int64_t gguf_kv_count(const gguf_file *g) { return g->n_kv; }
int64_t gguf_tensor_count(const gguf_file *g) { return g->n_tensors; }
const char *gguf_kv_key(const gguf_kv *kv) { return kv->key; }
uint32_t gguf_kv_type(const gguf_kv *kv) { return kv->type; }
uint32_t gguf_kv_elem_type(const gguf_kv *kv) { return kv->elem_type; }
uint64_t gguf_kv_count_elems(const gguf_kv *kv) { return kv->count; }
const uint8_t *gguf_kv_data(const gguf_kv *kv) { return kv->val; }

const char *gguf_kv_str(const gguf_kv *kv, size_t *len)
{
    KV_ASSERT(kv->type == GGUF_STRING);
    *len = kv->str_len;
    return kv->str;
}

const gguf_kv *gguf_kv_at(const gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key)
{
    const name_ref *r = find_ref(g->kv_index, g->n_kv, key);
    return r ? &g->kv[r->idx] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name)
{
    const name_ref *r = find_ref(g->tensor_index, g->n_tensors, name);
    return r ? &g->tensors[r->idx] : NULL;
}

int gguf_kv_type_error(const gguf_file *g, const gguf_kv *kv, const char *expected, kv_err *err)
{
    bool arr = kv->type == GGUF_ARRAY;
    return kv_fail(err, KV_EINPUT, "%s: key '%.*s' is %s%s, expected %s", g->where, NAME_CAP,
                   kv->key, arr ? "an array of " : "", gguf_type_name(arr ? kv->elem_type : kv->type),
                   expected);
}

int gguf_kv_int(const gguf_file *g, const gguf_kv *kv, int64_t lo, uint64_t hi, const char *range,
                bool *neg, uint64_t *mag, kv_err *err)
{
    if (kv->type == GGUF_ARRAY || !gguf_value_int(kv->val, kv->type, neg, mag))
        return gguf_kv_type_error(g, kv, "an integer", err);
    bool ok = *neg ? (*mag == 0 || (lo < 0 && *mag - 1 <= (uint64_t)(-(lo + 1)))) : *mag <= hi;
    if (!ok)
        return kv_fail(err, KV_EINPUT, "%s: key '%s' = %s%" PRIu64 " is out of range for %s",
                       g->where, kv->key, *neg ? "-" : "", *mag, range);
    return KV_OK;
}

const char *gguf_array_str(const gguf_file *g, const gguf_kv *kv, uint64_t i, size_t *len)
{
    KV_ASSERT(kv->type == GGUF_ARRAY && kv->elem_type == GGUF_STRING && i < kv->count);
    *len = (size_t)gguf_read_le(g->data + kv->str_off[i], 8);
    return (const char *)g->data + kv->str_off[i] + 8;
}

/* ---- tensor data ------------------------------------------------------ */

int gguf_tensor_readable(const gguf_file *g, const gguf_tensor *t, kv_err *err)
{
    const ggml_type_info *ti = ggml_type_get(t->type); /* checked when parsing */
    if (ti->to_f32) return KV_OK;
    char types[128];
    return kv_fail(err, KV_EINPUT, "%s: tensor %.*s has type %s (%" PRIu32 "), kvtrace reads %s",
                   g->where, NAME_CAP, t->name, ti->name, t->type,
                   ggml_readable_types(types, sizeof types));
}

int gguf_tensor_read_f32(const gguf_file *g, const gguf_tensor *t, float *dst, uint64_t n,
                         kv_err *err)
{
    if (n != t->n_elems)
        return kv_fail(err, KV_EFAIL, "%s: tensor %.*s: asked for %" PRIu64 " values, it has %"
                       PRIu64, g->where, NAME_CAP, t->name, n, t->n_elems);
    int rc = gguf_tensor_readable(g, t, err);
    if (rc) return rc;
    ggml_type_get(t->type)->to_f32(t->data, dst, n);
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return kv_fail(err, KV_EINPUT, "%s: tensor %.*s: element %" PRIu64 " is %s",
                           g->where, NAME_CAP, t->name, i, isnan(dst[i]) ? "NaN" : "infinite");
    return KV_OK;
}
