#include "h5util.h"

#include <errno.h>

#include <stdlib.h>
#include <string.h>

void h5u_quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

hid_t h5u_half_type(void)
{
    /* sign bit 15, exponent bits 10..14 (bias 15), mantissa bits 0..9 */
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0) return t;
    if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 ||
        H5Tset_ebias(t, 15) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

h5u_kind h5u_classify(hid_t type)
{
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        return H5Tget_size(type) <= 8 ? H5U_INT : H5U_OTHER;
    case H5T_STRING:
        return H5U_STRING;
    case H5T_FLOAT: {
        size_t spos, epos, esize, mpos, msize;
        if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return H5U_OTHER;
        size_t size = H5Tget_size(type), bias = H5Tget_ebias(type);
        if (size == 2 && spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 &&
            bias == 15)
            return H5U_F16;
        if (size == 4 && spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23 &&
            bias == 127)
            return H5U_F32;
        if (size == 8 && spos == 63 && epos == 52 && esize == 11 && mpos == 0 && msize == 52 &&
            bias == 1023)
            return H5U_F64;
        return H5U_OTHER;
    }
    default:
        return H5U_OTHER;
    }
}

const char *h5u_kind_name(h5u_kind k)
{
    switch (k) {
    case H5U_INT: return "integer";
    case H5U_F16: return "float16";
    case H5U_F32: return "float32";
    case H5U_F64: return "float64";
    case H5U_STRING: return "string";
    default: return "unsupported type";
    }
}

static hid_t attr_space(int n)
{
    if (n == 1) return H5Screate(H5S_SCALAR);
    hsize_t dim = (hsize_t)n;
    return H5Screate_simple(1, &dim, NULL);
}

static int write_attr(hid_t obj, const char *name, hid_t file_type, hid_t mem_type,
                      const void *buf, int n, kv_err *err)
{
    hid_t space = attr_space(n);
    hid_t attr = space < 0 ? -1 : H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t st = attr < 0 ? -1 : H5Awrite(attr, mem_type, buf);
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    if (st < 0) return kv_fail(err, KV_EFAIL, "cannot write attribute '%s'", name);
    return KV_OK;
}

int h5u_write_attr_str(hid_t obj, const char *name, const char *value, kv_err *err)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        if (t >= 0) H5Tclose(t);
        return kv_fail(err, KV_EFAIL, "cannot make a string type for attribute '%s'", name);
    }
    int rc = write_attr(obj, name, t, t, &value, 1, err);
    H5Tclose(t);
    return rc;
}

int h5u_write_attr_i64(hid_t obj, const char *name, const int64_t *values, int n, kv_err *err)
{
    return write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, values, n, err);
}

int h5u_write_attr_f64(hid_t obj, const char *name, double value, kv_err *err)
{
    return h5u_write_attr_f64s(obj, name, &value, 1, err);
}

int h5u_write_attr_f64s(hid_t obj, const char *name, const double *values, int n, kv_err *err)
{
    return write_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values, n, err);
}

/* Opens attribute `name` and checks its element count. Returns the attribute
 * id, 0 if absent and `present` allows that, or -1 with err set. */
static hid_t open_attr(hid_t obj, const char *where, const char *name, int n, bool *present,
                       kv_err *err)
{
    if (present) *present = false;
    htri_t ex = H5Aexists(obj, name);
    if (ex <= 0) {
        if (ex == 0 && present) return 0;
        kv_fail(err, KV_EINPUT, "%s: missing required attribute '%s'", where, name);
        return -1;
    }
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (attr < 0) {
        kv_fail(err, KV_EINPUT, "%s: cannot open attribute '%s'", where, name);
        return -1;
    }
    hid_t space = H5Aget_space(attr);
    hssize_t count = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
    if (space >= 0) H5Sclose(space);
    if (count != n) {
        H5Aclose(attr);
        kv_fail(err, KV_EINPUT, "%s: attribute '%s' has %lld element(s), expected %d", where,
                name, (long long)count, n);
        return -1;
    }
    if (present) *present = true;
    return attr;
}

static int read_attr_num(hid_t obj, const char *where, const char *name, hid_t mem_type,
                         bool allow_float, void *buf, int n, bool *present, kv_err *err)
{
    hid_t attr = open_attr(obj, where, name, n, present, err);
    if (attr <= 0) return attr == 0 ? KV_OK : err->code;
    hid_t ftype = H5Aget_type(attr);
    h5u_kind k = ftype < 0 ? H5U_OTHER : h5u_classify(ftype);
    bool ok = k == H5U_INT || (allow_float && (k == H5U_F16 || k == H5U_F32 || k == H5U_F64));
    int rc = KV_OK;
    if (!ok)
        rc = kv_fail(err, KV_EINPUT, "%s: attribute '%s' is %s, expected %s", where, name,
                     h5u_kind_name(k), allow_float ? "a number" : "an integer");
    else if (H5Aread(attr, mem_type, buf) < 0)
        rc = kv_fail(err, KV_EINPUT, "%s: cannot read attribute '%s'", where, name);
    if (ftype >= 0) H5Tclose(ftype);
    H5Aclose(attr);
    return rc;
}

int h5u_read_attr_i64(hid_t obj, const char *where, const char *name, int64_t *values, int n,
                      bool *present, kv_err *err)
{
    return read_attr_num(obj, where, name, H5T_NATIVE_INT64, false, values, n, present, err);
}

int h5u_read_attr_f64(hid_t obj, const char *where, const char *name, double *value,
                      bool *present, kv_err *err)
{
    return read_attr_num(obj, where, name, H5T_NATIVE_DOUBLE, true, value, 1, present, err);
}

int h5u_read_attr_f64s(hid_t obj, const char *where, const char *name, double *values, int n,
                       bool *present, kv_err *err)
{
    return read_attr_num(obj, where, name, H5T_NATIVE_DOUBLE, true, values, n, present, err);
}

int h5u_read_attr_str(hid_t obj, const char *where, const char *name, char *buf, size_t cap,
                      bool *present, kv_err *err)
{
    hid_t attr = open_attr(obj, where, name, 1, present, err);
    if (attr <= 0) return attr == 0 ? KV_OK : err->code;
    int rc = KV_OK;
    hid_t ftype = H5Aget_type(attr);
    hid_t mtype = -1;
    if (ftype < 0 || H5Tget_class(ftype) != H5T_STRING) {
        rc = kv_fail(err, KV_EINPUT, "%s: attribute '%s' is not a string", where, name);
        goto done;
    }
    htri_t vl = H5Tis_variable_str(ftype);
    mtype = H5Tcopy(H5T_C_S1);
    if (vl > 0) {
        char *s = NULL;
        if (H5Tset_size(mtype, H5T_VARIABLE) < 0 || H5Tset_cset(mtype, H5Tget_cset(ftype)) < 0 ||
            H5Aread(attr, mtype, &s) < 0) {
            rc = kv_fail(err, KV_EINPUT, "%s: cannot read string attribute '%s'", where, name);
            goto done;
        }
        size_t len = s ? strlen(s) : 0;
        if (len >= cap)
            rc = kv_fail(err, KV_EINPUT, "%s: attribute '%s' is too long (%zu bytes, at most %zu)",
                         where, name, len, cap - 1);
        else
            memcpy(buf, s ? s : "", len + 1);
        if (s) H5free_memory(s);
    } else {
        size_t size = H5Tget_size(ftype);
        char *tmp = size ? malloc(size + 1) : NULL;
        if (!tmp || H5Tset_size(mtype, size + 1) < 0 || H5Tset_cset(mtype, H5Tget_cset(ftype)) < 0 ||
            H5Aread(attr, mtype, tmp) < 0) {
            free(tmp);
            rc = kv_fail(err, KV_EINPUT, "%s: cannot read string attribute '%s'", where, name);
            goto done;
        }
        tmp[size] = '\0';
        size_t len = strlen(tmp);
        if (len >= cap)
            rc = kv_fail(err, KV_EINPUT, "%s: attribute '%s' is too long (%zu bytes, at most %zu)",
                         where, name, len, cap - 1);
        else
            memcpy(buf, tmp, len + 1);
        free(tmp);
    }
done:
    if (mtype >= 0) H5Tclose(mtype);
    if (ftype >= 0) H5Tclose(ftype);
    H5Aclose(attr);
    return rc;
}

bool h5u_slab_io(hid_t dset, int rank, const hsize_t *start, const hsize_t *count, hid_t mtype,
                 void *buf, bool write)
{
    hid_t fspace = H5Dget_space(dset);
    hid_t mspace = H5Screate_simple(rank, count, NULL);
    errno = 0; /* HDF5's own buffers come from malloc: ENOMEM when one was refused */
    bool ok = fspace >= 0 && mspace >= 0 &&
              H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
              (write ? H5Dwrite(dset, mtype, mspace, fspace, H5P_DEFAULT, buf)
                     : H5Dread(dset, mtype, mspace, fspace, H5P_DEFAULT, buf)) >= 0;
    const int why = errno;
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    errno = ok ? 0 : why;
    return ok;
}

bool h5u_exists(hid_t loc, const char *path)
{
    /* H5Lexists needs every intermediate link to exist: walk the path. */
    char buf[256];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        htri_t ex = H5Lexists(loc, buf, H5P_DEFAULT);
        buf[i] = saved;
        if (ex <= 0) return false;
    }
    return true;
}
