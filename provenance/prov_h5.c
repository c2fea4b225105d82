/* /provenance in an HDF5 file: the JSON record as the attribute `json`, and
 * its fields as flat attributes h5py reads without custom code (strings,
 * 1-D string arrays, integers, a float). No object times, so the same record
 * writes the same bytes. Readers of the data never look at this group. */
#include "core/fileopen.h"
#include "provenance/provenance.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5util.h"

/* An attribute of type ftype: 1-D of n elements, or a scalar when n < 0. */
static int write_attr(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *buf, int n, kv_err *err)
{
    hsize_t dim = (hsize_t)(n < 0 ? 1 : n);
    hid_t space = n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
    hid_t a = space < 0 ? -1 : H5Acreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, mtype, buf) >= 0;
    if (a >= 0) H5Aclose(a);
    if (space >= 0) H5Sclose(space);
    return ok ? KV_OK : kv_fail(err, KV_EFAIL, "cannot write attribute /" PROV_GROUP "/%s", name);
}

/* A 1-D attribute of n variable-length UTF-8 strings (1-D even for one). */
static int write_strs(hid_t loc, const char *name, const char **v, int n, kv_err *err)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type < 0 || H5Tset_size(type, H5T_VARIABLE) < 0 || H5Tset_cset(type, H5T_CSET_UTF8) < 0) {
        if (type >= 0) H5Tclose(type);
        return kv_fail(err, KV_EFAIL, "cannot make a string type for /" PROV_GROUP "/%s", name);
    }
    int rc = write_attr(loc, name, type, type, v, n, err);
    H5Tclose(type);
    return rc;
}

/* The inputs and steps as parallel arrays: input_roles[i], input_paths[i], ... */
static int write_lists(hid_t g, const prov_record *p, kv_err *err)
{
    int n = p->n_inputs > p->n_steps ? p->n_inputs : p->n_steps, rc = KV_OK;
    const char **s = calloc((size_t)(n > 0 ? n : 1), sizeof *s);
    int64_t *sizes = calloc((size_t)(n > 0 ? n : 1), sizeof *sizes);
    if (!s || !sizes) rc = kv_fail(err, KV_EFAIL, "provenance: out of memory");
    if (!rc && p->n_inputs) {
        for (int i = 0; i < p->n_inputs; i++) s[i] = p->inputs[i].role, sizes[i] = p->inputs[i].size;
        rc = write_strs(g, "input_roles", s, p->n_inputs, err);
        for (int i = 0; !rc && i < p->n_inputs; i++) s[i] = p->inputs[i].path;
        if (!rc) rc = write_strs(g, "input_paths", s, p->n_inputs, err);
        for (int i = 0; !rc && i < p->n_inputs; i++) s[i] = p->inputs[i].sha256;
        if (!rc) rc = write_strs(g, "input_sha256", s, p->n_inputs, err);
        if (!rc) rc = write_attr(g, "input_sizes", H5T_STD_I64LE, H5T_NATIVE_INT64, sizes, p->n_inputs, err);
    }
    if (!rc && p->n_steps) {
        for (int i = 0; i < p->n_steps; i++) s[i] = p->steps[i].verb;
        rc = write_strs(g, "step_verbs", s, p->n_steps, err);
        for (int i = 0; !rc && i < p->n_steps; i++) s[i] = p->steps[i].command;
        if (!rc) rc = write_strs(g, "step_commands", s, p->n_steps, err);
    }
    free(s), free(sizes);
    return rc;
}

static int write_fields(hid_t g, const prov_record *p, const char *json, kv_err *err)
{
    const int64_t format = PROV_FORMAT;
    int rc = h5u_write_attr_i64(g, "kvtrace_provenance", &format, 1, err);
    struct { const char *name, *v; } strs[] = {
        {"verb", p->verb},   {"command", p->command}, {"kvtrace_version", p->version},
        {"time", p->time[0] ? p->time : NULL}, {"time_source", p->time[0] ? p->time_source : NULL},
        {"model", p->model}, {"prompt", p->prompt},   {"json", json},
    };
    for (size_t i = 0; !rc && i < sizeof strs / sizeof strs[0]; i++)
        if (strs[i].v) rc = h5u_write_attr_str(g, strs[i].name, strs[i].v, err);
    if (!rc && p->argc) rc = write_strs(g, "argv", (const char **)p->argv, p->argc, err);
    if (!rc && p->has_seed) rc = write_attr(g, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &p->seed, -1, err);
    if (!rc && p->has_temperature) rc = h5u_write_attr_f64(g, "temperature", p->temperature, err);
    if (!rc) rc = write_lists(g, p, err);
    return rc;
}

int prov_write_h5(int64_t loc_id, const void *record, kv_err *err)
{
    const prov_record *p = record;
    char *json = prov_to_json(p);
    if (!json) return kv_fail(err, KV_EFAIL, "provenance: out of memory");
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE), g = -1;
    if (gcpl >= 0 && H5Pset_obj_track_times(gcpl, 0) >= 0)
        g = H5Gcreate2((hid_t)loc_id, PROV_GROUP, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    if (gcpl >= 0) H5Pclose(gcpl);
    int rc = g < 0 ? kv_fail(err, KV_EFAIL, "cannot create the group /" PROV_GROUP) : write_fields(g, p, json, err);
    if (g >= 0) H5Gclose(g);
    free(json);
    return rc;
}

/* The `json` attribute of /provenance (variable- or fixed-length), malloc'd. */
static char *read_json_attr(hid_t g)
{
    hid_t a = H5Aopen(g, "json", H5P_DEFAULT), ft = a < 0 ? -1 : H5Aget_type(a), mt = -1;
    char *out = NULL;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING) {
        mt = H5Tcopy(H5T_C_S1);
        H5Tset_cset(mt, H5Tget_cset(ft)); /* HDF5 converts no character set into another */
        if (H5Tis_variable_str(ft) > 0) {
            char *v = NULL;
            if (H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &v) >= 0 && v) {
                out = strdup(v);
                H5free_memory(v);
            }
        } else {
            size_t n = H5Tget_size(ft);
            out = calloc(n + 1, 1);
            if (out && (H5Tset_size(mt, n + 1) < 0 || H5Aread(a, mt, out) < 0)) free(out), out = NULL;
        }
    }
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    if (a >= 0) H5Aclose(a);
    return out;
}

int prov_read_h5(const char *path, prov_record *p, bool *present, kv_err *err)
{
    memset(p, 0, sizeof *p);
    *present = false;
    h5u_quiet();
    int rc = kv_input_check(path, false, err);
    if (rc) return rc;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return kv_fail(err, KV_EINPUT, "%s: not an HDF5 file", path);
    if (h5u_exists(f, PROV_GROUP)) {
        hid_t g = H5Gopen2(f, PROV_GROUP, H5P_DEFAULT);
        char *json = g < 0 ? NULL : read_json_attr(g);
        char where[4300];
        snprintf(where, sizeof where, "%s: /" PROV_GROUP, path);
        rc = json ? prov_from_json(json, where, p, err) : kv_fail(err, KV_EINPUT, "%s: no readable 'json' attribute", where);
        *present = rc == KV_OK;
        free(json);
        if (g >= 0) H5Gclose(g);
    }
    H5Fclose(f);
    return rc;
}
