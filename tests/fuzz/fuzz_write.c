/* fuzz_write.c: the model written as an HDF5 file.
 *
 * The file lives in memory only: the core driver (H5Pset_fapl_core, 64 KiB
 * increments, no backing store) under a unique name fuzz-mem-N, optionally
 * flushed, copied out as a file image and re-opened read-only from it. Every
 * HDF5 call here must succeed (H5OK): a failure is a harness bug, not a
 * finding. Every id made here is closed before fz_write_model returns,
 * except the file itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_model.h"

/* ---- element types in HDF5 --------------------------------------------- */

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

/* ---- attributes -------------------------------------------------------- */

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
        size_t es = fz_esize(a->et);
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

/* ---- datasets and groups ----------------------------------------------- */

static void make_group(hid_t file, const char *path)
{
    hid_t g = H5Gcreate2(file, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5OK(g);
    H5OK(H5Gclose(g));
}

static void write_dset(hid_t file, const char *path, const dmodel *d)
{
    if (d->obj == OBJ_GROUP) {
        make_group(file, path);
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
    bool compact = d->compact && !d->chunked && d->nelem * fz_esize(d->et) < 32000;
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

/* /attention or /evict: a group when something lives below it, or (as = 1)
 * a small dataset in its place. */
static void container(hid_t file, const char *name, int as, bool needed)
{
    if (as == 1) {
        dmodel d = {.obj = OBJ_DSET, .rank = 1, .dims = {2}, .et = ET_F32};
        float v[2] = {1, 2};
        d.raw = (uint8_t *)v, d.nelem = 2;
        write_dset(file, name, &d);
    } else if (needed) {
        make_group(file, name);
    }
}

/* ---- the file ---------------------------------------------------------- */

/* Flushes `file`, closes it and opens its image read-only under the same name. */
static hid_t reopen_from_image(hid_t file, hid_t fapl, const char *name)
{
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
    return file;
}

static int g_file_no;

hid_t fz_write_model(const model *m, char *name, size_t cap)
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
        if (m->a[i].present) write_attr(root, FZ_ATTR_NAME[i], &m->a[i]);
    if (m->extra) {
        amodel x = {.present = true, .et = ET_F64, .n = 1};
        write_attr(root, "x_unknown", &x);
    }
    H5OK(H5Gclose(root));
    container(file, "/attention", m->attention_as,
              m->d[TRACE_COLSUM].obj != OBJ_ABSENT || m->d[TRACE_ATTN_FULL].obj != OBJ_ABSENT ||
                  m->d[TRACE_KVZIP].obj != OBJ_ABSENT || m->d[TRACE_ATTN_OUT].obj != OBJ_ABSENT ||
                  m->d[TRACE_ATTN_LSE].obj != OBJ_ABSENT || m->d[TRACE_ATTN_MAX].obj != OBJ_ABSENT);
    container(file, "/evict", m->evict_as,
              m->d[TRACE_EVICT_RETAINED].obj != OBJ_ABSENT || m->d[TRACE_EVICT_STEP_END].obj != OBJ_ABSENT);
    for (int i = 0; i < NDS; i++)
        if (m->d[i].obj != OBJ_ABSENT && fz_visible(m, i)) write_dset(file, FZ_DS_PATH[i], &m->d[i]);
    if (m->extra) make_group(file, "/x_group");
    H5OK(H5Pclose(fcpl));
    if (m->reopen) file = reopen_from_image(file, fapl, name);
    H5OK(H5Pclose(fapl));
    return file;
}
