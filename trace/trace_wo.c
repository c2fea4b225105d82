/* /wo: the model's attention output projection W_o, one [dim, H·D] matrix per
 * layer (out = W_o · the heads' outputs one after the other), float32
 * [L, dim, H·D]. Optional (capture --record wo); criticalkv reads it. Kept
 * apart from the schema table (like /prompt_text): it has no T axis. Checked
 * on open (a float dataset of that shape), its values when a layer is read
 * (finite), so a policy that never asks reads none of it. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "core/h5util.h"
#include "trace_schema.h"

const char TRACE_WO_DESCRIPTION[] =
    "the attention output projection W_o of each layer, as the model applies it (out = W_o . concat of the "
    "query heads' outputs, head h in columns h*D .. h*D+D-1); [L, dim, H*D], float32";

int trace_wo_write(int64_t file_id, const trace_meta *m, const char *where, kv_err *err)
{
    const int64_t L = m->n_layers, dim = m->wo_dim, HD = m->n_heads * m->head_dim;
    if (dim < 1 || dim > TRACE_MAX_WO_DIM)
        return kv_fail(err, KV_EUSAGE, "%s: /wo: model dimension %lld is out of range", where, (long long)dim);
    hsize_t dims[3] = {(hsize_t)L, (hsize_t)dim, (hsize_t)HD};
    hid_t space = H5Screate_simple(3, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    bool ok = space >= 0 && dcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0;
    if (ok) d = H5Dcreate2((hid_t)file_id, TRACE_WO_PATH, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ok = ok && d >= 0;
    for (int64_t l = 0; ok && l < L; l++) {
        const hsize_t start[3] = {(hsize_t)l, 0, 0}, count[3] = {1, (hsize_t)dim, (hsize_t)HD};
        ok = h5u_slab_io(d, 3, start, count, H5T_NATIVE_FLOAT, (void *)m->wo[l], true);
    }
    int rc = ok ? KV_OK : kv_fail(err, KV_EFAIL, "%s: cannot write %s", where, TRACE_WO_PATH);
    if (!rc) rc = h5u_write_attr_str(d, "description", TRACE_WO_DESCRIPTION, err);
    if (d >= 0) H5Dclose(d);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return rc;
}

int trace_wo_check(int64_t file_id, const trace_meta *m, const char *where, int64_t *dim, kv_err *err)
{
    *dim = 0;
    const hid_t file = (hid_t)file_id;
    if (!h5u_exists(file, TRACE_WO_PATH)) return KV_OK;
    H5O_info_t info;
    if (H5Oget_info_by_name(file, TRACE_WO_PATH, &info, H5P_DEFAULT) < 0 || info.type != H5O_TYPE_DATASET)
        return kv_fail(err, KV_EINPUT, "%s: %s is not a dataset", where, TRACE_WO_PATH);
    hid_t d = H5Dopen2(file, TRACE_WO_PATH, H5P_DEFAULT);
    hid_t type = d >= 0 ? H5Dget_type(d) : -1, space = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t dims[3] = {0, 0, 0};
    const int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    const h5u_kind kind = type >= 0 ? h5u_classify(type) : H5U_OTHER;
    int rc = KV_OK;
    if (d < 0 || type < 0 || space < 0) rc = kv_fail(err, KV_EINPUT, "%s: cannot read %s", where, TRACE_WO_PATH);
    else if (kind != H5U_F32 && kind != H5U_F64 && kind != H5U_F16)
        rc = kv_fail(err, KV_EINPUT, "%s: %s has type %s, expected a float", where, TRACE_WO_PATH, h5u_kind_name(kind));
    else if (rank != 3 || H5Sget_simple_extent_dims(space, dims, NULL) != 3 || (int64_t)dims[0] != m->n_layers ||
             (int64_t)dims[2] != m->n_heads * m->head_dim || dims[1] < 1 || dims[1] > TRACE_MAX_WO_DIM)
        rc = kv_fail(err, KV_EINPUT, "%s: %s must be [L=%lld, dim, H*D=%lld] (dim 1 .. %lld), got rank %d [%llu, %llu, "
                     "%llu]", where, TRACE_WO_PATH, (long long)m->n_layers, (long long)(m->n_heads * m->head_dim),
                     (long long)TRACE_MAX_WO_DIM, rank, (unsigned long long)dims[0], (unsigned long long)dims[1],
                     (unsigned long long)dims[2]);
    if (!rc) *dim = (int64_t)dims[1];
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (d >= 0) H5Dclose(d);
    return rc;
}

int trace_wo_read(int64_t file_id, const trace_meta *m, int64_t layer, float *out, const char *where, kv_err *err)
{
    const int64_t dim = m->wo_dim, HD = m->n_heads * m->head_dim;
    hid_t d = H5Dopen2((hid_t)file_id, TRACE_WO_PATH, H5P_DEFAULT);
    const hsize_t start[3] = {(hsize_t)layer, 0, 0}, count[3] = {1, (hsize_t)dim, (hsize_t)HD};
    const bool ok = d >= 0 && h5u_slab_io(d, 3, start, count, H5T_NATIVE_FLOAT, out, false);
    const bool oom = !ok && errno == ENOMEM;
    if (d >= 0) H5Dclose(d);
    if (oom) return kv_fail(err, KV_EFAIL, "%s: %s layer %lld: out of memory", where, TRACE_WO_PATH, (long long)layer);
    if (!ok) return kv_fail(err, KV_EINPUT, "%s: cannot read %s layer %lld", where, TRACE_WO_PATH, (long long)layer);
    for (int64_t i = 0; i < dim * HD; i++)
        if (!isfinite(out[i]))
            return kv_fail(err, KV_EINPUT, "%s: %s[%lld, %lld, %lld] is not finite", where, TRACE_WO_PATH,
                           (long long)layer, (long long)(i / HD), (long long)(i % HD));
    return KV_OK;
}
