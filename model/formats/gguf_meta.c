/* gguf_meta: typed access to GGUF metadata (gguf.h), built on the parsed
 * entries: every value's bytes were checked to lie inside the file when it was
 * parsed, so these functions only decode, convert and range-check. */
#include "model/formats/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define NAME_CAP 200 /* longest key quoted in a message */

/* *kv = the entry (NULL: absent and not required). */
static int find_req(const gguf_file *g, const char *key, bool required, const gguf_kv **kv,
                    kv_err *err)
{
    *kv = gguf_find_kv(g, key);
    if (!*kv && required)
        return kv_fail(err, KV_EINPUT, "%s: missing key '%s'", gguf_where(g), key);
    return KV_OK;
}

/* An integer key in [lo, hi] (lo is 0 or negative) as *neg and *mag (absent: unchanged). */
static int get_int(const gguf_file *g, const char *key, bool required, int64_t lo, uint64_t hi,
                   const char *range, bool *neg, uint64_t *mag, kv_err *err)
{
    const gguf_kv *kv;
    int rc = find_req(g, key, required, &kv, err);
    if (rc || !kv) return rc;
    return gguf_kv_int(g, kv, lo, hi, range, neg, mag, err);
}

int gguf_get_u32(const gguf_file *g, const char *key, bool required, uint32_t *out, kv_err *err)
{
    bool neg = false;
    uint64_t mag = *out;
    int rc = get_int(g, key, required, 0, UINT32_MAX, "uint32", &neg, &mag, err);
    if (!rc) *out = (uint32_t)mag;
    return rc;
}

int gguf_get_u64(const gguf_file *g, const char *key, bool required, uint64_t *out, kv_err *err)
{
    bool neg = false;
    uint64_t mag = *out;
    int rc = get_int(g, key, required, 0, UINT64_MAX, "uint64", &neg, &mag, err);
    if (!rc) *out = mag;
    return rc;
}

int gguf_get_i32(const gguf_file *g, const char *key, bool required, int32_t *out, kv_err *err)
{
    bool neg = *out < 0;
    uint64_t mag = neg ? (uint64_t)(-(int64_t)*out) : (uint64_t)*out;
    int rc = get_int(g, key, required, INT32_MIN, INT32_MAX, "int32", &neg, &mag, err);
    if (!rc) *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return rc;
}

int gguf_get_f32(const gguf_file *g, const char *key, bool required, float *out, kv_err *err)
{
    const gguf_kv *kv;
    int rc = find_req(g, key, required, &kv, err);
    if (rc || !kv) return rc;
    if (gguf_kv_type(kv) != GGUF_FLOAT32 && gguf_kv_type(kv) != GGUF_FLOAT64)
        return gguf_kv_type_error(g, kv, "float32", err);
    if (!gguf_value_float(gguf_kv_data(kv), gguf_kv_type(kv), out))
        return kv_fail(err, KV_EINPUT, "%s: key '%s' is not a finite float32", gguf_where(g), key);
    return KV_OK;
}

int gguf_get_bool(const gguf_file *g, const char *key, bool required, bool *out, kv_err *err)
{
    const gguf_kv *kv;
    int rc = find_req(g, key, required, &kv, err);
    if (rc || !kv) return rc;
    if (gguf_kv_type(kv) != GGUF_BOOL) return gguf_kv_type_error(g, kv, "bool", err);
    uint8_t b = gguf_kv_data(kv)[0];
    if (b > 1)
        return kv_fail(err, KV_EINPUT, "%s: key '%s' holds %u, not a bool (0 or 1)", gguf_where(g),
                       key, b);
    *out = b;
    return KV_OK;
}

int gguf_get_str(const gguf_file *g, const char *key, bool required, const char **out,
                 kv_err *err)
{
    const gguf_kv *kv;
    int rc = find_req(g, key, required, &kv, err);
    if (rc || !kv) return rc;
    if (gguf_kv_type(kv) != GGUF_STRING) return gguf_kv_type_error(g, kv, "string", err);
    size_t len;
    const char *s = gguf_kv_str(kv, &len);
    if (memchr(s, '\0', len))
        return kv_fail(err, KV_EINPUT, "%s: key '%s': the string holds a NUL byte", gguf_where(g),
                       key);
    *out = s;
    return KV_OK;
}

int gguf_get_array(const gguf_file *g, const char *key, bool required, uint32_t elem_type,
                   const gguf_kv **kv, uint64_t *n, kv_err *err)
{
    int rc = find_req(g, key, required, kv, err);
    if (rc || !*kv) return rc;
    if (gguf_kv_type(*kv) != GGUF_ARRAY ||
        (elem_type < GGUF_N_VALUE_TYPES && gguf_kv_elem_type(*kv) != elem_type)) {
        char want[40];
        snprintf(want, sizeof want, "an array of %s",
                 elem_type < GGUF_N_VALUE_TYPES ? gguf_type_name(elem_type) : "any type");
        rc = gguf_kv_type_error(g, *kv, want, err);
        *kv = NULL;
        return rc;
    }
    *n = gguf_kv_count_elems(*kv);
    return KV_OK;
}

static int check_array(const gguf_file *g, const gguf_kv *kv, uint64_t n, kv_err *err)
{
    uint64_t have = gguf_kv_count_elems(kv);
    if (gguf_kv_type(kv) != GGUF_ARRAY || n != have)
        return kv_fail(err, KV_EFAIL, "%s: key '%.*s': asked for %" PRIu64 " elements of an "
                       "array of %" PRIu64, gguf_where(g), NAME_CAP, gguf_kv_key(kv), n, have);
    return KV_OK;
}

int gguf_array_f32(const gguf_file *g, const gguf_kv *kv, float *dst, uint64_t n, kv_err *err)
{
    int rc = check_array(g, kv, n, err);
    if (rc) return rc;
    uint32_t t = gguf_kv_elem_type(kv), sz = gguf_value_size(t);
    if (t == GGUF_BOOL || sz == 0) return gguf_kv_type_error(g, kv, "an array of numbers", err);
    for (uint64_t i = 0; i < n; i++)
        if (!gguf_value_float(gguf_kv_data(kv) + i * sz, t, &dst[i]))
            return kv_fail(err, KV_EINPUT, "%s: key '%.*s': element %" PRIu64 " is not a "
                           "finite float32", gguf_where(g), NAME_CAP, gguf_kv_key(kv), i);
    return KV_OK;
}

int gguf_array_i32(const gguf_file *g, const gguf_kv *kv, int32_t *dst, uint64_t n, kv_err *err)
{
    int rc = check_array(g, kv, n, err);
    if (rc) return rc;
    uint32_t t = gguf_kv_elem_type(kv), sz = gguf_value_size(t);
    bool neg;
    uint64_t mag;
    for (uint64_t i = 0; i < n; i++) {
        if (!gguf_value_int(gguf_kv_data(kv) + i * sz, t, &neg, &mag))
            return gguf_kv_type_error(g, kv, "an array of integers", err);
        if (neg ? mag > (uint64_t)INT32_MAX + 1 : mag > INT32_MAX)
            return kv_fail(err, KV_EINPUT, "%s: key '%.*s': element %" PRIu64 " = %s%" PRIu64
                           " is out of range for int32", gguf_where(g), NAME_CAP,
                           gguf_kv_key(kv), i, neg ? "-" : "", mag);
        dst[i] = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    }
    return KV_OK;
}

