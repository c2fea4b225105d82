/* features_out: the feature file (docs/features.md): HDF5 with one group a
 * trace and chunked, deflated, extendible datasets appended a block at a
 * time from the streams' spools, or the same rows as CSV (--csv). The file
 * is written under a temporary name and put in place only when whole. */
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5util.h"
#include "core/outfile.h"
#include "core/version.h"
#include "search/features.h"

enum { BLOCK = 4096 };   /* rows per append and per HDF5 chunk */

/* The per-row datasets after `features`: name, file and memory types, element size. */
enum { D_FEATURES, D_STEP, D_LAYER, D_KV_HEAD, D_POSITION, D_FUTURE, D_OKEEP, D_AGE, D_DKEEP, N_DSETS };
static const char *const DSET_NAMES[N_DSETS] = {"features", "step", "layer", "kv_head", "position",
                                                "future_attn", "oracle_keep", "age", "driver_keep"};

struct feat_out {
    const feat_opts *o;
    kv_outfile of;
    hid_t file, traces;   /* HDF5 */
    FILE *csv;
    int F;
    /* one block of rows, column by column */
    float *feat, *fut;
    int32_t *i32[5];      /* step, layer, kv_head, position, age */
    uint8_t *okeep, *dkeep;
    unsigned char *rec;
};

static int fail_h5(const char *path, const char *what, kv_err *err)
{
    return kv_fail(err, KV_EFAIL, "%s: cannot write %s", path, what);
}

static int write_names(hid_t obj, const char *name, const feat_cols *c, kv_err *err)
{
    const char *v[FEAT_MAX];
    for (int i = 0; i < c->n; i++) v[i] = c->name[i];
    hsize_t dim = (hsize_t)c->n;
    hid_t t = H5Tcopy(H5T_C_S1), space = H5Screate_simple(1, &dim, NULL);
    bool ok = t >= 0 && space >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 && H5Tset_cset(t, H5T_CSET_UTF8) >= 0;
    hid_t a = ok ? H5Acreate2(obj, name, t, space, H5P_DEFAULT, H5P_DEFAULT) : -1;
    ok = a >= 0 && H5Awrite(a, t, v) >= 0;
    if (a >= 0) H5Aclose(a);
    if (space >= 0) H5Sclose(space);
    if (t >= 0) H5Tclose(t);
    return ok ? KV_OK : kv_fail(err, KV_EFAIL, "cannot write attribute '%s'", name);
}

static int root_attrs(feat_out *f, kv_err *err)
{
    const feat_opts *o = f->o;
    const int64_t ver = FEAT_FORMAT_VERSION, seed = (int64_t)o->seed;
    int rc = h5u_write_attr_str(f->file, "format", FEAT_FORMAT, err);
    if (!rc) rc = h5u_write_attr_i64(f->file, "format_version", &ver, 1, err);
    if (!rc) rc = write_names(f->file, "feature_names", &o->cols, err);
    if (!rc) rc = h5u_write_attr_str(f->file, "driver", o->driver_text, err);
    if (!rc) rc = h5u_write_attr_i64(f->file, "budget", &o->budget, 1, err);
    if (!rc) rc = h5u_write_attr_i64(f->file, "chunk", &o->chunk, 1, err);
    if (!rc) rc = h5u_write_attr_i64(f->file, "seed", &seed, 1, err);
    if (!rc) rc = h5u_write_attr_f64(f->file, "sample_steps", o->sample_steps, err);
    if (!rc) rc = h5u_write_attr_f64(f->file, "sample_candidates", o->sample_candidates, err);
    if (!rc) rc = h5u_write_attr_str(f->file, "kvtrace_version", KVTRACE_VERSION, err);
    if (!rc && o->command) rc = h5u_write_attr_str(f->file, "command", o->command, err);
    if (!rc && o->prov) rc = prov_write_h5(f->file, o->prov, err);
    return rc;
}

static void csv_header(feat_out *f)
{
    fputs("trace,layer,kv_head,step,position", f->csv);
    for (int i = 0; i < f->F; i++)   /* "attn_pooled(32,5)" holds a comma: quoted (RFC 4180) */
        fprintf(f->csv, strchr(f->o->cols.name[i], ',') ? ",\"%s\"" : ",%s", f->o->cols.name[i]);
    fputs(",future_attn,oracle_keep,age\n", f->csv);
}

int feat_out_open(feat_out **out, const feat_opts *o, const char *path, kv_err *err)
{
    feat_out *f = kv_calloc(1, sizeof *f, "features: output", err);
    if (!f) return err->code;
    f->o = o, f->F = o->cols.n, f->file = f->traces = -1, f->of.slot = -1;
    int rc = outfile_begin(&f->of, path, o->force, err);
    const size_t B = BLOCK;
    f->feat = rc ? NULL : kv_calloc(B * (size_t)(f->F + 1), sizeof(float), "features: block", err);
    f->fut = f->feat ? f->feat + B * (size_t)f->F : NULL;
    for (int i = 0; f->feat && i < 5; i++) f->i32[i] = kv_calloc(B, sizeof(int32_t), "features: block", err);
    f->okeep = f->i32[4] ? kv_calloc(B, 2, "features: block", err) : NULL;
    f->dkeep = f->okeep ? f->okeep + B : NULL;
    f->rec = f->okeep ? kv_calloc(1, sizeof(feat_row) + sizeof(float) * (size_t)f->F, "features: row", err) : NULL;
    if (!rc && !f->rec) rc = err->code;
    if (!rc && o->csv) {
        if (!(f->csv = fopen(f->of.tmp_path, "w"))) rc = kv_fail(err, KV_EFAIL, "%s: cannot write", path);
        else csv_header(f);
    } else if (!rc) {
        f->file = H5Fcreate(f->of.tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        if (f->file < 0) rc = kv_fail(err, KV_EFAIL, "%s: cannot write", path);
        if (!rc) rc = root_attrs(f, err);
        if (!rc && (f->traces = H5Gcreate2(f->file, "traces", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0)
            rc = fail_h5(path, "/traces", err);
    }
    *out = f;
    return rc;
}

static hid_t dset_type(int d)
{
    switch (d) {
    case D_FEATURES: case D_FUTURE: return H5T_IEEE_F32LE;
    case D_OKEEP: case D_DKEEP: return H5T_STD_U8LE;
    default: return H5T_STD_I32LE;
    }
}

static hid_t mem_type(int d)
{
    switch (d) {
    case D_FEATURES: case D_FUTURE: return H5T_NATIVE_FLOAT;
    case D_OKEEP: case D_DKEEP: return H5T_NATIVE_UINT8;
    default: return H5T_NATIVE_INT32;
    }
}

/* An empty extendible dataset [0] or [0, F], chunked by BLOCK rows, shuffled and deflated. */
static hid_t make_dset(hid_t g, int d, int F)
{
    const int rank = d == D_FEATURES ? 2 : 1;
    hsize_t dims[2] = {0, (hsize_t)F}, maxd[2] = {H5S_UNLIMITED, (hsize_t)F}, chunk[2] = {BLOCK, (hsize_t)F};
    if (rank == 2 && F * BLOCK > (1 << 20)) chunk[0] = (hsize_t)((1 << 20) / F);
    hid_t space = H5Screate_simple(rank, dims, maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    bool ok = space >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, rank, chunk) >= 0 && H5Pset_shuffle(dcpl) >= 0 &&
              H5Pset_deflate(dcpl, 4) >= 0;
    hid_t ds = ok ? H5Dcreate2(g, DSET_NAMES[d], dset_type(d), space, H5P_DEFAULT, dcpl, H5P_DEFAULT) : -1;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return ds;
}

/* Appends the block's `rows` rows to every dataset (now `at` rows long). */
static bool append(feat_out *f, hid_t *ds, hsize_t at, hsize_t rows)
{
    const void *buf[N_DSETS] = {f->feat, f->i32[0], f->i32[1], f->i32[2], f->i32[3], f->fut, f->okeep, f->i32[4],
                                f->dkeep};
    for (int d = 0; d < N_DSETS; d++) {
        const int rank = d == D_FEATURES ? 2 : 1;
        hsize_t size[2] = {at + rows, (hsize_t)f->F}, start[2] = {at, 0}, count[2] = {rows, (hsize_t)f->F};
        if (H5Dset_extent(ds[d], size) < 0 || !h5u_slab_io(ds[d], rank, start, count, mem_type(d), (void *)buf[d], true))
            return false;
    }
    return true;
}

static void csv_rows(feat_out *f, const char *id, size_t rows)
{
    for (size_t r = 0; r < rows; r++) {
        fprintf(f->csv, "%s,%d,%d,%d,%d", id, (int)f->i32[1][r], (int)f->i32[2][r], (int)f->i32[0][r],
                (int)f->i32[3][r]);
        for (int i = 0; i < f->F; i++) fprintf(f->csv, ",%.9g", (double)f->feat[r * (size_t)f->F + (size_t)i]);
        fprintf(f->csv, ",%.9g,%d,%d\n", (double)f->fut[r], (int)f->okeep[r], (int)f->i32[4][r]);
    }
}

/* Every spool's rows, in order, a block at a time; *n_rows: how many. */
static int copy_rows(feat_out *f, const char *id, feat_sink *s, hid_t *ds, int64_t *n_rows, kv_err *err)
{
    const size_t size = sizeof(feat_row) + sizeof(float) * (size_t)f->F;
    hsize_t at = 0, fill = 0;
    for (int i = 0; i < s->n; i++) {
        FILE *in = s->s[i].f;
        if (fflush(in) != 0 || ferror(in) || fseek(in, 0, SEEK_SET) != 0)
            return kv_fail(err, KV_EFAIL, "features: cannot read back a temporary file");
        while (fread(f->rec, size, 1, in) == 1) {
            feat_row r;
            memcpy(&r, f->rec, sizeof r);
            memcpy(f->feat + fill * (size_t)f->F, f->rec + sizeof r, sizeof(float) * (size_t)f->F);
            f->i32[0][fill] = r.step, f->i32[1][fill] = (int32_t)s->s[i].layer;
            f->i32[2][fill] = (int32_t)s->s[i].kv_head, f->i32[3][fill] = r.position, f->i32[4][fill] = r.age;
            f->fut[fill] = r.future_attn, f->okeep[fill] = r.oracle_keep, f->dkeep[fill] = r.driver_keep;
            if (++fill < BLOCK) continue;
            if (f->csv) csv_rows(f, id, fill);
            else if (!append(f, ds, at, fill)) return fail_h5(f->o->output, "the rows", err);
            at += fill, fill = 0;
        }
        if (ferror(in)) return kv_fail(err, KV_EFAIL, "features: cannot read back a temporary file");
    }
    if (fill && f->csv) csv_rows(f, id, fill);
    else if (fill && !append(f, ds, at, fill)) return fail_h5(f->o->output, "the rows", err);
    *n_rows = (int64_t)(at + fill);
    if (f->csv && ferror(f->csv)) return kv_fail(err, KV_EFAIL, "%s: cannot write (disk full?)", f->o->output);
    return KV_OK;
}

int feat_out_trace(feat_out *f, const study_trace *t, const char *model, const char *sha256, feat_sink *s,
                   kv_err *err)
{
    feat_sink_sort(s);
    int64_t rows = 0;
    if (f->csv) return copy_rows(f, t->id, s, NULL, &rows, err);
    hid_t g = H5Gcreate2(f->traces, t->id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t ds[N_DSETS] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
    int made = 0;
    for (; g >= 0 && made < N_DSETS; made++)
        if ((ds[made] = make_dset(g, made, f->F)) < 0) break;
    int rc = made == N_DSETS ? KV_OK : fail_h5(f->o->output, "a trace's datasets", err);
    if (!rc) rc = write_names(ds[D_FEATURES], "columns", &f->o->cols, err);
    if (!rc) rc = copy_rows(f, t->id, s, ds, &rows, err);
    if (!rc) rc = h5u_write_attr_str(g, "file", t->path, err);
    if (!rc) rc = h5u_write_attr_str(g, "model", model, err);
    if (!rc) rc = h5u_write_attr_str(g, "sha256", sha256, err);
    if (!rc) rc = h5u_write_attr_i64(g, "n_rows", &rows, 1, err);
    for (int d = 0; d < made; d++) H5Dclose(ds[d]);
    if (g >= 0) H5Gclose(g);
    return rc;
}

static void release(feat_out *f)
{
    if (f->traces >= 0) H5Gclose(f->traces);
    for (int i = 0; i < 5; i++) free(f->i32[i]);
    free(f->feat), free(f->okeep), free(f->rec), free(f);
}

int feat_out_close(feat_out *f, kv_err *err)
{
    int rc = KV_OK;
    if (f->csv) rc = fclose(f->csv) == 0 ? KV_OK : kv_fail(err, KV_EFAIL, "%s: cannot write (disk full?)", f->o->output);
    if (f->traces >= 0) H5Gclose(f->traces), f->traces = -1;
    if (f->file >= 0 && H5Fclose(f->file) < 0) rc = fail_h5(f->o->output, "the file (disk full?)", err);
    f->csv = NULL, f->file = -1;
    if (!rc) rc = outfile_commit(&f->of, err);
    if (rc) outfile_abort(&f->of);
    release(f);
    return rc;
}

void feat_out_abort(feat_out *f)
{
    if (!f) return;
    if (f->csv) fclose(f->csv);
    if (f->traces >= 0) H5Gclose(f->traces), f->traces = -1;
    if (f->file >= 0) H5Fclose(f->file);
    outfile_abort(&f->of);
    release(f);
}
