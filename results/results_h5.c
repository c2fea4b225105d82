/* results.h5, written and read with one set of names (see results_h5.h). */
#include "core/fileopen.h"
#include "results/results_h5.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/h5util.h"
#include "results/results_dir.h"

/* The layout's names: the group of runs, a run's attributes and datasets. */
#define RUNS "runs"
#define ATTR_CONFIG "config"
#define ATTR_POLICY "policy"
#define ATTR_PARAMS "params"
#define ATTR_BUDGET "budget"
#define ATTR_CHUNK "chunk"
#define ATTR_ALLOCATOR "allocator"
#define ATTR_FRACTION "budget_fraction"
#define ATTR_TRACE "trace"
#define DSET_RETAINED "retained"
#define DSET_LOGDET "final_logdet"
#define DSET_HEAD_BUDGET "head_budget"
#define DSET_HEAD_MEAN "head_budget_mean"
#define DSET_STEP_CAND "step_candidates"
#define DSET_STEP_KEPT "step_kept"

/* ---- writing ------------------------------------------------------------- */

void results_run_name(int i, int n, char *buf, size_t cap)
{
    unsigned width = 4;
    for (int m = n / 10000; m > 0; m /= 10) width++;
    snprintf(buf, cap, "run%0*d", (int)(width & 15u), i + 1);
}

/* A group under loc, created without times (H5Pset_obj_track_times off). */
static hid_t create_group(hid_t loc, const char *name)
{
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    return g;
}

/* One dataset of a run: name, rank and dims, file and memory types, data. */
typedef struct {
    const char *name;
    int rank;
    hsize_t dims[3];
    hid_t ftype, mtype;
    const void *buf;
} run_dset;

static int write_dsets(hid_t g, const run_dset *ds, int n, const char *name, kv_err *err)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    int rc = KV_OK;
    for (int i = 0; !rc && i < n; i++) {
        hid_t sp = H5Screate_simple(ds[i].rank, ds[i].dims, NULL);
        hid_t d = H5Dcreate2(g, ds[i].name, ds[i].ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (d < 0 || H5Dwrite(d, ds[i].mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds[i].buf) < 0)
            rc = kv_fail(err, KV_EFAIL, RESULTS_FILE_H5 ": cannot write /" RUNS "/%s/%s", name, ds[i].name);
        if (d >= 0) H5Dclose(d);
        H5Sclose(sp);
    }
    H5Pclose(dcpl);
    return rc;
}

/* The datasets of one run into its group g: retained cut to its width
 * (int32), head_budget counted from it when not given, head_budget_mean NaN
 * when not given, the rest as given. */
static int write_datasets(hid_t g, const results_run_view *run, int64_t L, int64_t K, const char *name, kv_err *err)
{
    const size_t LK = (size_t)(L * K), W = (size_t)run->width, n = LK * W;
    const size_t stride = run->stride ? (size_t)run->stride : W;
    int32_t *ret = malloc(sizeof(int32_t) * (n + LK));
    double *mean = malloc(sizeof(double) * LK);
    if (!ret || !mean) {
        free(ret), free(mean);
        return kv_fail(err, KV_EFAIL, RESULTS_FILE_H5 ": out of memory");
    }
    int32_t *head = ret + n;
    for (size_t i = 0; i < n; i++) ret[i] = (int32_t)run->retained[i / W * stride + i % W];
    for (size_t i = 0; i < LK; i++) {
        int32_t k = 0;
        while (k < (int32_t)W && ret[i * W + (size_t)k] != RESULTS_PAD) k++;
        head[i] = run->head_budget ? (int32_t)run->head_budget[i] : k;
        mean[i] = run->head_mean ? run->head_mean[i] : NAN;
    }
    const hsize_t l = (hsize_t)L, k = (hsize_t)K, s = (hsize_t)run->n_steps;
    const run_dset ds[6] = {
        {DSET_RETAINED, 3, {l, k, (hsize_t)W}, H5T_STD_I32LE, H5T_NATIVE_INT32, ret},
        {DSET_LOGDET, 2, {l, k}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, run->final_logdet},
        {DSET_HEAD_BUDGET, 2, {l, k}, H5T_STD_I32LE, H5T_NATIVE_INT32, head},
        {DSET_HEAD_MEAN, 2, {l, k}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, mean},
        {DSET_STEP_CAND, 3, {l, k, s}, H5T_STD_I32LE, H5T_NATIVE_INT32, run->step_cand},
        {DSET_STEP_KEPT, 3, {l, k, s}, H5T_STD_I32LE, H5T_NATIVE_INT32, run->step_kept},
    };
    int rc = write_dsets(g, ds, run->step_cand && run->n_steps > 0 ? 6 : 4, name, err);
    free(ret), free(mean);
    return rc;
}

static int write_run(hid_t runs, const results_run_view *run, const char *name, int64_t L, int64_t K, kv_err *err)
{
    char config[1024];
    results_config_label(run->policy, run->params, config, sizeof config);
    hid_t g = create_group(runs, name);
    if (g < 0) return kv_fail(err, KV_EFAIL, RESULTS_FILE_H5 ": cannot create group /" RUNS "/%s (%s)", name, config);
    int rc = h5u_write_attr_str(g, ATTR_CONFIG, config, err);
    if (!rc) rc = h5u_write_attr_str(g, ATTR_POLICY, run->policy, err);
    if (!rc) rc = h5u_write_attr_str(g, ATTR_PARAMS, run->params, err);
    if (!rc && run->definition) rc = h5u_write_attr_str(g, "definition", run->definition, err);
    if (!rc) rc = h5u_write_attr_i64(g, ATTR_BUDGET, &run->budget, 1, err);
    if (!rc) rc = h5u_write_attr_i64(g, ATTR_CHUNK, &run->chunk, 1, err);
    if (!rc && run->trace) rc = h5u_write_attr_str(g, ATTR_TRACE, run->trace, err);
    if (!rc) rc = h5u_write_attr_str(g, ATTR_ALLOCATOR, run->allocator ? run->allocator : RESULTS_ALLOC_NONE, err);
    if (!rc && run->budget_fraction > 0) rc = h5u_write_attr_f64(g, ATTR_FRACTION, run->budget_fraction, err);
    if (!rc) rc = write_datasets(g, run, run->L > 0 ? run->L : L, run->K > 0 ? run->K : K, name, err);
    H5Gclose(g);
    return rc;
}

/* What made the file, at the root: the command, the trace and its sha256 (a study: its index and the
 * index's sha256, and how many traces; every trace's path and sha256 are in /provenance), the record. */
static int write_origin(hid_t f, const prov_record *prov, kv_err *err)
{
    const prov_input *tr = prov_find_input(prov, "trace"), *index = prov_find_input(prov, "index");
    int64_t traces = 0;
    for (int i = 0; i < prov->n_inputs; i++) traces += strcmp(prov->inputs[i].role, "trace") == 0;
    int rc = h5u_write_attr_str(f, "command", prov->command ? prov->command : "", err);
    if (index || traces > 1) {
        if (!rc && index) rc = h5u_write_attr_str(f, "study_index", index->path, err);
        if (!rc && index) rc = h5u_write_attr_str(f, "study_index_sha256", index->sha256, err);
        if (!rc) rc = h5u_write_attr_i64(f, "n_traces", &traces, 1, err);
    } else if (tr) {
        if (!rc) rc = h5u_write_attr_str(f, "trace_path", tr->path, err);
        if (!rc) rc = h5u_write_attr_str(f, "trace_sha256", tr->sha256, err);
    }
    return rc ? rc : prov_write_h5(f, prov, err);
}

/* /index: one row per run in run order, its group name and the attributes that say what it is, as one
 * compound table (pandas.DataFrame(f["index"][()]) is the list of runs; docs/outputs.md). */
typedef struct {   /* the fields in the table's order (h5py orders a compound's fields by offset) */
    const char *run, *config, *policy, *params, *allocator;
    int64_t budget;
    double budget_fraction;
    int64_t chunk;
    const char *trace;
} index_row;

static int write_index(hid_t f, const results_run_view *runs, int n, kv_err *err)
{
    index_row *rows = kv_calloc((size_t)(n > 0 ? n : 1), sizeof *rows, "results index", err);
    char (*names)[32] = rows ? kv_calloc((size_t)(n > 0 ? n : 1), sizeof *names, "results index", err) : NULL;
    char (*configs)[648] = names ? kv_calloc((size_t)(n > 0 ? n : 1), sizeof *configs, "results index", err) : NULL;
    if (!configs) {
        free(rows), free(names);
        return err->code;
    }
    for (int i = 0; i < n; i++) {
        results_run_name(i, n, names[i], sizeof names[i]);
        results_config_label(runs[i].policy, runs[i].params, configs[i], sizeof configs[i]);
        rows[i] = (index_row){names[i], configs[i], runs[i].policy, runs[i].params,
                              runs[i].allocator ? runs[i].allocator : RESULTS_ALLOC_NONE, runs[i].budget,
                              runs[i].budget_fraction > 0 ? runs[i].budget_fraction : NAN, runs[i].chunk,
                              runs[i].trace ? runs[i].trace : ""};
    }
    hid_t str = H5Tcopy(H5T_C_S1), t = H5Tcreate(H5T_COMPOUND, sizeof(index_row));
    H5Tset_size(str, H5T_VARIABLE);
    H5Tset_cset(str, H5T_CSET_UTF8);
    H5Tinsert(t, "run", HOFFSET(index_row, run), str);
    H5Tinsert(t, "config", HOFFSET(index_row, config), str);
    H5Tinsert(t, "policy", HOFFSET(index_row, policy), str);
    H5Tinsert(t, "params", HOFFSET(index_row, params), str);
    H5Tinsert(t, "allocator", HOFFSET(index_row, allocator), str);
    H5Tinsert(t, "budget", HOFFSET(index_row, budget), H5T_NATIVE_INT64);
    H5Tinsert(t, "budget_fraction", HOFFSET(index_row, budget_fraction), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "chunk", HOFFSET(index_row, chunk), H5T_NATIVE_INT64);
    H5Tinsert(t, "trace", HOFFSET(index_row, trace), str);
    const hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, "index", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = d < 0 || (n > 0 && H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0)
                 ? kv_fail(err, KV_EFAIL, "results.h5: cannot write /index")
                 : KV_OK;
    if (!rc) rc = h5u_write_attr_str(d, "description", "one row per run in run order: its group under /runs and "
                                     "what it is (config, policy, params, allocator, budget, budget_fraction (NaN: "
                                     "given as N), chunk, trace)", err);
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp), H5Tclose(t), H5Tclose(str);
    free(rows), free(names), free(configs);
    return rc;
}

int results_write(const char *dir, int64_t L, int64_t K, const results_run_view *runs, int n,
                  const prov_record *prov, kv_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" RESULTS_FILE_H5, dir);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_obj_track_times(fcpl, 0);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    H5Pclose(fcpl);
    if (f < 0) return kv_fail(err, KV_EFAIL, "%s: cannot create", path);
    int rc = prov ? write_origin(f, prov, err) : KV_OK;
    hid_t g = rc ? -1 : create_group(f, RUNS);
    if (!rc && g < 0) rc = kv_fail(err, KV_EFAIL, "%s: cannot create /" RUNS, path);
    for (int i = 0; !rc && i < n; i++) {
        char name[32];
        results_run_name(i, n, name, sizeof name);
        rc = write_run(g, &runs[i], name, L, K, err);
    }
    if (g >= 0) H5Gclose(g);
    if (!rc) rc = write_index(f, runs, n, err);
    if (H5Fclose(f) < 0 && !rc) rc = kv_fail(err, KV_EFAIL, "%s: cannot close", path);
    return rc;
}

/* ---- reading ------------------------------------------------------------- */

/* Opens /runs/NAME/DSET and checks its element kind and rank; dims[rank] out.
 * `want_int`: an integer type; else any float type. Returns the id or -1. */
static hid_t open_checked(hid_t g, const char *where, const char *dset, bool want_int, int rank, hsize_t *dims,
                          kv_err *err)
{
    if (!h5u_exists(g, dset)) {
        kv_fail(err, KV_EINPUT, "%s/%s: missing", where, dset);
        return -1;
    }
    hid_t d = H5Dopen2(g, dset, H5P_DEFAULT);
    if (d < 0) {
        kv_fail(err, KV_EINPUT, "%s/%s: not a readable dataset", where, dset);
        return -1;
    }
    hid_t type = H5Dget_type(d);
    h5u_kind k = type < 0 ? H5U_OTHER : h5u_classify(type);
    if (type >= 0) H5Tclose(type);
    bool kind_ok = want_int ? k == H5U_INT : (k == H5U_F16 || k == H5U_F32 || k == H5U_F64);
    hid_t sp = kind_ok ? H5Dget_space(d) : -1;
    int got = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    if (got == rank) H5Sget_simple_extent_dims(sp, dims, NULL);
    if (sp >= 0) H5Sclose(sp);
    if (!kind_ok)
        kv_fail(err, KV_EINPUT, "%s/%s: element type %s, expected %s", where, dset, h5u_kind_name(k),
                want_int ? "an integer type" : "a float type");
    else if (got != rank)
        kv_fail(err, KV_EINPUT, "%s/%s: rank %d, expected %d", where, dset, got, rank);
    if (!kind_ok || got != rank) {
        H5Dclose(d);
        return -1;
    }
    return d;
}

/* Each row of retained [L][K][W]: strictly increasing positions in [0, T), then only −1. */
static int check_rows(results_run *r, int64_t L, int64_t K, int64_t T, const char *where, kv_err *err)
{
    const int64_t W = r->width;
    for (int64_t l = 0; l < L; l++)
        for (int64_t g = 0; g < K; g++) {
            const int32_t *row = r->retained + (l * K + g) * W;
            int64_t n = 0;
            while (n < W && row[n] != RESULTS_PAD) n++;
            for (int64_t i = 0; i < W; i++) {
                const char *what = NULL;
                if (i >= n && row[i] != RESULTS_PAD) what = "follows the -1 padding";
                else if (i < n && (row[i] < 0 || row[i] >= T)) what = "is outside [0, T)";
                else if (i < n && i > 0 && row[i] == row[i - 1]) what = "repeats the previous position";
                else if (i < n && i > 0 && row[i] < row[i - 1]) what = "is smaller than the previous one (not sorted)";
                if (what)
                    return kv_fail(err, KV_EINPUT,
                                   "%s/" DSET_RETAINED ": position %d at [%lld, %lld, %lld] %s (T = %lld)", where,
                                   (int)row[i], (long long)l, (long long)g, (long long)i, what, (long long)T);
            }
            if (n == 0)
                return kv_fail(err, KV_EINPUT, "%s/" DSET_RETAINED ": [%lld, %lld] holds no position", where,
                               (long long)l, (long long)g);
            if (n > r->budget && n != T && strcmp(r->allocator, RESULTS_ALLOC_NONE) == 0) /* only `full` keeps more: all T */
                return kv_fail(err, KV_EINPUT, "%s/" DSET_RETAINED ": [%lld, %lld] keeps %lld positions, more than "
                               "the budget %lld and fewer than all T = %lld", where, (long long)l, (long long)g,
                               (long long)n, (long long)r->budget, (long long)T);
            r->n_kept[l * K + g] = n;
        }
    return KV_OK;
}

static int read_retained(hid_t g, results_run *r, int64_t L, int64_t K, int64_t T, const char *where, kv_err *err)
{
    hsize_t dims[3];
    hid_t d = open_checked(g, where, DSET_RETAINED, true, 3, dims, err);
    if (d < 0) return err->code;
    int rc = KV_OK;
    if (dims[0] != (hsize_t)L || dims[1] != (hsize_t)K || dims[2] < 1 || dims[2] > (hsize_t)T)
        rc = kv_fail(err, KV_EINPUT, "%s/" DSET_RETAINED ": shape [%llu, %llu, %llu], expected [%lld, %lld, N'] with "
                     "1 <= N' <= T = %lld", where, (unsigned long long)dims[0], (unsigned long long)dims[1],
                     (unsigned long long)dims[2], (long long)L, (long long)K, (long long)T);
    if (!rc) {
        r->width = (int64_t)dims[2];
        r->retained = kv_calloc((size_t)(L * K * r->width), sizeof *r->retained, "results retained", err);
        r->n_kept = kv_calloc((size_t)(L * K), sizeof *r->n_kept, "results retained", err);
        if (!r->retained || !r->n_kept) rc = err->code;
    }
    if (!rc && H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, r->retained) < 0)
        rc = kv_fail(err, KV_EINPUT, "%s/" DSET_RETAINED ": cannot read (corrupt file, or values beyond int32)", where);
    H5Dclose(d);
    return rc ? rc : check_rows(r, L, K, T, where, err);
}

/* A float [L][K] dataset of run group g into out (allocated by the caller). */
static int read_lk(hid_t g, const char *where, const char *dset, int64_t L, int64_t K, double *out, kv_err *err)
{
    hsize_t dims[2];
    hid_t d = open_checked(g, where, dset, false, 2, dims, err);
    if (d < 0) return err->code;
    int rc = KV_OK;
    if (dims[0] != (hsize_t)L || dims[1] != (hsize_t)K)
        rc = kv_fail(err, KV_EINPUT, "%s/%s: shape [%llu, %llu], expected [%lld, %lld]", where, dset,
                     (unsigned long long)dims[0], (unsigned long long)dims[1], (long long)L, (long long)K);
    if (!rc && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
        rc = kv_fail(err, KV_EINPUT, "%s/%s: cannot read (corrupt file)", where, dset);
    H5Dclose(d);
    return rc;
}

static int read_logdet(hid_t g, results_run *r, int64_t L, int64_t K, const char *where, kv_err *err)
{
    if (!(r->final_logdet = kv_calloc((size_t)(L * K), sizeof(double), "results final_logdet", err))) return err->code;
    int rc = read_lk(g, where, DSET_LOGDET, L, K, r->final_logdet, err);
    for (int64_t i = 0; !rc && i < L * K; i++)
        /* log det(K^T K / n + 1e-6 I) of unit keys: the eigenvalues sum to 1, so it is at most
         * D log(1 + 1e-6) < 1 and at least D log(1e-6) > -1e6 for any D analyze reads */
        if (!(r->final_logdet[i] <= 1 && r->final_logdet[i] >= -1e6))
            rc = kv_fail(err, KV_EINPUT, "%s/" DSET_LOGDET ": [%lld, %lld] = %g is not a log-det of unit keys "
                         "(finite, in [-1e6, 1])", where, (long long)(i / K), (long long)(i % K), r->final_logdet[i]);
    return rc;
}

/* head_budget_mean [L][K] when present (older files: all NaN): NaN or in [1, T]. */
static int read_head_mean(hid_t g, results_run *r, int64_t L, int64_t K, int64_t T, const char *where, kv_err *err)
{
    if (!(r->head_mean = kv_calloc((size_t)(L * K), sizeof(double), "results head_budget_mean", err))) return err->code;
    for (int64_t i = 0; i < L * K; i++) r->head_mean[i] = NAN;
    if (!h5u_exists(g, DSET_HEAD_MEAN)) return KV_OK;
    int rc = read_lk(g, where, DSET_HEAD_MEAN, L, K, r->head_mean, err);
    for (int64_t i = 0; !rc && i < L * K; i++)
        if (!isnan(r->head_mean[i]) && !(r->head_mean[i] >= 1 && r->head_mean[i] <= (double)T))
            rc = kv_fail(err, KV_EINPUT, "%s/" DSET_HEAD_MEAN ": [%lld, %lld] = %g is not a row count in [1, T = %lld] "
                         "(nor NaN)", where, (long long)(i / K), (long long)(i % K), r->head_mean[i], (long long)T);
    return rc;
}

/* @trace and @chunk (optional: "" and 0 when absent), and whether `sel` takes the run. */
static int read_key(hid_t g, results_run *r, const char *where, const results_select *sel, bool *take, kv_err *err)
{
    bool has_trace = false, has_chunk = false;
    int rc = h5u_read_attr_str(g, where, ATTR_TRACE, r->trace, sizeof r->trace, &has_trace, err);
    if (!rc) rc = h5u_read_attr_i64(g, where, ATTR_CHUNK, &r->chunk, 1, &has_chunk, err);
    if (!has_trace) r->trace[0] = '\0';
    if (!has_chunk) r->chunk = 0;
    *take = !sel || ((!sel->trace || strcmp(sel->trace, r->trace) == 0) && (!sel->chunk || sel->chunk == r->chunk));
    return rc;
}

static int read_run(hid_t runs, results_run *r, int64_t L, int64_t K, int64_t T, const char *path,
                    const results_select *sel, bool *take, kv_err *err)
{
    char where[4800];
    snprintf(where, sizeof where, "%s: /" RUNS "/%s", path, r->name);
    H5O_info_t info;
    if (H5Oget_info_by_name(runs, r->name, &info, H5P_DEFAULT) < 0 || info.type != H5O_TYPE_GROUP)
        return kv_fail(err, KV_EINPUT, "%s: not a group", where);
    hid_t g = H5Gopen2(runs, r->name, H5P_DEFAULT);
    if (g < 0) return kv_fail(err, KV_EINPUT, "%s: cannot open the group", where);
    int rc = read_key(g, r, where, sel, take, err);
    if (!rc && !*take) {
        H5Gclose(g);
        return KV_OK;
    }
    if (!rc) rc = h5u_read_attr_str(g, where, ATTR_POLICY, r->policy, sizeof r->policy, NULL, err);
    if (!rc) rc = h5u_read_attr_str(g, where, ATTR_PARAMS, r->params, sizeof r->params, NULL, err);
    if (!rc) rc = h5u_read_attr_i64(g, where, ATTR_BUDGET, &r->budget, 1, NULL, err);
    bool has_alloc = false;
    if (!rc) rc = h5u_read_attr_str(g, where, ATTR_ALLOCATOR, r->allocator, sizeof r->allocator, &has_alloc, err);
    if (!rc && !has_alloc) snprintf(r->allocator, sizeof r->allocator, RESULTS_ALLOC_NONE);   /* before allocators */
    bool has_frac = false;
    r->budget_fraction = NAN;
    if (!rc) rc = h5u_read_attr_f64(g, where, ATTR_FRACTION, &r->budget_fraction, &has_frac, err);
    if (!rc && !has_frac) r->budget_fraction = NAN;
    if (!rc && has_frac && !(r->budget_fraction > 0 && r->budget_fraction <= 1))
        rc = kv_fail(err, KV_EINPUT, "%s: attribute budget_fraction %g is outside (0, 1]", where, r->budget_fraction);
    if (!rc && (!r->allocator[0] || strchr(r->allocator, ',') || strchr(r->allocator, '\n')))
        rc = kv_fail(err, KV_EINPUT, "%s: attribute allocator '%s' is empty or holds a comma or newline", where,
                     r->allocator);
    if (!rc && r->budget < 1)
        rc = kv_fail(err, KV_EINPUT, "%s: budget %lld is not a cache size (>= 1)", where, (long long)r->budget);
    if (!rc && (strchr(r->policy, ',') || strchr(r->params, ',') || strchr(r->policy, '\n') ||
                strchr(r->params, '\n') || !r->policy[0]))
        rc = kv_fail(err, KV_EINPUT, "%s: attribute policy '%s' or params '%s' is empty or holds a comma or "
                     "newline", where, r->policy, r->params);
    if (!rc) results_config_label(r->policy, r->params, r->config, sizeof r->config);
    const bool data = !sel || !sel->attrs_only;
    if (!rc && data) rc = read_retained(g, r, L, K, T, where, err);
    if (!rc && data) rc = read_logdet(g, r, L, K, where, err);
    if (!rc && data) rc = read_head_mean(g, r, L, K, T, where, err);
    H5Gclose(g);
    return rc;
}

/* The members of /runs in name order. */
static int read_runs(hid_t f, results_set *rs, int64_t L, int64_t K, int64_t T, const results_select *sel,
                     kv_err *err)
{
    if (!h5u_exists(f, "/" RUNS)) return kv_fail(err, KV_EINPUT, "%s: /" RUNS ": missing", rs->path);
    hid_t runs = H5Gopen2(f, "/" RUNS, H5P_DEFAULT);
    H5G_info_t gi;
    if (runs < 0 || H5Gget_info(runs, &gi) < 0) {
        if (runs >= 0) H5Gclose(runs);
        return kv_fail(err, KV_EINPUT, "%s: /" RUNS ": not a readable group", rs->path);
    }
    int rc = gi.nlinks > 100000 ? kv_fail(err, KV_EINPUT, "%s: /" RUNS ": %llu members is beyond what analyze reads",
                                          rs->path, (unsigned long long)gi.nlinks) : KV_OK;
    if (!rc && gi.nlinks > 0 && !(rs->runs = kv_calloc((size_t)gi.nlinks, sizeof *rs->runs, "results", err)))
        rc = err->code;
    for (hsize_t i = 0; !rc && i < gi.nlinks; i++) {
        results_run *r = &rs->runs[rs->n_runs++];
        ssize_t n = H5Lget_name_by_idx(runs, ".", H5_INDEX_NAME, H5_ITER_INC, i, r->name, sizeof r->name,
                                       H5P_DEFAULT);
        if (n < 0 || (size_t)n >= sizeof r->name)
            rc = kv_fail(err, KV_EINPUT, "%s: /" RUNS ": member %llu has an unreadable or too long name", rs->path,
                         (unsigned long long)i);
        else if (strchr(r->name, ','))
            rc = kv_fail(err, KV_EINPUT, "%s: /" RUNS "/%s: a run name holds a comma", rs->path, r->name);
        bool take = true;
        if (!rc) rc = read_run(runs, r, L, K, T, rs->path, sel, &take, err);
        if (!rc && !take) {
            memset(r, 0, sizeof *r), rs->n_runs--;
            continue;
        }
        /* results.csv and the rest: keyed by (config, allocator, budget), and chunk and trace in a study */
        for (int j = 0; !rc && j < rs->n_runs - 1; j++)
            if (rs->runs[j].budget == r->budget && strcmp(rs->runs[j].config, r->config) == 0 &&
                strcmp(rs->runs[j].allocator, r->allocator) == 0 && rs->runs[j].chunk == r->chunk &&
                strcmp(rs->runs[j].trace, r->trace) == 0)
                rc = kv_fail(err, KV_EINPUT, "%s: /" RUNS "/%s repeats the run of /" RUNS "/%s (%s, %s, budget %lld)",
                             rs->path, r->name, rs->runs[j].name, r->config, r->allocator, (long long)r->budget);
    }
    H5Gclose(runs);
    return rc;
}

int results_read(const char *dir, int64_t L, int64_t K, int64_t T, results_set *out, kv_err *err)
{
    return results_read_select(dir, L, K, T, NULL, out, err);
}

int results_read_select(const char *dir, int64_t L, int64_t K, int64_t T, const results_select *sel,
                        results_set *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s/" RESULTS_FILE_H5, dir);
    int rc = kv_input_dir_check(dir, "--results takes the directory kvtrace sim wrote", err);
    if (rc) return rc;
    struct stat st;
    if (stat(out->path, &st) != 0)
        return kv_fail(err, KV_EINPUT, "%s: missing (is %s a kvtrace sim output directory?)", out->path, dir);
    h5u_quiet();
    rc = kv_input_check(out->path, false, err);
    if (rc) return rc;
    hid_t f = H5Fopen(out->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return kv_fail(err, KV_EINPUT, "%s: cannot open as HDF5 (truncated or not an HDF5 file)", out->path);
    rc = read_runs(f, out, L, K, T, sel, err);
    if (H5Fclose(f) < 0 && !rc) rc = kv_fail(err, KV_EINPUT, "%s: cannot close (corrupt file)", out->path);
    if (rc) results_free(out);
    return rc;
}

void results_trace_sha256(const char *dir, char *hex)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" RESULTS_FILE_H5, dir);
    hex[0] = '\0';
    h5u_quiet();
    kv_err err = {0};
    if (kv_input_check(path, false, &err)) return;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return;
    bool present = false;
    if (h5u_read_attr_str(f, path, "trace_sha256", hex, 65, &present, &err) || !present) hex[0] = '\0';
    H5Fclose(f);
}

void results_free(results_set *rs)
{
    for (int i = 0; rs->runs && i < rs->n_runs; i++)
        free(rs->runs[i].retained), free(rs->runs[i].n_kept), free(rs->runs[i].final_logdet),
            free(rs->runs[i].head_mean);
    free(rs->runs);
    rs->runs = NULL;
    rs->n_runs = 0;
}
