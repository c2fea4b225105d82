/* Trace writer: creates the schema-1.0 layout with extendable datasets and
 * appends (layer, head) row blocks along T. */
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>

#include "core/h5util.h"
#include "core/half.h"
#include "core/outfile.h"
#include "trace.h"
#include "trace_schema.h"

enum { CHUNK_T = 256, COLSUM_CHUNK_T = 1024 };

struct trace_writer {
    kv_outfile out;
    trace_meta meta;
    trace_create_opts opts;
    hid_t file;
    hid_t dset[TRACE_NDSETS];  /* -1: not created */
    int64_t extent[TRACE_NDSETS]; /* current size of the T axis */
    hid_t half;                /* memory/file type for f16 storage */
    kv_half *half_buf;         /* conversion scratch */
    size_t half_cap;
};

static bool is_created(const trace_writer *w, trace_dset d)
{
    return w->dset[d] >= 0;
}

static hid_t file_type_for(const trace_writer *w, trace_dset d)
{
    const trace_dset_spec *s = trace_spec(d);
    if (s->elem == ELEM_TOKEN) return H5T_STD_I32LE;
    if (s->elem == ELEM_STORAGE && w->meta.storage == TRACE_F16) return w->half;
    return H5T_IEEE_F32LE;
}

/* Chunk shape: one (layer, head) reads contiguously, ~256 rows per chunk. */
static hsize_t chunk_len(const trace_create_opts *o, int64_t len)
{
    int64_t hint = o->expected_tokens;
    return (hsize_t)(hint > 0 && hint < len ? hint : len);
}

static void chunk_shape(const trace_meta *m, const trace_create_opts *w, trace_dset d, hsize_t *chunk)
{
    switch (d) {
    case TRACE_KEYS:
    case TRACE_VALUES:
    case TRACE_QUERIES:
    case TRACE_ATTN_OUT:
        chunk[0] = 1, chunk[1] = 1, chunk[2] = chunk_len(w, CHUNK_T), chunk[3] = (hsize_t)m->head_dim;
        break;
    case TRACE_COLSUM:
    case TRACE_ATTN_LSE:
    case TRACE_ATTN_MAX:
    case TRACE_KVZIP: chunk[0] = 1, chunk[1] = 1, chunk[2] = chunk_len(w, COLSUM_CHUNK_T); break;
    case TRACE_ATTN_FULL:
        chunk[0] = 1, chunk[1] = 1, chunk[2] = chunk_len(w, 64), chunk[3] = chunk_len(w, CHUNK_T);
        break;
    case TRACE_LOGITS: {
        int64_t rows = (256 * 1024) / (4 * m->vocab_size);
        chunk[0] = chunk_len(w, rows < 1 ? 1 : rows > CHUNK_T ? CHUNK_T : rows);
        chunk[1] = (hsize_t)m->vocab_size;
        break;
    }
    default: chunk[0] = chunk_len(w, COLSUM_CHUNK_T); break;
    }
}

static void chunk_dims(const trace_writer *w, trace_dset d, hsize_t *chunk)
{
    chunk_shape(&w->meta, &w->opts, d, chunk);
}

double trace_create_bytes(const trace_meta *m, const trace_create_opts *opts, int64_t T)
{
    trace_create_opts o = *opts;
    if (o.expected_tokens <= 0) o.expected_tokens = T;
    double bytes = 0;
    for (int d = 0; d < TRACE_NDSETS; d++) {
        const trace_dset_spec *s = trace_spec((trace_dset)d);
        const bool evict = d == TRACE_EVICT_RETAINED || d == TRACE_EVICT_STEP_END;
        if (evict || (!s->required && !o.want[d])) continue;   /* the snapshots' count is not known before */
        int64_t dims[4];
        hsize_t chunk[4];
        trace_expected_dims(m, (trace_dset)d, T, dims);
        chunk_shape(m, &o, (trace_dset)d, chunk);
        double n = 1;   /* the allocated chunks hold whole chunks: each axis rounded up */
        for (int a = 0; a < s->rank; a++)
            n *= (double)((dims[a] + (int64_t)chunk[a] - 1) / (int64_t)chunk[a]) * (double)chunk[a];
        const double el = s->elem == ELEM_STORAGE && o.storage == TRACE_F16 ? 2 : 4;
        bytes += n * el;
    }
    return bytes;
}

/* W of /evict/retained: the most rows a (layer, kv head) keeps (N under uniform). */
static int64_t retained_width(const trace_meta *m)
{
    return m->evict_width > 0 ? m->evict_width : m->evict_budget;
}

static int create_dset(trace_writer *w, trace_dset d, kv_err *err)
{
    const trace_dset_spec *s = trace_spec(d);
    int64_t want[4];
    trace_expected_dims(&w->meta, d, 0, want);
    hsize_t cur[4], max[4], chunk[4];
    const bool evict = d == TRACE_EVICT_RETAINED || d == TRACE_EVICT_STEP_END;
    if (evict) /* snapshots grow along S (axis 0); a snapshot is [L][K][W] */
        want[0] = 0, want[3] = retained_width(&w->meta);
    for (int a = 0; a < s->rank; a++) {
        bool grows = evict ? a == 0 : a == s->t_axis || a == s->t_axis2;
        cur[a] = grows ? 0 : (hsize_t)want[a];
        max[a] = grows ? H5S_UNLIMITED : (hsize_t)want[a];
    }
    chunk_dims(w, d, chunk);
    if (d == TRACE_EVICT_RETAINED) /* one snapshot per chunk */
        chunk[0] = 1, chunk[1] = (hsize_t)want[1], chunk[2] = (hsize_t)want[2], chunk[3] = (hsize_t)want[3];

    hid_t space = H5Screate_simple(s->rank, cur, max);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    bool ok = space >= 0 && dcpl >= 0 && lcpl >= 0 && H5Pset_chunk(dcpl, s->rank, chunk) >= 0 &&
              H5Pset_obj_track_times(dcpl, 0) >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0;
    if (ok && w->opts.deflate > 0)
        ok = H5Pset_shuffle(dcpl) >= 0 && H5Pset_deflate(dcpl, (unsigned)w->opts.deflate) >= 0;
    if (ok) {
        w->dset[d] = H5Dcreate2(w->file, s->path, file_type_for(w, d), space, lcpl, dcpl, H5P_DEFAULT);
        ok = w->dset[d] >= 0;
    }
    if (lcpl >= 0) H5Pclose(lcpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    if (!ok) return kv_fail(err, KV_EFAIL, "%s: cannot create dataset %s", w->out.final_path, s->path);
    return h5u_write_attr_str(w->dset[d], "description", s->description, err);
}

static int write_root_attrs(trace_writer *w, kv_err *err)
{
    const trace_meta *m = &w->meta;
    hid_t root = w->file;
    int64_t schema[2] = {TRACE_SCHEMA_MAJOR, TRACE_SCHEMA_MINOR};
    struct { const char *name; int64_t v; } ints[] = {
        {"n_layers", m->n_layers},   {"n_heads", m->n_heads},       {"n_kv_heads", m->n_kv_heads},
        {"head_dim", m->head_dim},   {"prompt_len", m->prompt_len}, {"vocab_size", m->vocab_size},
        {"capture_chunk", m->capture_chunk},
    };
    struct { const char *name; const char *v; } strs[] = {
        {"creator", m->creator},           {"model_name", m->model_name},
        {"architecture", m->architecture}, {"rope_style", m->rope_style},
        {"capture_mode", m->capture_mode}, {"storage_dtype", trace_dtype_name(m->storage)},
    };
    int rc = h5u_write_attr_i64(root, "kvtrace_schema", schema, 2, err);
    for (size_t i = 0; !rc && i < sizeof ints / sizeof ints[0]; i++)
        rc = h5u_write_attr_i64(root, ints[i].name, &ints[i].v, 1, err);
    for (size_t i = 0; !rc && i < sizeof strs / sizeof strs[0]; i++)
        rc = h5u_write_attr_str(root, strs[i].name, strs[i].v, err);
    if (!rc) rc = h5u_write_attr_f64(root, "rope_theta", m->rope_theta, err);
    if (!rc && m->rope_scaling[0]) rc = h5u_write_attr_str(root, "rope_scaling", m->rope_scaling, err);
    if (!rc && m->compute[0]) rc = h5u_write_attr_str(root, "compute", m->compute, err);
    if (!rc && m->rope_freq_factors)
        rc = h5u_write_attr_f64s(root, "rope_freq_factors", m->rope_freq_factors, (int)(m->head_dim / 2), err);
    if (!rc && strcmp(m->capture_mode, "evict") == 0) {
        rc = h5u_write_attr_str(root, "evict_policy", m->evict_policy, err);
        if (!rc) rc = h5u_write_attr_str(root, "evict_params", m->evict_params, err);
        if (!rc) rc = h5u_write_attr_i64(root, "evict_budget", &m->evict_budget, 1, err);
        if (!rc) rc = h5u_write_attr_i64(root, "evict_chunk", &m->evict_chunk, 1, err);
        if (!rc && m->evict_until > 0) rc = h5u_write_attr_i64(root, "evict_until", &m->evict_until, 1, err);
        if (!rc) rc = h5u_write_attr_str(root, "evict_allocator", m->evict_allocator[0] ? m->evict_allocator : "uniform",
                                         err);
        if (!rc && m->evict_definition[0]) rc = h5u_write_attr_str(root, "evict_definition", m->evict_definition, err);
    }
    return rc;
}

static void close_handles(trace_writer *w)
{
    for (int d = 0; d < TRACE_NDSETS; d++)
        if (w->dset[d] >= 0) H5Dclose(w->dset[d]), w->dset[d] = -1;
    if (w->file >= 0) H5Fclose(w->file), w->file = -1;
    if (w->half >= 0) H5Tclose(w->half), w->half = -1;
}

/* A trace that is being thrown away (a write failed: a full disk, a file
 * size limit) must still close: HDF5 1.10 flushes its caches on close and,
 * when that flush fails again, keeps the file and its memory open for good.
 * Pointing the file's descriptor (the default sec2 driver's) at /dev/null
 * lets those last writes succeed into nowhere; the temporary is removed
 * by outfile_abort right after, so nothing of it is lost. */
static void discard_pending_writes(trace_writer *w)
{
    void *handle = NULL;
    if (w->file < 0 || H5Fget_vfd_handle(w->file, H5P_DEFAULT, &handle) < 0 || !handle) return;
    int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (nul < 0) return;
    dup2(nul, *(int *)handle);
    close(nul);
}

static void writer_free(trace_writer *w)
{
    close_handles(w);
    free(w->half_buf);
    free(w);
}

/* File access with HDF5's metadata cache held at 1-4 MiB (the default adapts
 * up to 32 MiB): the chunk index of a long trace
 * grows with T, and a capture with eviction inside the run must keep its
 * memory flat in T. The format on disk is unchanged. */
static hid_t bounded_metadata_fapl(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5AC_cache_config_t mdc;
    memset(&mdc, 0, sizeof mdc);
    mdc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    if (fapl < 0 || H5Pget_mdc_config(fapl, &mdc) < 0) return fapl;
    mdc.set_initial_size = 1;
    mdc.initial_size = (size_t)1 << 20;
    mdc.min_size = (size_t)1 << 20;
    mdc.max_size = (size_t)4 << 20;
    if (H5Pset_mdc_config(fapl, &mdc) < 0) { /* keep HDF5's defaults rather than fail a capture */
        H5Pclose(fapl);
        fapl = H5Pcreate(H5P_FILE_ACCESS);
    }
    return fapl;
}

int trace_create(const char *path, const trace_meta *meta, const trace_create_opts *opts,
                 trace_writer **out, kv_err *err)
{
    *out = NULL;
    h5u_quiet();
    trace_meta m = *meta;
    m.schema_major = TRACE_SCHEMA_MAJOR;
    m.schema_minor = TRACE_SCHEMA_MINOR;
    m.storage = opts->storage;
    int rc = trace_meta_check(&m, path, false, err);
    if (rc) {
        err->code = KV_EUSAGE; /* a bad meta is the caller's mistake, not a bad file */
        return KV_EUSAGE;
    }
    if (opts->deflate < 0 || opts->deflate > 9)
        return kv_fail(err, KV_EUSAGE, "%s: deflate level %d is not in 0..9", path, opts->deflate);
    if (opts->want[TRACE_EVICT_RETAINED] != opts->want[TRACE_EVICT_STEP_END])
        return kv_fail(err, KV_EUSAGE, "%s: /evict/retained and /evict/step_end go together", path);
    if (opts->want[TRACE_EVICT_RETAINED] && strcmp(m.capture_mode, "evict") != 0)
        return kv_fail(err, KV_EUSAGE, "%s: /evict datasets are for capture_mode=evict only", path);
    if (opts->want[TRACE_COLSUM] && strcmp(m.capture_mode, "full") != 0)
        return kv_fail(err, KV_EUSAGE, "%s: /attention/colsum is for capture_mode=full only", path);
    if (opts->want[TRACE_KVZIP] && strcmp(m.capture_mode, "full") != 0)
        return kv_fail(err, KV_EUSAGE, "%s: /attention/kvzip is for capture_mode=full only", path);
    if (opts->want[TRACE_ATTN_OUT] != opts->want[TRACE_ATTN_LSE])
        return kv_fail(err, KV_EUSAGE, "%s: /attention/out and /attention/lse go together", path);
    if (opts->want[TRACE_ATTN_OUT] && strcmp(m.capture_mode, "full") != 0)
        return kv_fail(err, KV_EUSAGE, "%s: /attention/out and /attention/lse are for capture_mode=full only", path);
    if (opts->want[TRACE_ATTN_MAX] && !opts->want[TRACE_ATTN_LSE])
        return kv_fail(err, KV_EUSAGE, "%s: /attention/max goes with /attention/lse", path);

    trace_writer *w = kv_calloc(1, sizeof *w, "trace writer", err);
    if (!w) return err->code;
    w->meta = m;
    w->meta.prompt_text = w->meta.prompt_chat = NULL; /* written once, at creation: the caller's pointer is not kept */
    w->meta.wo = NULL;          /* the same */
    w->meta.spans = NULL, w->meta.n_spans = 0;
    w->opts = *opts;
    w->file = -1;
    for (int d = 0; d < TRACE_NDSETS; d++) w->dset[d] = -1;
    w->half = h5u_half_type();
    if (w->half < 0) {
        free(w);
        return kv_fail(err, KV_EFAIL, "cannot define the float16 HDF5 type");
    }
    if ((rc = outfile_begin(&w->out, path, opts->force, err))) {
        writer_free(w);
        return rc;
    }

    /* No object timestamps anywhere, so equal inputs give equal files. */
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = bounded_metadata_fapl();
    if (fcpl >= 0 && fapl >= 0 && H5Pset_obj_track_times(fcpl, 0) >= 0)
        w->file = H5Fcreate(w->out.tmp_path, H5F_ACC_TRUNC, fcpl, fapl);
    if (fcpl >= 0) H5Pclose(fcpl);
    if (fapl >= 0) H5Pclose(fapl);
    if (w->file < 0) {
        rc = kv_fail(err, KV_EFAIL, "%s: cannot create the file", path);
        trace_abort(w);
        return rc;
    }
    rc = write_root_attrs(w, err);
    if (!rc && m.prompt_text) rc = trace_prompt_text_write(w->file, m.prompt_text, path, err);
    if (!rc && m.prompt_chat) rc = trace_prompt_chat_write(w->file, m.prompt_chat, path, err);
    if (!rc && m.wo) rc = trace_wo_write(w->file, &m, path, err);
    if (!rc && m.spans) rc = trace_spans_write(w->file, &m, path, err);
    if (!rc && opts->annotate) rc = opts->annotate(w->file, opts->annotate_ctx, err);
    for (int d = 0; !rc && d < TRACE_NDSETS; d++)
        if (trace_spec((trace_dset)d)->required || opts->want[d]) rc = create_dset(w, (trace_dset)d, err);
    if (rc) {
        trace_abort(w);
        return rc;
    }
    *out = w;
    return KV_OK;
}

/* Grows the T axis (or axes) of d to at least `t_end`. */
static int ensure_extent(trace_writer *w, trace_dset d, int64_t t_end, kv_err *err)
{
    if (t_end <= w->extent[d]) return KV_OK;
    const trace_dset_spec *s = trace_spec(d);
    hsize_t dims[4];
    int64_t want[4];
    trace_expected_dims(&w->meta, d, t_end, want);
    for (int a = 0; a < s->rank; a++) dims[a] = (hsize_t)want[a];
    if (H5Dset_extent(w->dset[d], dims) < 0)
        return kv_fail(err, KV_EFAIL, "%s: cannot extend %s to %lld tokens", w->out.final_path,
                       s->path, (long long)t_end);
    w->extent[d] = t_end;
    return KV_OK;
}

/* Writes the hyperslab [start, start+count) of d from `buf` in memory type `mtype`. */
static int write_slab(trace_writer *w, trace_dset d, const hsize_t *start, const hsize_t *count,
                      hid_t mtype, const void *buf, kv_err *err)
{
    const trace_dset_spec *s = trace_spec(d);
    if (!h5u_slab_io(w->dset[d], s->rank, start, count, mtype, (void *)buf, true)) return kv_fail(err, KV_EFAIL, "%s: cannot write %s", w->out.final_path, s->path);
    return KV_OK;
}

static int check_piece(const trace_writer *w, trace_dset d, int64_t t0, int64_t n, kv_err *err)
{
    if (!is_created(w, d))
        return kv_fail(err, KV_EFAIL, "%s: dataset %s was not requested at creation",
                       w->out.final_path, trace_dset_path(d));
    if (t0 < 0 || n < 1 || t0 > TRACE_MAX_TOKENS - n)
        return kv_fail(err, KV_EFAIL, "%s: bad row range [%lld, +%lld) for %s", w->out.final_path,
                       (long long)t0, (long long)n, trace_dset_path(d));
    return KV_OK;
}

int trace_write_tokens(trace_writer *w, int64_t t0, int64_t n, const int32_t *tokens, kv_err *err)
{
    int rc = check_piece(w, TRACE_TOKENS, t0, n, err);
    for (int64_t i = 0; !rc && i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= w->meta.vocab_size)
            rc = kv_fail(err, KV_EFAIL, "%s: token id %d at position %lld is outside the vocabulary",
                         w->out.final_path, tokens[i], (long long)(t0 + i));
    if (rc || (rc = ensure_extent(w, TRACE_TOKENS, t0 + n, err))) return rc;
    hsize_t start = (hsize_t)t0, count = (hsize_t)n;
    return write_slab(w, TRACE_TOKENS, &start, &count, H5T_NATIVE_INT32, tokens, err);
}

int trace_write_rows(trace_writer *w, trace_dset d, int64_t layer, int64_t head, int64_t t0,
                     int64_t n, const float *rows, kv_err *err)
{
    int rc = check_piece(w, d, t0, n, err);
    if (rc) return rc;
    const trace_dset_spec *s = trace_spec(d);
    if (s->elem == ELEM_TOKEN)
        return kv_fail(err, KV_EFAIL, "%s: %s holds integers, not rows of floats", w->out.final_path,
                       s->path);
    const trace_meta *m = &w->meta;
    bool per_head = s->rank >= 3;
    int64_t n_heads = d == TRACE_KEYS || d == TRACE_VALUES ? m->n_kv_heads : m->n_heads;
    if (per_head ? (layer < 0 || layer >= m->n_layers || head < 0 || head >= n_heads)
                 : (layer != 0 || head != 0))
        return kv_fail(err, KV_EFAIL, "%s: (layer %lld, head %lld) is outside %s", w->out.final_path,
                       (long long)layer, (long long)head, s->path);
    if ((rc = ensure_extent(w, d, t0 + n, err))) return rc;

    int64_t width = trace_row_width(m, d, t0 + n);
    hsize_t start[4] = {0}, count[4] = {0};
    if (per_head) {
        start[0] = (hsize_t)layer, start[1] = (hsize_t)head, start[2] = (hsize_t)t0;
        count[0] = 1, count[1] = 1, count[2] = (hsize_t)n, count[3] = (hsize_t)width;
    } else {
        start[0] = (hsize_t)t0;
        count[0] = (hsize_t)n, count[1] = (hsize_t)width;
    }
    if (!(s->elem == ELEM_STORAGE && m->storage == TRACE_F16))
        return write_slab(w, d, start, count, H5T_NATIVE_FLOAT, rows, err);

    size_t total = (size_t)n * (size_t)width;
    if (total > w->half_cap) {
        kv_half *buf = realloc(w->half_buf, total * sizeof *buf);
        if (!buf) return kv_fail(err, KV_EFAIL, "float16 conversion buffer: out of memory");
        w->half_buf = buf, w->half_cap = total;
    }
    half_from_float_array(rows, w->half_buf, total);
    return write_slab(w, d, start, count, w->half, w->half_buf, err);
}

int trace_write_retained(trace_writer *w, int64_t step, int64_t step_end, const int32_t *pos, kv_err *err)
{
    const trace_meta *m = &w->meta;
    if (!is_created(w, TRACE_EVICT_RETAINED))
        return kv_fail(err, KV_EFAIL, "%s: /evict/retained was not requested at creation", w->out.final_path);
    if (step != w->extent[TRACE_EVICT_RETAINED] || step_end < 0 || step_end > INT32_MAX)
        return kv_fail(err, KV_EFAIL, "%s: snapshot %lld (ending at %lld) out of order", w->out.final_path,
                       (long long)step, (long long)step_end);
    hsize_t dims[4] = {(hsize_t)step + 1, (hsize_t)m->n_layers, (hsize_t)m->n_kv_heads, (hsize_t)retained_width(m)};
    if (H5Dset_extent(w->dset[TRACE_EVICT_RETAINED], dims) < 0 || H5Dset_extent(w->dset[TRACE_EVICT_STEP_END], dims) < 0)
        return kv_fail(err, KV_EFAIL, "%s: cannot extend /evict datasets", w->out.final_path);
    w->extent[TRACE_EVICT_RETAINED] = w->extent[TRACE_EVICT_STEP_END] = step + 1;
    hsize_t start[4] = {(hsize_t)step, 0, 0, 0};
    int32_t end = (int32_t)step_end;
    hsize_t count[4] = {1, dims[1], dims[2], dims[3]}, one = 1;
    int rc = write_slab(w, TRACE_EVICT_RETAINED, start, count, H5T_NATIVE_INT32, pos, err);
    if (!rc) rc = write_slab(w, TRACE_EVICT_STEP_END, start, &one, H5T_NATIVE_INT32, &end, err);
    return rc;
}

int trace_finish(trace_writer *w, kv_err *err)
{
    int64_t T = w->extent[TRACE_TOKENS];
    int rc = KV_OK;
    if (T < 1) rc = kv_fail(err, KV_EFAIL, "%s: no tokens were written", w->out.final_path);
    if (!rc && w->extent[TRACE_EVICT_RETAINED] != w->extent[TRACE_EVICT_STEP_END])
        rc = kv_fail(err, KV_EFAIL, "%s: /evict/retained has %lld snapshots but /evict/step_end %lld",
                     w->out.final_path, (long long)w->extent[TRACE_EVICT_RETAINED],
                     (long long)w->extent[TRACE_EVICT_STEP_END]);
    for (int d = 0; !rc && d < TRACE_NDSETS; d++) {
        if (d == TRACE_EVICT_RETAINED || d == TRACE_EVICT_STEP_END) continue; /* along S, not T */
        if (is_created(w, (trace_dset)d) && w->extent[d] != T)
            rc = kv_fail(err, KV_EFAIL, "%s: %s has %lld tokens but /tokens has %lld",
                         w->out.final_path, trace_dset_path((trace_dset)d),
                         (long long)w->extent[d], (long long)T);
    }
    if (!rc && (w->meta.prompt_len < 1 || w->meta.prompt_len > T))
        rc = kv_fail(err, KV_EFAIL, "%s: prompt_len %lld is not within the %lld tokens written",
                     w->out.final_path, (long long)w->meta.prompt_len, (long long)T);
    if (!rc) rc = h5u_write_attr_i64(w->file, "n_tokens", &T, 1, err);
    if (!rc && H5Fflush(w->file, H5F_SCOPE_LOCAL) < 0)
        rc = kv_fail(err, KV_EFAIL, "%s: cannot flush the file", w->out.final_path);
    if (rc) discard_pending_writes(w);
    close_handles(w);
    if (!rc) rc = outfile_commit(&w->out, err);
    else outfile_abort(&w->out);
    writer_free(w);
    return rc;
}

void trace_abort(trace_writer *w)
{
    if (!w) return;
    discard_pending_writes(w);
    close_handles(w);
    outfile_abort(&w->out);
    writer_free(w);
}
