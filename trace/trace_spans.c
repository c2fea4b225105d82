/* /spans: named token ranges of the prompt (capture --prompts,
 * docs/study.md#spans; the format: docs/trace.md#datasets): a group holding
 * `names` (variable-length UTF-8 strings [n]), `starts` and `ends` (int64
 * [n]), span i being the positions [starts[i], ends[i]) of /tokens. Optional,
 * apart from the schema table like /prompt_text. Checked on open:
 * 1 .. TRACE_MAX_SPANS spans, names 1 .. TRACE_SPAN_NAME_MAX bytes and
 * distinct, 0 <= start < end <= prompt_len. */
#include <stdlib.h>
#include <string.h>

#include "core/h5util.h"
#include "trace_schema.h"

const char TRACE_SPANS_DESCRIPTION[] =
    "named token ranges of the prompt: span i is the positions [starts[i], ends[i]) of /tokens, named names[i] "
    "(distinct, of A-Z a-z 0-9 _ . -); 'answer' is the prompt's answer when it has one";

bool trace_span_name_ok(const char *name)
{
    const size_t len = strnlen(name, TRACE_SPAN_NAME_MAX + 1);
    return len > 0 && len <= TRACE_SPAN_NAME_MAX &&
           strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == len;
}

static int trace_spans_check(const trace_span *s, int64_t n, int64_t prompt_len, const char *where, kv_err *err)
{
    if (n < 1 || n > TRACE_MAX_SPANS)
        return kv_fail(err, KV_EINPUT, "%s: %s holds %lld spans (1 .. %d)", where, TRACE_SPANS_PATH, (long long)n,
                       TRACE_MAX_SPANS);
    for (int64_t i = 0; i < n; i++) {
        if (!trace_span_name_ok(s[i].name))
            return kv_fail(err, KV_EINPUT, "%s: %s: span %lld's name must be 1 .. %d of A-Z a-z 0-9 _ . -", where,
                           TRACE_SPANS_PATH, (long long)i, TRACE_SPAN_NAME_MAX);
        if (!(s[i].start >= 0 && s[i].start < s[i].end && s[i].end <= prompt_len))
            return kv_fail(err, KV_EINPUT, "%s: %s: span '%s' is [%lld, %lld), outside the prompt's [0, %lld) or "
                           "empty", where, TRACE_SPANS_PATH, s[i].name, (long long)s[i].start, (long long)s[i].end,
                           (long long)prompt_len);
        for (int64_t j = 0; j < i; j++)
            if (strcmp(s[i].name, s[j].name) == 0)
                return kv_fail(err, KV_EINPUT, "%s: %s: two spans are named '%s'", where, TRACE_SPANS_PATH,
                               s[i].name);
    }
    return KV_OK;
}

/* One 1-D dataset of n elements of memory type mtype (file type ftype) under g. */
static bool write_1d(hid_t g, const char *name, hid_t ftype, hid_t mtype, int64_t n, const void *data)
{
    hsize_t dims[1] = {(hsize_t)n};
    hid_t space = H5Screate_simple(1, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    bool ok = space >= 0 && dcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0;
    if (ok) d = H5Dcreate2(g, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ok = ok && d >= 0 && H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    if (d >= 0) H5Dclose(d);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return ok;
}

int trace_spans_write(int64_t file_id, const trace_meta *m, const char *where, kv_err *err)
{
    const int64_t n = m->n_spans;
    int rc = trace_spans_check(m->spans, n, m->prompt_len, where, err);
    if (rc) return rc;
    const char **names = malloc(sizeof *names * (size_t)n);
    int64_t *se = malloc(sizeof *se * (size_t)(2 * n));
    if (!names || !se) rc = kv_fail(err, KV_EFAIL, "out of memory");
    for (int64_t i = 0; !rc && i < n; i++)
        names[i] = m->spans[i].name, se[i] = m->spans[i].start, se[n + i] = m->spans[i].end;
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE), g = -1, type = trace_text_type();
    bool ok = !rc && gcpl >= 0 && type >= 0 && H5Pset_obj_track_times(gcpl, 0) >= 0;
    if (ok) g = H5Gcreate2((hid_t)file_id, TRACE_SPANS_PATH, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    ok = ok && g >= 0 && write_1d(g, "names", type, type, n, names) &&
         write_1d(g, "starts", H5T_STD_I64LE, H5T_NATIVE_INT64, n, se) &&
         write_1d(g, "ends", H5T_STD_I64LE, H5T_NATIVE_INT64, n, se + n);
    if (!rc && !ok) rc = kv_fail(err, KV_EFAIL, "%s: cannot write %s", where, TRACE_SPANS_PATH);
    if (!rc) rc = h5u_write_attr_str(g, "description", TRACE_SPANS_DESCRIPTION, err);
    if (g >= 0) H5Gclose(g);
    if (gcpl >= 0) H5Pclose(gcpl);
    if (type >= 0) H5Tclose(type);
    free(names);
    free(se);
    return rc;
}

/* The length of the 1-D dataset d (-1: not 1-D). */
static int64_t length_1d(hid_t d)
{
    hid_t space = H5Dget_space(d);
    hsize_t dims[1] = {0};
    const bool one = space >= 0 && H5Sget_simple_extent_ndims(space) == 1 &&
                     H5Sget_simple_extent_dims(space, dims, NULL) == 1;
    if (space >= 0) H5Sclose(space);
    return one ? (int64_t)dims[0] : -1;
}

/* names (variable-length strings) into s[i].name; false when not readable or a name is too long. */
static bool read_names(hid_t g, trace_span *s, int64_t n)
{
    hid_t d = H5Dopen2(g, "names", H5P_DEFAULT), ftype = d >= 0 ? H5Dget_type(d) : -1, mtype = trace_text_type();
    char **names = calloc((size_t)n, sizeof *names);
    bool ok = d >= 0 && ftype >= 0 && mtype >= 0 && names && H5Tget_class(ftype) == H5T_STRING &&
              H5Tis_variable_str(ftype) > 0 && length_1d(d) == n &&
              H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, names) >= 0;
    for (int64_t i = 0; ok && i < n; i++) {
        ok = names[i] && strlen(names[i]) <= TRACE_SPAN_NAME_MAX;
        if (ok) snprintf(s[i].name, sizeof s[i].name, "%s", names[i]);
    }
    for (int64_t i = 0; names && i < n; i++)
        if (names[i]) H5free_memory(names[i]);
    free(names);
    if (mtype >= 0) H5Tclose(mtype);
    if (ftype >= 0) H5Tclose(ftype);
    if (d >= 0) H5Dclose(d);
    return ok;
}

static bool read_i64(hid_t g, const char *name, int64_t n, trace_span *s, bool starts)
{
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT), ftype = d >= 0 ? H5Dget_type(d) : -1;
    int64_t *v = malloc(sizeof *v * (size_t)n);
    bool ok = d >= 0 && ftype >= 0 && v && H5Tget_class(ftype) == H5T_INTEGER && length_1d(d) == n &&
              H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0;
    for (int64_t i = 0; ok && i < n; i++) *(starts ? &s[i].start : &s[i].end) = v[i];
    free(v);
    if (ftype >= 0) H5Tclose(ftype);
    if (d >= 0) H5Dclose(d);
    return ok;
}

int trace_spans_read(int64_t file_id, const trace_meta *m, const char *where, trace_span **spans, int64_t *n,
                     kv_err *err)
{
    *spans = NULL, *n = 0;
    const hid_t file = (hid_t)file_id;
    if (!h5u_exists(file, TRACE_SPANS_PATH)) return KV_OK;
    hid_t g = H5Gopen2(file, TRACE_SPANS_PATH, H5P_DEFAULT), d = -1;
    int64_t count = -1;
    if (g >= 0 && h5u_exists(g, "names") && (d = H5Dopen2(g, "names", H5P_DEFAULT)) >= 0) count = length_1d(d);
    if (d >= 0) H5Dclose(d);
    int rc = KV_OK;
    if (count < 1 || count > TRACE_MAX_SPANS || !h5u_exists(g, "starts") || !h5u_exists(g, "ends"))
        rc = kv_fail(err, KV_EINPUT, "%s: %s must be a group of 1-D names, starts and ends (1 .. %d spans)", where,
                     TRACE_SPANS_PATH, TRACE_MAX_SPANS);
    trace_span *s = rc ? NULL : calloc((size_t)count, sizeof *s);
    if (!rc && !s) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc && !(read_names(g, s, count) && read_i64(g, "starts", count, s, true) && read_i64(g, "ends", count, s, false)))
        rc = kv_fail(err, KV_EINPUT, "%s: %s: names must be variable-length strings (at most %d bytes), starts and "
                     "ends integers, all of one length", where, TRACE_SPANS_PATH, TRACE_SPAN_NAME_MAX);
    if (!rc) rc = trace_spans_check(s, count, m->prompt_len, where, err);
    if (g >= 0) H5Gclose(g);
    if (rc) free(s);
    else *spans = s, *n = count;
    return rc;
}
