/* h5util: the HDF5 calls every trace and results file needs, each checked
 * and translated into one kv_err line. HDF5's own error printing is off. */
#ifndef KV_H5UTIL_H
#define KV_H5UTIL_H

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv_error.h"

/* Switches HDF5's automatic error printing off (idempotent). */
void h5u_quiet(void);

/* IEEE binary16, little endian (what h5py writes for numpy float16). Owned
 * by the caller: H5Tclose it. */
hid_t h5u_half_type(void);

/* Element classification of a dataset/attribute type. */
typedef enum { H5U_OTHER, H5U_INT, H5U_F16, H5U_F32, H5U_F64, H5U_STRING } h5u_kind;
h5u_kind h5u_classify(hid_t type);
const char *h5u_kind_name(h5u_kind k);

/* Attribute writers (scalar or 1-D). Variable-length UTF-8 strings. */
int h5u_write_attr_str(hid_t obj, const char *name, const char *value, kv_err *err);
int h5u_write_attr_i64(hid_t obj, const char *name, const int64_t *values, int n, kv_err *err);
int h5u_write_attr_f64(hid_t obj, const char *name, double value, kv_err *err);
int h5u_write_attr_f64s(hid_t obj, const char *name, const double *values, int n, kv_err *err);

/* Attribute readers: any integer type (or any float type for f64) converts;
 * `n` elements exactly, else a KV_EINPUT error naming `where` and the attr.
 * Return KV_OK, or the error code. `present` (may be NULL) makes a missing
 * attribute not an error: *present = false. */
int h5u_read_attr_i64(hid_t obj, const char *where, const char *name, int64_t *values,
                      int n, bool *present, kv_err *err);
int h5u_read_attr_f64(hid_t obj, const char *where, const char *name, double *value,
                      bool *present, kv_err *err);
int h5u_read_attr_f64s(hid_t obj, const char *where, const char *name, double *values, int n,
                       bool *present, kv_err *err);
/* Variable- or fixed-length string; longer than cap-1 bytes is an error. */
int h5u_read_attr_str(hid_t obj, const char *where, const char *name, char *buf, size_t cap,
                      bool *present, kv_err *err);

/* Reads (write = false) or writes the hyperslab [start, start + count) of a
 * dataset of rank `rank` from/to a contiguous buffer in memory type `mtype`.
 * Returns false on any HDF5 failure, errno then ENOMEM when memory ran out. */
bool h5u_slab_io(hid_t dset, int rank, const hsize_t *start, const hsize_t *count, hid_t mtype,
                 void *buf, bool write);

/* True if a link of that path exists (every intermediate group too). */
bool h5u_exists(hid_t loc, const char *path);

#endif
