/* fit_read: feature files (HDF5 "kvtrace-features" or the --csv form) read one eviction step at a
 * time, each feature standardised over the step's candidates as expr's z() does. */
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/csv.h"
#include "core/h5util.h"
#include "expr/expr.h"
#include "search/fit.h"

enum { BLOCK_ROWS = 16384, MAX_FILE_F = 256 };

static const char *const CSV_KEYS[] = {"trace", "layer", "kv_head", "step", "position"};
static const char *const ROW_SETS[] = {"step", "layer", "kv_head", "position", "future_attn", "oracle_keep", "age"};

static bool is_csv(const char *path)
{
    const size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, ".csv") == 0;
}

/* Splits PATH into the directory and the name csv_read takes. */
int fit_csv_open(csv_table *t, const char *path, kv_err *err)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash == path) snprintf(dir, sizeof dir, "/");
    bool present;
    int rc = csv_read(t, dir, slash ? slash + 1 : path, &present, err);
    if (!rc && !present) rc = kv_fail(err, KV_EINPUT, "%s: cannot open", path);
    return rc;
}

/* The --csv form's header: the keys, then features, then the targets (F_file of them). */
static int csv_names(const char *path, char names[][FIT_NAME_MAX], int *F, int64_t *rows, kv_err *err)
{
    csv_table t = {0};
    int rc = fit_csv_open(&t, path, err);
    const int n_keys = (int)(sizeof CSV_KEYS / sizeof *CSV_KEYS);
    for (int c = 0; !rc && c < n_keys; c++)
        if (c >= t.n_cols || strcmp(t.header[c], CSV_KEYS[c]) != 0)
            rc = kv_fail(err, KV_EINPUT, "%s: not a kvtrace features CSV (column %d should be '%s')", path, c + 1,
                         CSV_KEYS[c]);
    const char *tail[] = {"future_attn", "oracle_keep", "age"};
    for (int c = 0; !rc && c < 3; c++)
        if (t.n_cols < n_keys + 3 || strcmp(t.header[t.n_cols - 3 + c], tail[c]) != 0)
            rc = kv_fail(err, KV_EINPUT, "%s: not a kvtrace features CSV (the last columns should be "
                         "future_attn,oracle_keep,age)", path);
    *F = rc ? 0 : t.n_cols - n_keys - 3;
    if (!rc && (*F < 1 || *F > MAX_FILE_F)) rc = kv_fail(err, KV_EINPUT, "%s: %d feature columns", path, *F);
    for (int f = 0; !rc && f < *F; f++) {
        if (strlen(t.header[n_keys + f]) >= FIT_NAME_MAX)
            rc = kv_fail(err, KV_EINPUT, "%s: feature name '%.40s...' too long", path, t.header[n_keys + f]);
        else snprintf(names[f], FIT_NAME_MAX, "%s", t.header[n_keys + f]);
    }
    *rows = (int64_t)t.n_rows;
    csv_free(&t);
    return rc;
}

/* The root attribute feature_names: vlen (or fixed) strings. */
static int h5_names(hid_t file, const char *path, char names[][FIT_NAME_MAX], int *F, kv_err *err)
{
    if (H5Aexists(file, "feature_names") <= 0) return kv_fail(err, KV_EINPUT, "%s: no feature_names attribute", path);
    hid_t a = H5Aopen(file, "feature_names", H5P_DEFAULT), sp = H5Aget_space(a), ft = H5Aget_type(a);
    int rc = KV_OK;
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    if (H5Tget_class(ft) != H5T_STRING || n < 1 || n > MAX_FILE_F) {
        rc = kv_fail(err, KV_EINPUT, "%s: feature_names is not a list of 1 to %d strings", path, MAX_FILE_F);
    } else if (H5Tis_variable_str(ft) > 0) {
        char *v[MAX_FILE_F] = {0};
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5Tget_cset(ft));
        const bool read = H5Aread(a, mt, v) >= 0;
        if (!read) rc = kv_fail(err, KV_EINPUT, "%s: feature_names unreadable", path);
        for (hssize_t i = 0; !rc && i < n; i++)
            if (!v[i] || strlen(v[i]) >= FIT_NAME_MAX || !v[i][0])
                rc = kv_fail(err, KV_EINPUT, "%s: feature_names[%lld] empty or too long", path, (long long)i);
            else snprintf(names[i], FIT_NAME_MAX, "%s", v[i]);
        if (read) H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, v);
        H5Tclose(mt);
    } else {
        const size_t sz = H5Tget_size(ft);
        char *buf = calloc((size_t)n, sz + 1);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, sz);
        if (!buf || H5Aread(a, mt, buf) < 0) rc = kv_fail(err, KV_EINPUT, "%s: feature_names unreadable", path);
        for (hssize_t i = 0; !rc && i < n; i++)
            snprintf(names[i], FIT_NAME_MAX, "%.*s", (int)(sz < FIT_NAME_MAX - 1 ? sz : FIT_NAME_MAX - 1),
                     buf + (size_t)i * sz);
        free(buf);
        H5Tclose(mt);
    }
    H5Tclose(ft), H5Sclose(sp), H5Aclose(a);
    *F = (int)n;
    return rc;
}

/* One dataset's dims; rank and the first dim checked against rows (rows < 0: sets it). */
static int h5_dims(hid_t g, const char *path, const char *trace, const char *name, int rank, int64_t *rows,
                   hsize_t *d, kv_err *err)
{
    if (!h5u_exists(g, name)) return kv_fail(err, KV_EINPUT, "%s: /traces/%s has no dataset '%s'", path, trace, name);
    hid_t ds = H5Dopen(g, name, H5P_DEFAULT), sp = H5Dget_space(ds);
    const int r = H5Sget_simple_extent_ndims(sp);
    hsize_t dd[2] = {0, 0};
    if (r == rank) H5Sget_simple_extent_dims(sp, dd, NULL);
    H5Sclose(sp), H5Dclose(ds);
    if (r != rank) return kv_fail(err, KV_EINPUT, "%s: /traces/%s/%s has rank %d, not %d", path, trace, name, r, rank);
    if (*rows < 0) *rows = (int64_t)dd[0];
    if ((int64_t)dd[0] != *rows)
        return kv_fail(err, KV_EINPUT, "%s: /traces/%s/%s has %llu rows, features %lld", path, trace, name,
                       (unsigned long long)dd[0], (long long)*rows);
    if (d) d[0] = dd[0], d[1] = dd[1];
    return KV_OK;
}

/* The names of /traces' groups in name order (caller frees each and the list). */
static int h5_traces(hid_t file, const char *path, char ***out, int *n, kv_err *err)
{
    if (!h5u_exists(file, "traces")) return kv_fail(err, KV_EINPUT, "%s: no /traces group", path);
    hid_t g = H5Gopen(file, "traces", H5P_DEFAULT);
    H5G_info_t gi;
    int rc = H5Gget_info(g, &gi) < 0 ? kv_fail(err, KV_EINPUT, "%s: /traces unreadable", path) : KV_OK;
    char **l = rc ? NULL : kv_calloc(gi.nlinks + 1, sizeof *l, "trace names", err);
    if (!rc && !l) rc = KV_EFAIL;
    for (hsize_t i = 0; !rc && i < gi.nlinks; i++) {
        ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
        l[i] = len > 0 ? calloc((size_t)len + 1, 1) : NULL;
        if (!l[i]) rc = kv_fail(err, KV_EINPUT, "%s: /traces: a name unreadable", path);
        else H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, l[i], (size_t)len + 1, H5P_DEFAULT);
    }
    H5Gclose(g);
    *out = l, *n = l ? (int)gi.nlinks : 0;
    return rc;
}

static void free_list(char **l, int n)
{
    for (int i = 0; l && i < n; i++) free(l[i]);
    free(l);
}

bool fit_trace_used(const fit_input *in, const char *id)
{
    for (int i = 0; in->only && i < in->n_only; i++)
        if (strcmp(in->only[i], id) == 0) return true;
    return !in->only;
}

/* Every trace's datasets present, of one length; the rows of the traces used summed. */
static int h5_check_traces(const fit_input *in, hid_t file, const char *path, int F, int64_t *rows, char *model,
                           kv_err *err)
{
    char **l = NULL;
    int n = 0;
    int rc = h5_traces(file, path, &l, &n, err);
    for (int i = 0; !rc && i < n; i++) {
        hid_t g = H5Gopen(file, "traces", H5P_DEFAULT), t = H5Gopen(g, l[i], H5P_DEFAULT);
        int64_t r = -1;
        hsize_t d[2];
        rc = t < 0 ? kv_fail(err, KV_EINPUT, "%s: /traces/%s is not a group", path, l[i]) : KV_OK;
        if (!rc) rc = h5_dims(t, path, l[i], "features", 2, &r, d, err);
        if (!rc && (int)d[1] != F)
            rc = kv_fail(err, KV_EINPUT, "%s: /traces/%s/features has %llu columns, feature_names %d", path, l[i],
                         (unsigned long long)d[1], F);
        for (size_t k = 0; !rc && k < sizeof ROW_SETS / sizeof *ROW_SETS; k++)
            rc = h5_dims(t, path, l[i], ROW_SETS[k], 1, &r, NULL, err);
        if (!rc && i == 0) h5u_read_attr_str(t, path, "model", model, 128, &(bool){0}, &(kv_err){0});
        if (!rc && fit_trace_used(in, l[i])) *rows += r;
        if (t >= 0) H5Gclose(t);
        H5Gclose(g);
    }
    free_list(l, n);
    return rc;
}

static int h5_header(const fit_input *in, const char *path, char names[][FIT_NAME_MAX], int *F, int64_t *rows, char *model, kv_err *err)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) return kv_fail(err, KV_EINPUT, "%s: cannot open as HDF5 (nor named .csv)", path);
    char fmt[64] = "";
    int64_t ver = 0;
    bool has = false;
    int rc = h5u_read_attr_str(file, path, "format", fmt, sizeof fmt, &has, &(kv_err){0});
    if (rc || !has || strcmp(fmt, "kvtrace-features") != 0)
        rc = kv_fail(err, KV_EINPUT, "%s: not a kvtrace features file (format attribute '%s')", path, fmt);
    if (!rc && (h5u_read_attr_i64(file, path, "format_version", &ver, 1, NULL, err) || ver != 1))
        rc = kv_fail(err, KV_EINPUT, "%s: format_version %lld (this kvtrace reads 1)", path, (long long)ver);
    if (!rc) rc = h5_names(file, path, names, F, err);
    if (!rc) rc = h5_check_traces(in, file, path, *F, rows, model, err);
    H5Fclose(file);
    return rc;
}

/* Whether `name` is one feature of the expression language as `kvtrace policies --features` lists them:
 * NAME, or NAME(ARGS) with as many plain numbers as it takes. Only such a column can become a term
 * z(NAME) of the written policy (anything else could be an expression of its own). */
static bool feature_name(const char *name)
{
    for (int i = 0; i < EF_COUNT; i++) {
        const expr_feature *f = &EXPR_FEATURES[i];
        const size_t n = strlen(f->name);
        if (strncmp(name, f->name, n) != 0) continue;
        const char *a = name + n;
        if (!*a) return true;
        if (*a != '(' || f->n_args == 0) continue;
        int args = 0;
        for (a++;;) {
            const size_t len = kv_number_len(a, strlen(a), false);
            if (!len) break;
            a += len, args++;
            if (*a != ',') break;
            a += a[1] == ' ' ? 2 : 1;
        }
        if (a[0] == ')' && !a[1] && args >= 1 && args <= f->n_args) return true;
    }
    return false;
}

/* A file's columns: each a feature of the language, each once (exit 3 naming the file). */
static int check_names(const char *path, char names[][FIT_NAME_MAX], int F, kv_err *err)
{
    for (int f = 0; f < F; f++) {
        if (!feature_name(names[f]))
            return kv_fail(err, KV_EINPUT, "%s: the feature column '%.80s' is not a feature kvtrace policies "
                           "--features lists", path, names[f]);
        for (int g = 0; g < f; g++)
            if (strcmp(names[g], names[f]) == 0)
                return kv_fail(err, KV_EINPUT, "%s: the feature column '%.80s' is there twice", path, names[f]);
    }
    return KV_OK;
}

static int find_name(char names[][FIT_NAME_MAX], int F, const char *name)
{
    for (int f = 0; f < F; f++)
        if (strcmp(names[f], name) == 0) return f;
    return -1;
}

/* The fitted features: `subset` split on commas outside parentheses, or the first file's. */
static int choose(fit_input *in, const char *subset, char first[][FIT_NAME_MAX], int F0, kv_err *err)
{
    if (!subset) {
        if (F0 > FIT_MAX_F)
            return kv_fail(err, KV_EINPUT, "%s: %d features, more than %d: choose some with --features", in->files[0],
                           F0, FIT_MAX_F);
        for (int f = 0; f < F0; f++) snprintf(in->names[f], FIT_NAME_MAX, "%s", first[f]);
        in->F = F0;
        return KV_OK;
    }
    in->F = 0;
    for (const char *s = subset; *s;) {
        int depth = 0;
        const char *e = s;
        for (; *e && (depth || *e != ','); e++) depth += (*e == '(') - (*e == ')');
        if (e == s || e - s >= FIT_NAME_MAX || in->F >= FIT_MAX_F)
            return kv_fail(err, KV_EUSAGE, "fit: --features: an empty or too long name, or more than %d", FIT_MAX_F);
        snprintf(in->names[in->F], FIT_NAME_MAX, "%.*s", (int)(e - s), s);
        for (int f = 0; f < in->F; f++)
            if (strcmp(in->names[f], in->names[in->F]) == 0)
                return kv_fail(err, KV_EUSAGE, "fit: --features names '%s' twice", in->names[f]);
        in->F++;
        s = *e ? e + 1 : e;
    }
    return KV_OK;
}

int fit_input_open(fit_input *in, const char *const *files, int n_files, const char *subset, kv_err *err)
{
    const char *const *only = in->only;
    const int n_only = in->n_only;
    memset(in, 0, sizeof *in);
    in->files = files, in->n_files = n_files, in->only = only, in->n_only = n_only;
    if (n_files < 1 || n_files > FIT_MAX_FILES)
        return kv_fail(err, KV_EUSAGE, "fit: give 1 to %d feature files", FIT_MAX_FILES);
    char (*nm)[FIT_NAME_MAX] = calloc(MAX_FILE_F, FIT_NAME_MAX);
    if (!nm) return kv_fail(err, KV_EFAIL, "out of memory");
    int rc = KV_OK;
    for (int i = 0; !rc && i < n_files; i++) {
        int F = 0;
        int64_t rows = 0;
        in->csv[i] = is_csv(files[i]);
        rc = in->csv[i] ? csv_names(files[i], nm, &F, &rows, err) : h5_header(in, files[i], nm, &F, &rows, in->model[i], err);
        if (!rc) rc = check_names(files[i], nm, F, err);
        if (!rc && i == 0) rc = choose(in, subset, nm, F, err);
        for (int f = 0; !rc && f < in->F; f++)
            if ((in->col[i][f] = find_name(nm, F, in->names[f])) < 0)
                rc = kv_fail(err, KV_EINPUT, "%s: no feature '%s' (see its feature_names)", files[i], in->names[f]);
        in->file_F[i] = F, in->n_rows += rows;
    }
    if (!rc && in->n_rows == 0)
        rc = kv_fail(err, KV_EINPUT, "%s: no rows (no eviction step%s)", files[0], only ? " of the training prompts" : "");
    free(nm);
    return rc;
}
