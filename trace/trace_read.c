/* Trace reader: opens a trace, validates it against schema 1.0 in full, and
 * reads (layer, head) slices as float32. It looks only at the schema's own
 * attributes and datasets: anything else (the /provenance group, an h5py
 * script's extras) is ignored, and a trace without it is just as valid. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileopen.h"
#include "core/h5util.h"
#include "core/half.h"
#include "trace.h"
#include "trace_schema.h"

struct trace {
    char path[4096];
    hid_t file;
    bool own_file;
    hid_t dset[TRACE_NDSETS];     /* -1: absent */
    h5u_kind kind[TRACE_NDSETS];  /* element type as stored */
    int64_t dims[TRACE_NDSETS][4];
    trace_meta meta;
    char *prompt_text;            /* /prompt_text, NULL: absent */
    char *prompt_chat;            /* /prompt_chat, NULL: absent */
    trace_span *spans;            /* /spans [n_spans], NULL: absent */
    int64_t n_spans;
    double *rope_ff;              /* rope_freq_factors [head_dim/2], NULL: absent */
    hid_t half;
    kv_half *half_buf;
    size_t half_cap;
};

/* The optional rope_freq_factors: head_dim/2 finite divisors > 0. */
static int read_freq_factors(trace *tr, kv_err *err)
{
    trace_meta *m = &tr->meta;
    const int64_t n = m->head_dim / 2;
    bool present = false;
    if (n < 1) return KV_OK;
    if (!(tr->rope_ff = kv_calloc((size_t)n, sizeof(double), "rope_freq_factors", err))) return err->code;
    int rc = h5u_read_attr_f64s(tr->file, tr->path, "rope_freq_factors", tr->rope_ff, (int)n, &present, err);
    for (int64_t p = 0; !rc && present && p < n; p++)
        if (!(isfinite(tr->rope_ff[p]) && tr->rope_ff[p] > 0))
            rc = kv_fail(err, KV_EINPUT, "%s: attribute 'rope_freq_factors'[%lld] = %g is not a positive number",
                         tr->path, (long long)p, tr->rope_ff[p]);
    if (!rc && present) m->rope_freq_factors = tr->rope_ff;
    return rc;
}

static int read_meta(trace *tr, kv_err *err)
{
    const char *where = tr->path;
    hid_t root = tr->file;
    trace_meta *m = &tr->meta;
    int64_t schema[2];
    bool present;
    int rc = h5u_read_attr_i64(root, where, "kvtrace_schema", schema, 2, &present, err);
    if (rc) return rc;
    if (!present)
        return kv_fail(err, KV_EINPUT, "%s: not a kvtrace trace (no 'kvtrace_schema' attribute)", where);
    if (schema[0] != TRACE_SCHEMA_MAJOR)
        return kv_fail(err, KV_EINPUT, "%s: trace schema %lld.%lld is not supported (this kvtrace reads %d.x)",
                       where, (long long)schema[0], (long long)schema[1], TRACE_SCHEMA_MAJOR);
    m->schema_major = (int)schema[0];
    m->schema_minor = schema[1] < 0 || schema[1] > 1000000 ? 0 : (int)schema[1];

    struct { const char *name; int64_t *v; } ints[] = {
        {"n_layers", &m->n_layers},     {"n_heads", &m->n_heads},
        {"n_kv_heads", &m->n_kv_heads}, {"head_dim", &m->head_dim},
        {"n_tokens", &m->n_tokens},     {"prompt_len", &m->prompt_len},
        {"vocab_size", &m->vocab_size}, {"capture_chunk", &m->capture_chunk},
    };
    struct { const char *name; char *buf; size_t cap; } strs[] = {
        {"creator", m->creator, sizeof m->creator},
        {"model_name", m->model_name, sizeof m->model_name},
        {"architecture", m->architecture, sizeof m->architecture},
        {"rope_style", m->rope_style, sizeof m->rope_style},
        {"capture_mode", m->capture_mode, sizeof m->capture_mode},
    };
    for (size_t i = 0; !rc && i < sizeof ints / sizeof ints[0]; i++)
        rc = h5u_read_attr_i64(root, where, ints[i].name, ints[i].v, 1, NULL, err);
    for (size_t i = 0; !rc && i < sizeof strs / sizeof strs[0]; i++)
        rc = h5u_read_attr_str(root, where, strs[i].name, strs[i].buf, strs[i].cap, NULL, err);
    if (!rc) rc = h5u_read_attr_f64(root, where, "rope_theta", &m->rope_theta, NULL, err);
    bool scaled = false;
    if (!rc) rc = h5u_read_attr_str(root, where, "rope_scaling", m->rope_scaling, sizeof m->rope_scaling, &scaled, err);
    bool int8 = false;
    if (!rc) rc = h5u_read_attr_str(root, where, "compute", m->compute, sizeof m->compute, &int8, err);
    if (!rc && int8 && strcmp(m->compute, "int8") != 0)
        return kv_fail(err, KV_EINPUT, "%s: attribute 'compute' = '%s' is not int8 (the only value it takes)", where,
                       m->compute);
    char storage[8];
    if (!rc) rc = h5u_read_attr_str(root, where, "storage_dtype", storage, sizeof storage, NULL, err);
    if (rc) return rc;
    if (strcmp(storage, "f32") == 0) m->storage = TRACE_F32;
    else if (strcmp(storage, "f16") == 0) m->storage = TRACE_F16;
    else return kv_fail(err, KV_EINPUT, "%s: attribute 'storage_dtype' = '%s' is not one of f32, f16",
                        where, storage);
    if (strcmp(m->capture_mode, "evict") == 0) {
        rc = h5u_read_attr_str(root, where, "evict_policy", m->evict_policy, sizeof m->evict_policy, NULL, err);
        if (!rc) rc = h5u_read_attr_str(root, where, "evict_params", m->evict_params, sizeof m->evict_params, NULL, err);
        if (!rc) rc = h5u_read_attr_i64(root, where, "evict_budget", &m->evict_budget, 1, NULL, err);
        if (!rc) rc = h5u_read_attr_i64(root, where, "evict_chunk", &m->evict_chunk, 1, NULL, err);
        bool has_until = false; /* optional: only capture --evict-until writes it */
        if (!rc) rc = h5u_read_attr_i64(root, where, "evict_until", &m->evict_until, 1, &has_until, err);
        if (!rc && !has_until) m->evict_until = 0;
        bool has_alloc = false; /* optional: traces before allocators ran uniform */
        if (!rc) rc = h5u_read_attr_str(root, where, "evict_allocator", m->evict_allocator, sizeof m->evict_allocator,
                                        &has_alloc, err);
        bool has_def = false; /* optional: only a score expression has one */
        if (!rc) rc = h5u_read_attr_str(root, where, "evict_definition", m->evict_definition,
                                        sizeof m->evict_definition, &has_def, err);
        if (rc) return rc;
    }
    rc = trace_meta_check(m, where, true, err);
    return rc ? rc : read_freq_factors(tr, err);
}

static void format_dims(char *buf, size_t cap, int rank, const int64_t *dims)
{
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int a = 0; a < rank && used < cap; a++)
        used += (size_t)snprintf(buf + used, cap - used, a ? ", %lld" : "%lld", (long long)dims[a]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

static bool elem_ok(const trace *tr, trace_elem elem, h5u_kind k, const char **expected)
{
    switch (elem) {
    case ELEM_TOKEN: *expected = "an integer type"; return k == H5U_INT;
    case ELEM_FLOAT: *expected = "float16, float32 or float64"; return k == H5U_F16 || k == H5U_F32 || k == H5U_F64;
    case ELEM_STORAGE:
        *expected = tr->meta.storage == TRACE_F16 ? "float16 (storage_dtype = f16)" : "float32 (storage_dtype = f32)";
        return k == (tr->meta.storage == TRACE_F16 ? H5U_F16 : H5U_F32);
    }
    return false;
}

/* Opens dataset d if present and checks mode, rank, shape and element type. */
static int open_dset(trace *tr, trace_dset d, kv_err *err)
{
    const trace_dset_spec *s = trace_spec(d);
    const char *where = tr->path;
    if (!h5u_exists(tr->file, s->path)) {
        if (s->required) return kv_fail(err, KV_EINPUT, "%s: missing required dataset %s", where, s->path);
        return KV_OK;
    }
    bool evict = strcmp(tr->meta.capture_mode, "evict") == 0;
    if ((s->full_mode_only && evict) || (s->evict_mode_only && !evict))
        return kv_fail(err, KV_EINPUT, "%s: dataset %s is not allowed with capture_mode = %s", where,
                       s->path, tr->meta.capture_mode);
    H5O_info_t info;
    if (H5Oget_info_by_name(tr->file, s->path, &info, H5P_DEFAULT) < 0 || info.type != H5O_TYPE_DATASET)
        return kv_fail(err, KV_EINPUT, "%s: %s is not a dataset", where, s->path);
    hid_t id = H5Dopen2(tr->file, s->path, H5P_DEFAULT);
    if (id < 0) return kv_fail(err, KV_EINPUT, "%s: cannot open dataset %s", where, s->path);
    tr->dset[d] = id;

    hid_t type = H5Dget_type(id);
    tr->kind[d] = type < 0 ? H5U_OTHER : h5u_classify(type);
    if (type >= 0) H5Tclose(type);
    const char *expected = "";
    if (!elem_ok(tr, s->elem, tr->kind[d], &expected))
        return kv_fail(err, KV_EINPUT, "%s: dataset %s has element type %s, expected %s", where,
                       s->path, h5u_kind_name(tr->kind[d]), expected);

    hid_t space = H5Dget_space(id);
    int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    hsize_t hd[H5S_MAX_RANK];
    if (rank > 0 && rank <= H5S_MAX_RANK) H5Sget_simple_extent_dims(space, hd, NULL);
    if (space >= 0) H5Sclose(space);
    if (rank != s->rank)
        return kv_fail(err, KV_EINPUT, "%s: dataset %s has rank %d, expected %d", where, s->path,
                       rank, s->rank);
    int64_t want[4];
    trace_expected_dims(&tr->meta, d, tr->meta.n_tokens, want);
    bool match = true;
    for (int a = 0; a < rank; a++) {
        tr->dims[d][a] = hd[a] > (hsize_t)INT64_MAX ? INT64_MAX : (int64_t)hd[a];
        if (want[a] >= 0 && tr->dims[d][a] != want[a]) match = false;
    }
    if (!match) {
        char got[96], exp[96];
        format_dims(got, sizeof got, rank, tr->dims[d]);
        format_dims(exp, sizeof exp, rank, want);
        for (char *p = strstr(exp, "-1"); p; p = strstr(p, "-1")) p[0] = ' ', p[1] = '*';
        return kv_fail(err, KV_EINPUT, "%s: dataset %s has shape %s, but the attributes say %s", where,
                       s->path, got, exp);
    }
    return KV_OK;
}

static int scan_tokens(trace *tr, int32_t *out, kv_err *err);

static int check_paired_dsets(trace *tr, kv_err *err)
{
    bool has_r = tr->dset[TRACE_EVICT_RETAINED] >= 0, has_s = tr->dset[TRACE_EVICT_STEP_END] >= 0;
    if (has_r != has_s)
        return kv_fail(err, KV_EINPUT, "%s: %s needs %s beside it", tr->path,
                       trace_dset_path(has_r ? TRACE_EVICT_RETAINED : TRACE_EVICT_STEP_END),
                       trace_dset_path(has_r ? TRACE_EVICT_STEP_END : TRACE_EVICT_RETAINED));
    if (has_r && (tr->dims[TRACE_EVICT_RETAINED][0] != tr->dims[TRACE_EVICT_STEP_END][0] ||
                  tr->dims[TRACE_EVICT_RETAINED][3] < 1))
        return kv_fail(err, KV_EINPUT, "%s: /evict/retained has %lld snapshots of %lld positions but "
                       "/evict/step_end has %lld", tr->path, (long long)tr->dims[TRACE_EVICT_RETAINED][0],
                       (long long)tr->dims[TRACE_EVICT_RETAINED][3], (long long)tr->dims[TRACE_EVICT_STEP_END][0]);
    /* the recorded full-cache reference: both or neither */
    bool has_o = tr->dset[TRACE_ATTN_OUT] >= 0, has_l = tr->dset[TRACE_ATTN_LSE] >= 0;
    if (has_o != has_l)
        return kv_fail(err, KV_EINPUT, "%s: %s needs %s beside it", tr->path,
                       trace_dset_path(has_o ? TRACE_ATTN_OUT : TRACE_ATTN_LSE),
                       trace_dset_path(has_o ? TRACE_ATTN_LSE : TRACE_ATTN_OUT));
    if (tr->dset[TRACE_ATTN_MAX] >= 0 && !has_l) /* the row maxima only with their log-sum-exps */
        return kv_fail(err, KV_EINPUT, "%s: %s needs %s beside it", tr->path, trace_dset_path(TRACE_ATTN_MAX),
                       trace_dset_path(TRACE_ATTN_LSE));
    return KV_OK;
}

void trace_close(trace *tr)
{
    if (!tr) return;
    for (int d = 0; d < TRACE_NDSETS; d++)
        if (tr->dset[d] >= 0) H5Dclose(tr->dset[d]);
    if (tr->own_file && tr->file >= 0) H5Fclose(tr->file);
    if (tr->half >= 0) H5Tclose(tr->half);
    free(tr->half_buf);
    free(tr->prompt_text), free(tr->prompt_chat);
    free(tr->spans);
    free(tr->rope_ff);
    free(tr);
}

static int open_common(hid_t file, bool own, const char *name, trace **out, kv_err *err)
{
    trace *tr = kv_calloc(1, sizeof *tr, "trace", err);
    if (!tr) {
        if (own) H5Fclose(file);
        return err->code;
    }
    snprintf(tr->path, sizeof tr->path, "%s", name);
    tr->file = file;
    tr->own_file = own;
    for (int d = 0; d < TRACE_NDSETS; d++) tr->dset[d] = -1;
    tr->half = h5u_half_type();
    int rc = tr->half < 0 ? kv_fail(err, KV_EFAIL, "cannot define the float16 HDF5 type") : KV_OK;
    if (!rc) rc = read_meta(tr, err);
    for (int d = 0; !rc && d < TRACE_NDSETS; d++) rc = open_dset(tr, (trace_dset)d, err);
    if (!rc) rc = check_paired_dsets(tr, err);
    if (!rc) rc = trace_prompt_text_read(tr->file, tr->path, &tr->prompt_text, err);
    if (!rc) rc = trace_prompt_chat_read(tr->file, tr->path, &tr->prompt_chat, err);
    if (!rc) rc = trace_wo_check(tr->file, &tr->meta, tr->path, &tr->meta.wo_dim, err);
    if (!rc) rc = trace_spans_read(tr->file, &tr->meta, tr->path, &tr->spans, &tr->n_spans, err);
    if (!rc) rc = scan_tokens(tr, NULL, err);
    if (rc) {
        trace_close(tr);
        return rc;
    }
    *out = tr;
    return KV_OK;
}

int trace_open(const char *path, trace **out, kv_err *err)
{
    *out = NULL;
    h5u_quiet();
    struct stat st;
    int rc = kv_input_check(path, false, err);
    if (rc) return rc;
    if (stat(path, &st) != 0)
        return kv_fail(err, KV_EFAIL, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return kv_fail(err, KV_EINPUT, "%s: not a regular file", path);
    if (st.st_size == 0) return kv_fail(err, KV_EINPUT, "%s: empty file, not an HDF5 trace", path);
    if (H5Fis_hdf5(path) <= 0)
        return kv_fail(err, KV_EINPUT, "%s: not an HDF5 file (no HDF5 signature found)", path);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0)
        return kv_fail(err, KV_EINPUT, "%s: HDF5 cannot open it (truncated or corrupt file)", path);
    return open_common(file, true, path, out, err);
}

int trace_open_hid(int64_t file_id, const char *name, trace **out, kv_err *err)
{
    *out = NULL;
    h5u_quiet();
    return open_common((hid_t)file_id, false, name, out, err);
}

const trace_meta *trace_get_meta(const trace *tr) { return &tr->meta; }
const char *trace_path(const trace *tr) { return tr->path; }
bool trace_has(const trace *tr, trace_dset d) { return tr->dset[d] >= 0; }
const char *trace_prompt_text(const trace *tr) { return tr->prompt_text; }
const char *trace_prompt_chat(const trace *tr) { return tr->prompt_chat; }

const trace_span *trace_spans(const trace *tr, int64_t *n)
{
    *n = tr->n_spans;
    return tr->spans;
}

int trace_read_wo(trace *tr, int64_t layer, float *out, kv_err *err)
{
    KV_ASSERT(tr->meta.wo_dim > 0 && layer >= 0 && layer < tr->meta.n_layers);
    return trace_wo_read(tr->file, &tr->meta, layer, out, tr->path, err);
}

/* Reads a hyperslab of d into `buf` with memory type `mtype`. */
static int read_slab(trace *tr, trace_dset d, const hsize_t *start, const hsize_t *count,
                     hid_t mtype, void *buf, kv_err *err)
{
    const trace_dset_spec *s = trace_spec(d);
    if (!h5u_slab_io(tr->dset[d], s->rank, start, count, mtype, buf, false))
        return errno == ENOMEM ? kv_fail(err, KV_EFAIL, "%s: %s: out of memory", tr->path, s->path)
                               : kv_fail(err, KV_EINPUT, "%s: cannot read %s (corrupt or truncated data)", tr->path,
                                         s->path);
    return KV_OK;
}

/* Token ids [t0, t0+n) into `tmp` (int64), checked against the vocabulary. */
static int read_token_block(trace *tr, int64_t t0, int64_t n, int64_t *tmp, kv_err *err)
{
    hsize_t start = (hsize_t)t0, count = (hsize_t)n;
    /* HDF5 leaves the buffer as it was where a dataset with fill time
     * "never" was not written: start from an id outside every vocabulary. */
    for (int64_t i = 0; i < n; i++) tmp[i] = -1;
    int rc = read_slab(tr, TRACE_TOKENS, &start, &count, H5T_NATIVE_INT64, tmp, err);
    for (int64_t i = 0; !rc && i < n; i++)
        if (tmp[i] < 0 || tmp[i] >= tr->meta.vocab_size)
            rc = kv_fail(err, KV_EINPUT, "%s: /tokens[%lld] = %lld is outside the vocabulary [0, %lld)",
                         tr->path, (long long)(t0 + i), (long long)tmp[i],
                         (long long)tr->meta.vocab_size);
    return rc;
}

enum { TOKEN_BLOCK = 65536 };

/* Visits the token ids in bounded blocks; `out` may be NULL (check only). */
static int scan_tokens(trace *tr, int32_t *out, kv_err *err)
{
    int64_t T = tr->meta.n_tokens;
    int64_t *tmp = kv_calloc(TOKEN_BLOCK, sizeof *tmp, "token ids", err);
    if (!tmp) return err->code;
    int rc = KV_OK;
    for (int64_t t0 = 0; !rc && t0 < T; t0 += TOKEN_BLOCK) {
        int64_t n = T - t0 < TOKEN_BLOCK ? T - t0 : TOKEN_BLOCK;
        rc = read_token_block(tr, t0, n, tmp, err);
        for (int64_t i = 0; !rc && out && i < n; i++) out[t0 + i] = (int32_t)tmp[i];
    }
    free(tmp);
    return rc;
}

int trace_read_tokens(trace *tr, int32_t *out, kv_err *err)
{
    return scan_tokens(tr, out, err);
}

/* Refuses NaN/inf (negative column sums, kvzip weights outside [0, 1]) with the first offending position. */
static int check_values(const trace *tr, trace_dset d, int64_t layer, int64_t head, int64_t t0,
                        int64_t width, const float *v, size_t count, kv_err *err)
{
    const bool nonneg = d == TRACE_COLSUM || d == TRACE_ATTN_FULL || d == TRACE_KVZIP, unit = d == TRACE_KVZIP;
    for (size_t i = 0; i < count; i++) {
        if (isfinite(v[i]) && !(nonneg && v[i] < 0) && !(unit && v[i] > 1)) continue;
        return kv_fail(err, KV_EINPUT, "%s: %s[layer %lld, head %lld, position %lld] = %g is %s", tr->path,
                       trace_dset_path(d), (long long)layer, (long long)head,
                       (long long)(t0 + (int64_t)i / width), v[i],
                       !isfinite(v[i]) ? "not finite (or never written)" : v[i] < 0 ? "negative" : "above 1");
    }
    return KV_OK;
}

int trace_read_rows(trace *tr, trace_dset d, int64_t layer, int64_t head, int64_t t0, int64_t n,
                    float *out, kv_err *err)
{
    const trace_meta *m = &tr->meta;
    if (d != TRACE_KEYS && d != TRACE_VALUES && d != TRACE_QUERIES && d != TRACE_COLSUM && d != TRACE_ATTN_FULL &&
        d != TRACE_KVZIP && d != TRACE_ATTN_OUT && d != TRACE_ATTN_LSE && d != TRACE_ATTN_MAX)
        return kv_fail(err, KV_EFAIL, "trace_read_rows: %s is not a per-head dataset", trace_dset_path(d));
    if (tr->dset[d] < 0)
        return kv_fail(err, KV_EINPUT, "%s: has no %s dataset", tr->path, trace_dset_path(d));
    int64_t n_heads = d == TRACE_KEYS || d == TRACE_VALUES ? m->n_kv_heads : m->n_heads;
    if (layer < 0 || layer >= m->n_layers || head < 0 || head >= n_heads || t0 < 0 || n < 1 ||
        t0 > m->n_tokens - n)
        return kv_fail(err, KV_EFAIL, "%s: request (layer %lld, head %lld, rows %lld..%lld) is outside %s",
                       tr->path, (long long)layer, (long long)head, (long long)t0,
                       (long long)(t0 + n), trace_dset_path(d));
    int64_t width = trace_row_width(m, d, m->n_tokens);
    hsize_t start[4] = {(hsize_t)layer, (hsize_t)head, (hsize_t)t0, 0};
    hsize_t count[4] = {1, 1, (hsize_t)n, (hsize_t)width};
    size_t total = (size_t)n * (size_t)width;
    int rc;
    if (tr->kind[d] == H5U_F16) {
        if (total > tr->half_cap) {
            kv_half *buf = realloc(tr->half_buf, total * sizeof *buf);
            if (!buf) return kv_fail(err, KV_EFAIL, "float16 conversion buffer: out of memory");
            tr->half_buf = buf, tr->half_cap = total;
        }
        /* NaN where HDF5 writes nothing (unwritten chunks with fill time
         * "never"): check_values then refuses it instead of returning stale rows. */
        for (size_t i = 0; i < total; i++) tr->half_buf[i] = 0x7e00;
        rc = read_slab(tr, d, start, count, tr->half, tr->half_buf, err);
        if (!rc) half_to_float_array(tr->half_buf, out, total);
    } else {
        for (size_t i = 0; i < total; i++) out[i] = NAN; /* as above */
        rc = read_slab(tr, d, start, count, H5T_NATIVE_FLOAT, out, err);
    }
    if (!rc) rc = check_values(tr, d, layer, head, t0, width, out, total, err);
    return rc;
}

int trace_read_head(trace *tr, trace_dset d, int64_t layer, int64_t head, float *out, kv_err *err)
{
    return trace_read_rows(tr, d, layer, head, 0, tr->meta.n_tokens, out, err);
}

static void filter_names(hid_t dcpl, char *buf, size_t cap)
{
    int n = H5Pget_nfilters(dcpl);
    buf[0] = '\0';
    size_t used = 0;
    for (int i = 0; i < n && used < cap; i++) {
        unsigned flags;
        size_t nelem = 0;
        char name[32];
        H5Z_filter_t f = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelem, NULL, sizeof name, name, NULL);
        const char *label = f == H5Z_FILTER_DEFLATE ? "deflate" : f == H5Z_FILTER_SHUFFLE ? "shuffle"
                          : f == H5Z_FILTER_FLETCHER32 ? "fletcher32" : "other";
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? "+" : "", label);
    }
    if (n <= 0) snprintf(buf, cap, "none");
}

int trace_describe(trace *tr, trace_dset d, trace_dset_info *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    if (tr->dset[d] < 0) return kv_fail(err, KV_EFAIL, "%s: has no %s dataset", tr->path, trace_dset_path(d));
    const trace_dset_spec *s = trace_spec(d);
    out->rank = s->rank;
    memcpy(out->dims, tr->dims[d], sizeof out->dims);
    hid_t type = H5Dget_type(tr->dset[d]);
    if (tr->kind[d] == H5U_INT && type >= 0)
        snprintf(out->type, sizeof out->type, "%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "",
                 8 * H5Tget_size(type));
    else
        snprintf(out->type, sizeof out->type, "%s", h5u_kind_name(tr->kind[d]));
    if (type >= 0) H5Tclose(type);
    out->storage_bytes = H5Dget_storage_size(tr->dset[d]);
    hid_t dcpl = H5Dget_create_plist(tr->dset[d]);
    if (dcpl >= 0) {
        filter_names(dcpl, out->filters, sizeof out->filters);
        H5Pclose(dcpl);
    }
    return KV_OK;
}
