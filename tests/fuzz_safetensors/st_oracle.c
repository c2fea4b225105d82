/* st_oracle: whether a file is valid by the format safetensors.h documents,
 * decided apart from the reader: an 8-byte little-endian header length N <=
 * the rest of the file and <= 100 MB; N bytes of a JSON object (no duplicate
 * names); "__metadata__", if there, an object of strings; every other entry
 * an object of exactly "dtype" (a name of the format), "shape" (at most 8
 * non-negative integers) and "data_offsets" ([begin, end] non-negative
 * integers, begin <= end <= the data section's size, end - begin = the
 * elements (the exact product: 0 if any dimension is 0) x the dtype's
 * size); no two tensors with data share a byte. Holes and trailing bytes in
 * the data section are allowed. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz_safetensors/st_fuzz.h"

const stz_dtype STZ_DTYPES[] = {
    {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
    {"U8", 1}, {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};
const int STZ_N_DTYPES = (int)(sizeof STZ_DTYPES / sizeof STZ_DTYPES[0]);

uint32_t stz_dtype_size(const char *name)
{
    for (int d = 0; d < STZ_N_DTYPES; d++)
        if (strcmp(name, STZ_DTYPES[d].name) == 0) return STZ_DTYPES[d].size;
    return 0;
}

typedef struct {
    uint64_t begin, end;
} span;

/* Bytes the shape needs at this element size; false when it cannot fit in room. */
static bool shape_bytes(json_t *shape, uint64_t esize, uint64_t room, uint64_t *out)
{
    if (!json_is_array(shape) || json_array_size(shape) > 8) return false;
    bool zero = false;
    size_t i;
    json_t *d;
    json_array_foreach(shape, i, d) {
        if (!json_is_integer(d) || json_integer_value(d) < 0) return false;
        zero |= json_integer_value(d) == 0;
    }
    if (zero) return *out = 0, true;
    unsigned __int128 n = esize;
    json_array_foreach(shape, i, d) {
        n *= (uint64_t)json_integer_value(d);
        if (n > room) return false;
    }
    *out = (uint64_t)n;
    return true;
}

static bool entry_valid(json_t *v, uint64_t room, span *s)
{
    if (!json_is_object(v)) return false;
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x)
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets")) return false;
    json_t *dt = json_object_get(v, "dtype"), *off = json_object_get(v, "data_offsets");
    uint32_t esize = json_is_string(dt) ? stz_dtype_size(json_string_value(dt)) : 0;
    uint64_t nbytes;
    if (!esize || !shape_bytes(json_object_get(v, "shape"), esize, room, &nbytes)) return false;
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(b) ||
        !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < 0)
        return false;
    s->begin = (uint64_t)json_integer_value(b), s->end = (uint64_t)json_integer_value(e);
    return s->begin <= s->end && s->end <= room && s->end - s->begin == nbytes;
}

static bool metadata_valid(json_t *meta)
{
    const char *key;
    json_t *x;
    if (!json_is_object(meta)) return false;
    json_object_foreach(meta, key, x) if (!json_is_string(x)) return false;
    return true;
}

static bool entries_valid(json_t *root, uint64_t room)
{
    if (!json_is_object(root)) return false;
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta && !metadata_valid(meta)) return false;
    span *s = malloc((json_object_size(root) + 1) * sizeof *s);
    size_t n = 0;
    bool ok = s != NULL;
    const char *name;
    json_t *v;
    json_object_foreach(root, name, v) {
        if (!ok) break;
        if (v == meta) continue;
        ok = entry_valid(v, room, &s[n]);
        if (ok && s[n].end > s[n].begin) n++;
    }
    for (size_t i = 0; ok && i < n; i++) /* pairwise: headers here are small */
        for (size_t j = i + 1; ok && j < n; j++)
            ok = s[i].end <= s[j].begin || s[j].end <= s[i].begin;
    free(s);
    return ok;
}

bool stz_valid(const uint8_t *data, size_t size)
{
    if (size < 8) return false;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)data[i] << (8 * i);
    if (n > size - 8 || n > ((uint64_t)100 << 20)) return false;
    json_t *root = json_loadb((const char *)data + 8, (size_t)n, JSON_REJECT_DUPLICATES, NULL);
    bool ok = root && entries_valid(root, size - 8 - n);
    json_decref(root);
    return ok;
}
