/* fit_scan: the rows of the feature files gathered into eviction steps (contiguous rows of one
 * trace, layer, kv_head and step), each standardised as expr's z() and handed to the caller. */
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "core/h5util.h"
#include "search/fit.h"

enum { BLOCK_ROWS = 8192 };

typedef struct {
    const fit_input *in;
    fit_step_fn fn;
    void *ctx;
    int file;
    char trace[256];
    int64_t n, cap, row0, ordinal;
    int32_t key[3];
    double *x, *raw, *attn;   /* x: standardised in place at the step's end; raw: its copy before */
    int64_t raw_cap;
    uint8_t *keep;
} stepbuf;

/* z() of expr_eval.c: mean = sum/n, population sd, (x - mean)/sd, 0 when sd = 0; in double, in row order. */
static void standardise(double *x, int64_t n, int F)
{
    for (int f = 0; f < F; f++) {
        double sum = 0, sq = 0;
        for (int64_t j = 0; j < n; j++) sum += x[j * F + f];
        const double mean = n ? sum / (double)n : 0;
        for (int64_t j = 0; j < n; j++) sq += (x[j * F + f] - mean) * (x[j * F + f] - mean);
        const double sd = n ? sqrt(sq / (double)n) : 0;
        for (int64_t j = 0; j < n; j++) x[j * F + f] = sd > 0 ? (x[j * F + f] - mean) / sd : 0.0;
    }
}

static int flush(stepbuf *b, kv_err *err)
{
    if (!b->n) return KV_OK;
    const int F = b->in->F;
    if (b->raw_cap < b->cap) {
        double *raw = realloc(b->raw, (size_t)b->cap * (size_t)F * sizeof *raw);
        if (!raw) return kv_fail(err, KV_EFAIL, "out of memory (a step of %lld candidates)", (long long)b->n);
        b->raw = raw, b->raw_cap = b->cap;
    }
    memcpy(b->raw, b->x, (size_t)b->n * (size_t)F * sizeof *b->raw);
    standardise(b->x, b->n, F);
    fit_step s = {.n = b->n, .F = F, .z = b->x, .raw = b->raw, .attn = b->attn, .keep = b->keep, .file = b->file,
                  .trace = b->trace, .row0 = b->row0, .ordinal = b->ordinal};
    int rc = b->fn(b->ctx, &s, err);
    b->n = 0, b->ordinal++;
    return rc;
}

/* One row: a new key (or trace: the caller flushes) ends the step before it. */
static int push(stepbuf *b, const int32_t key[3], int64_t row, const double *feat, double attn, uint8_t keep,
                kv_err *err)
{
    int rc = KV_OK;
    if (b->n && memcmp(key, b->key, sizeof b->key) != 0) rc = flush(b, err);
    if (rc) return rc;
    if (!b->n) memcpy(b->key, key, sizeof b->key), b->row0 = row;
    const int F = b->in->F;
    if (b->n == b->cap) {
        const int64_t cap = b->cap ? 2 * b->cap : 1024;
        double *x = realloc(b->x, (size_t)cap * (size_t)F * sizeof *x), *a = x ? realloc(b->attn, (size_t)cap * sizeof *a) : NULL;
        if (x) b->x = x;
        if (a) b->attn = a;
        uint8_t *k = a ? realloc(b->keep, (size_t)cap) : NULL;
        if (!k) return kv_fail(err, KV_EFAIL, "out of memory (a step of %lld candidates)", (long long)cap);
        b->keep = k, b->cap = cap;
    }
    memcpy(b->x + b->n * F, feat, (size_t)F * sizeof *feat);
    b->attn[b->n] = attn, b->keep[b->n] = keep, b->n++;
    return KV_OK;
}

static int bad_row(const stepbuf *b, int64_t row, const char *what, kv_err *err)
{
    return kv_fail(err, KV_EINPUT, "%s: trace %s row %lld: %s", b->in->files[b->file], b->trace, (long long)row, what);
}

static int check_row(const stepbuf *b, int64_t row, const double *feat, double attn, int64_t keep, kv_err *err)
{
    for (int f = 0; f < b->in->F; f++)
        if (!isfinite(feat[f])) return bad_row(b, row, "a feature is NaN or infinite", err);
    if (!isfinite(attn)) return bad_row(b, row, "future_attn is NaN or infinite", err);
    if (keep != 0 && keep != 1) return bad_row(b, row, "oracle_keep is not 0 or 1", err);
    return KV_OK;
}

typedef struct {
    float *feat, *attn;
    int32_t *layer, *head, *step;
    uint8_t *keep;
} block;

/* False when the rows cannot be read; errno is then ENOMEM when HDF5 ran out of memory (h5util.h). */
static bool read_col(hid_t g, const char *name, hsize_t r0, hsize_t n, hsize_t F, hid_t mt, void *buf)
{
    hid_t ds = H5Dopen(g, name, H5P_DEFAULT);
    const hsize_t start[2] = {r0, 0}, count[2] = {n, F};
    const bool ok = ds >= 0 && h5u_slab_io(ds, F ? 2 : 1, start, count, mt, buf, false);
    const int why = errno;
    if (ds >= 0) H5Dclose(ds);
    errno = ok ? 0 : why;
    return ok;
}

static int h5_trace(stepbuf *b, hid_t g, block *k, kv_err *err)
{
    const int Ff = b->in->file_F[b->file], F = b->in->F;
    hid_t ds = H5Dopen(g, "features", H5P_DEFAULT), sp = H5Dget_space(ds);
    hsize_t d[2];
    H5Sget_simple_extent_dims(sp, d, NULL);
    H5Sclose(sp), H5Dclose(ds);
    int rc = KV_OK;
    double row[FIT_MAX_F];
    for (hsize_t r0 = 0; !rc && r0 < d[0]; r0 += BLOCK_ROWS) {
        const hsize_t n = d[0] - r0 < BLOCK_ROWS ? d[0] - r0 : BLOCK_ROWS;
        if (!read_col(g, "features", r0, n, (hsize_t)Ff, H5T_NATIVE_FLOAT, k->feat) ||
            !read_col(g, "layer", r0, n, 0, H5T_NATIVE_INT32, k->layer) ||
            !read_col(g, "kv_head", r0, n, 0, H5T_NATIVE_INT32, k->head) ||
            !read_col(g, "step", r0, n, 0, H5T_NATIVE_INT32, k->step) ||
            !read_col(g, "future_attn", r0, n, 0, H5T_NATIVE_FLOAT, k->attn) ||
            !read_col(g, "oracle_keep", r0, n, 0, H5T_NATIVE_UINT8, k->keep))
            return errno == ENOMEM ? kv_fail(err, KV_EFAIL, "%s: trace %s: rows %llu..: out of memory",
                                             b->in->files[b->file], b->trace, (unsigned long long)r0)
                                   : kv_fail(err, KV_EINPUT, "%s: trace %s: rows %llu.. unreadable",
                                             b->in->files[b->file], b->trace, (unsigned long long)r0);
        for (hsize_t j = 0; !rc && j < n; j++) {
            for (int f = 0; f < F; f++) row[f] = k->feat[j * (hsize_t)Ff + (hsize_t)b->in->col[b->file][f]];
            const int64_t r = (int64_t)(r0 + j);
            rc = check_row(b, r, row, k->attn[j], k->keep[j], err);
            const int32_t key[3] = {k->layer[j], k->head[j], k->step[j]};
            if (!rc) rc = push(b, key, r, row, k->attn[j], k->keep[j], err);
        }
    }
    return rc ? rc : flush(b, err);
}

static int h5_file(stepbuf *b, const char *path, kv_err *err)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) return kv_fail(err, KV_EINPUT, "%s: cannot open", path);
    hid_t g = H5Gopen(file, "traces", H5P_DEFAULT);
    H5G_info_t gi;
    int rc = g < 0 || H5Gget_info(g, &gi) < 0 ? kv_fail(err, KV_EINPUT, "%s: /traces unreadable", path) : KV_OK;
    const size_t Ff = (size_t)b->in->file_F[b->file];
    block k = {.feat = malloc(BLOCK_ROWS * Ff * sizeof(float)), .attn = malloc(BLOCK_ROWS * sizeof(float)),
               .layer = malloc(BLOCK_ROWS * 4), .head = malloc(BLOCK_ROWS * 4), .step = malloc(BLOCK_ROWS * 4),
               .keep = malloc(BLOCK_ROWS)};
    if (!rc && !(k.feat && k.attn && k.layer && k.head && k.step && k.keep)) rc = kv_fail(err, KV_EFAIL, "out of memory");
    for (hsize_t i = 0; !rc && i < gi.nlinks; i++) {
        H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, b->trace, sizeof b->trace, H5P_DEFAULT);
        if (!fit_trace_used(b->in, b->trace)) continue;
        hid_t t = H5Gopen(g, b->trace, H5P_DEFAULT);
        rc = t < 0 ? kv_fail(err, KV_EINPUT, "%s: /traces/%s unreadable", path, b->trace) : h5_trace(b, t, &k, err);
        if (t >= 0) H5Gclose(t);
    }
    free(k.feat), free(k.attn), free(k.layer), free(k.head), free(k.step), free(k.keep);
    if (g >= 0) H5Gclose(g);
    H5Fclose(file);
    return rc;
}

static int csv_file(stepbuf *b, const char *path, kv_err *err)
{
    csv_table t = {0};
    int rc = fit_csv_open(&t, path, err);
    const int F = b->in->F;
    double row[FIT_MAX_F], attn = 0;
    int64_t r = 0, key[3], keep = 0;
    for (size_t j = 0; !rc && j < t.n_rows; j++, r++) {
        if (j == 0 || strcmp(csv_cell(&t, j, 0), b->trace) != 0) {
            if (j) rc = flush(b, err);
            snprintf(b->trace, sizeof b->trace, "%s", csv_cell(&t, j, 0)), r = 0;
        }
        if (!fit_trace_used(b->in, b->trace)) continue;
        for (int c = 0; !rc && c < 3; c++) rc = csv_int(&t, j, 1 + c, INT32_MIN, INT32_MAX, &key[c], err);
        for (int f = 0; !rc && f < F; f++) rc = csv_double(&t, j, 5 + b->in->col[b->file][f], true, &row[f], err);
        if (!rc) rc = csv_double(&t, j, t.n_cols - 3, true, &attn, err);
        for (int f = 0; f < F; f++) row[f] = (float)row[f];   /* the float32 the 9 digits name, as HDF5 holds it */
        attn = (float)attn;
        if (!rc) rc = csv_int(&t, j, t.n_cols - 2, INT64_MIN, INT64_MAX, &keep, err);
        if (!rc) rc = check_row(b, r, row, attn, keep, err);
        const int32_t k32[3] = {(int32_t)key[0], (int32_t)key[1], (int32_t)key[2]};
        if (!rc) rc = push(b, k32, r, row, attn, (uint8_t)keep, err);
    }
    if (!rc) rc = flush(b, err);
    csv_free(&t);
    return rc;
}

int fit_scan(const fit_input *in, fit_step_fn fn, void *ctx, kv_err *err)
{
    stepbuf b = {.in = in, .fn = fn, .ctx = ctx};
    int rc = KV_OK;
    for (int i = 0; !rc && i < in->n_files; i++) {
        b.file = i, b.n = 0;
        rc = in->csv[i] ? csv_file(&b, in->files[i], err) : h5_file(&b, in->files[i], err);
    }
    free(b.x), free(b.raw), free(b.attn), free(b.keep);
    return rc;
}
