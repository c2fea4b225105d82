/* The results module (results/): results_read on results.h5 files written
 * here with the HDF5 C API: a good file read back in name order with its
 * padding; each violation one KV_EINPUT line naming /runs/NAME/DATASET; no
 * HDF5 object left open after any call. results_write checked the other way
 * round: its file read here with the HDF5 C API (names, types, shapes,
 * attributes, values), and read back by results_read; with a provenance
 * record, the root attributes naming the command and the trace (its sha256)
 * and the /provenance group, which results_read ignores; byte copies. */
#include "testutil.h"

#include <hdf5.h>

#include "core/h5util.h"
#include "results/results_dir.h"
#include "results/results_h5.h"

enum { L = 2, K = 2, T = 10, W = 4 };

typedef struct {
    int32_t retained[L * K * W];
    hsize_t dims[3];
    int rank;
    hsize_t ld_dims[2];
    bool no_budget;
} run_spec;

static void good_run(run_spec *s, int shift)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < L * K; i++)
        for (int w = 0; w < W; w++) s->retained[i * W + w] = (int32_t)(2 * w + shift + (i % 2));
    s->retained[3 * W + W - 1] = -1; /* one row padded */
    s->dims[0] = L, s->dims[1] = K, s->dims[2] = W, s->rank = 3;
    s->ld_dims[0] = L, s->ld_dims[1] = K;
}

static void write_dset(hid_t g, const char *name, int rank, const hsize_t *dims, hid_t type, const void *buf)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(g, name, type == H5T_NATIVE_INT32 ? H5T_STD_I32LE : H5T_IEEE_F64LE, sp, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    H5Dclose(d), H5Sclose(sp);
}

/* DIR/results.h5 with runs "b:budget=4" (spec b) and "a:budget=4" (spec a), created in that order. */
static void write_results(const char *dir, const run_spec *a, const run_spec *b)
{
    char path[512];
    snprintf(path, sizeof path, "%s/results.h5", dir);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t runs = H5Gcreate2(f, "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0 && runs >= 0);
    const run_spec *specs[2] = {b, a};
    const char *names[2] = {"b:budget=4", "a:budget=4"}, *pol[2] = {"b", "a"};
    double ld[L * K * 2] = {-1, -2, -3, -4, -5, -6, -7, -8}; /* log-dets of unit keys are <= 1 */
    kv_err err = {0};
    for (int i = 0; i < 2; i++) {
        hid_t g = H5Gcreate2(runs, names[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        int64_t budget = 4;
        assert_int_equal(h5u_write_attr_str(g, "policy", pol[i], &err), 0);
        assert_int_equal(h5u_write_attr_str(g, "params", "", &err), 0);
        if (!specs[i]->no_budget) assert_int_equal(h5u_write_attr_i64(g, "budget", &budget, 1, &err), 0);
        write_dset(g, "retained", specs[i]->rank, specs[i]->dims, H5T_NATIVE_INT32, specs[i]->retained);
        write_dset(g, "final_logdet", 2, specs[i]->ld_dims, H5T_NATIVE_DOUBLE, ld);
        H5Gclose(g);
    }
    H5Gclose(runs), H5Fclose(f);
}

static void assert_nothing_open(void)
{
    assert_int_equal(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

static void good_file_in_name_order(void **state)
{
    (void)state;
    run_spec a, b;
    good_run(&a, 0), good_run(&b, 1);
    write_results(tu_dir, &a, &b);
    results_set rs;
    kv_err err = {0};
    int rc = results_read(tu_dir, L, K, T, &rs, &err);
    if (rc) printf("# %s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_nothing_open();
    assert_int_equal(rs.n_runs, 2);
    assert_string_equal(rs.runs[0].name, "a:budget=4");
    assert_string_equal(rs.runs[1].policy, "b");
    assert_string_equal(rs.runs[1].config, "b"); /* from policy and params: this file has no @config */
    assert_int_equal(rs.runs[0].budget, 4);
    assert_int_equal(rs.runs[0].width, W);
    assert_int_equal(rs.runs[0].n_kept[0], W);
    assert_int_equal(rs.runs[0].n_kept[3], W - 1);
    assert_int_equal(rs.runs[1].retained[1 * W + 2], 2 * 2 + 1 + 1);
    assert_true(rs.runs[0].final_logdet[3] == -4.0);
    results_free(&rs);
}

static void expect_invalid(const run_spec *a, const char *want)
{
    run_spec b;
    good_run(&b, 0);
    write_results(tu_dir, a, &b);
    results_set rs;
    kv_err err = {0};
    assert_int_equal(results_read(tu_dir, L, K, T, &rs, &err), KV_EINPUT);
    printf("# %s\n", err.msg);
    assert_non_null(strstr(err.msg, want));
    assert_null(rs.runs);
    assert_nothing_open();
}

static void violations_name_the_object(void **state)
{
    (void)state;
    run_spec a;
    good_run(&a, 0), a.retained[2 * W + 3] = T;
    expect_invalid(&a, "/runs/a:budget=4/retained: position 10 at [1, 0, 3] is outside");
    good_run(&a, 0), a.retained[1] = a.retained[0];
    expect_invalid(&a, "/runs/a:budget=4/retained: position 0 at [0, 0, 1] repeats");
    good_run(&a, 0), a.retained[2] = 0;
    expect_invalid(&a, "/runs/a:budget=4/retained: position 0 at [0, 0, 2] is smaller");
    good_run(&a, 0), a.retained[0] = -1;
    expect_invalid(&a, "/runs/a:budget=4/retained: position 2 at [0, 0, 1] follows the -1 padding");
    good_run(&a, 0), a.dims[1] = 1;
    expect_invalid(&a, "/runs/a:budget=4/retained: shape [2, 1, 4], expected [2, 2, N']");
    good_run(&a, 0), a.rank = 2, a.dims[1] = K * W;
    expect_invalid(&a, "/runs/a:budget=4/retained: rank 2, expected 3");
    good_run(&a, 0), a.ld_dims[0] = 1;
    expect_invalid(&a, "/runs/a:budget=4/final_logdet: shape [1, 2]");
    good_run(&a, 0), a.no_budget = true;
    expect_invalid(&a, "/runs/a:budget=4: missing required attribute 'budget'");
}

static void missing_and_not_hdf5(void **state)
{
    (void)state;
    results_set rs;
    kv_err err = {0};
    char sub[400], path[500];
    snprintf(sub, sizeof sub, "%s/empty", tu_dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    assert_int_equal(results_read(sub, L, K, T, &rs, &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "results.h5: missing"));
    snprintf(path, sizeof path, "%s/results.h5", sub);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not hdf5\n", f);
    fclose(f);
    kv_err_clear(&err);
    assert_int_equal(results_read(sub, L, K, T, &rs, &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "cannot open as HDF5"));
    assert_nothing_open();
}

static void copies(void **state)
{
    (void)state;
    char path[500], out[400], buf[256];
    snprintf(path, sizeof path, "%s/summary.csv", tu_dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("x,y\r\n1,2", f); /* bytes as they are, no newline translation */
    fclose(f);
    snprintf(out, sizeof out, "%s/out", tu_dir);
    assert_int_equal(mkdir(out, 0777), 0);
    kv_err err = {0};
    bool copied = false;
    assert_int_equal(results_copy_file(tu_dir, "summary.csv", out, &copied, &err), 0);
    assert_true(copied);
    assert_int_equal(results_copy_file(tu_dir, "timing.csv", out, &copied, &err), 0);
    assert_false(copied);
    snprintf(path, sizeof path, "%s/summary.csv", out);
    f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(n, 8);
    assert_memory_equal(buf, "x,y\r\n1,2", 8);
}

/* Two runs through results_write: run0001 keydiff:anchor=pairwise at budget
 * 3 (width 3, row [1][0] padded) and run0002 full at budget 10 (width T). */
static int64_t w_keep[L * K * 3], w_full[L * K * T];
static double w_ld[2][L * K];

static void write_two(const char *dir)
{
    for (int i = 0; i < L * K; i++) {
        for (int w = 0; w < 3; w++) w_keep[i * 3 + w] = 3 * w + i;
        for (int t = 0; t < T; t++) w_full[i * T + t] = t;
        w_ld[0][i] = -1.5 * i, w_ld[1][i] = -0.25 - i;
    }
    w_keep[2 * 3 + 2] = RESULTS_PAD;
    const results_run_view runs[2] = {
        {.policy = "keydiff", .params = "anchor=pairwise", .budget = 3, .chunk = 4, .width = 3,
         .retained = w_keep, .final_logdet = w_ld[0]},
        {.policy = "full", .params = "", .budget = 10, .chunk = 4, .width = T, .retained = w_full,
         .final_logdet = w_ld[1]},
    };
    kv_err err = {0};
    int rc = results_write(dir, L, K, runs, 2, NULL, &err);
    if (rc) printf("# %s\n", err.msg);
    assert_int_equal(rc, KV_OK);
    assert_nothing_open();
}

/* The type, rank and dims of DSET in group g; returns its id. */
static hid_t open_dset(hid_t g, const char *dset, hid_t want_type, int rank, const hsize_t *want)
{
    hid_t d = H5Dopen2(g, dset, H5P_DEFAULT);
    assert_true(d >= 0);
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    assert_true(H5Tequal(t, want_type) > 0);
    hsize_t dims[3];
    assert_int_equal(H5Sget_simple_extent_ndims(sp), rank);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    for (int i = 0; i < rank; i++) assert_int_equal(dims[i], want[i]);
    H5Tclose(t), H5Sclose(sp);
    return d;
}

static void writer_layout(void **state)
{
    (void)state;
    char dir[400], buf[64];
    snprintf(dir, sizeof dir, "%s/w", tu_dir);
    assert_int_equal(mkdir(dir, 0777), 0);
    write_two(dir);
    char path[500];
    snprintf(path, sizeof path, "%s/results.h5", dir);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t runs = H5Gopen2(f, "/runs", H5P_DEFAULT);
    H5G_info_t gi;
    assert_true(runs >= 0 && H5Gget_info(runs, &gi) >= 0);
    assert_int_equal(gi.nlinks, 2);
    hid_t g = H5Gopen2(runs, "run0001", H5P_DEFAULT);
    assert_true(g >= 0);
    kv_err err = {0};
    int64_t v;
    assert_int_equal(h5u_read_attr_str(g, "g", "config", buf, sizeof buf, NULL, &err), KV_OK);
    assert_string_equal(buf, "keydiff:anchor=pairwise");
    assert_int_equal(h5u_read_attr_str(g, "g", "policy", buf, sizeof buf, NULL, &err), KV_OK);
    assert_string_equal(buf, "keydiff");
    assert_int_equal(h5u_read_attr_str(g, "g", "params", buf, sizeof buf, NULL, &err), KV_OK);
    assert_string_equal(buf, "anchor=pairwise");
    assert_int_equal(h5u_read_attr_i64(g, "g", "budget", &v, 1, NULL, &err), KV_OK);
    assert_int_equal(v, 3);
    assert_int_equal(h5u_read_attr_i64(g, "g", "chunk", &v, 1, NULL, &err), KV_OK);
    assert_int_equal(v, 4);
    int32_t kept[L * K * 3];
    double ld[L * K];
    hid_t d = open_dset(g, "retained", H5T_STD_I32LE, 3, (const hsize_t[]){L, K, 3});
    assert_true(H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, kept) >= 0);
    H5Dclose(d);
    for (int i = 0; i < L * K * 3; i++) assert_int_equal(kept[i], w_keep[i]);
    assert_int_equal(kept[2 * 3 + 2], -1);
    d = open_dset(g, "final_logdet", H5T_IEEE_F64LE, 2, (const hsize_t[]){L, K});
    assert_true(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, ld) >= 0);
    H5Dclose(d);
    for (int i = 0; i < L * K; i++) assert_true(ld[i] == w_ld[0][i]);
    H5Gclose(g);
    g = H5Gopen2(runs, "run0002", H5P_DEFAULT);
    assert_true(g >= 0);
    assert_int_equal(h5u_read_attr_str(g, "g", "params", buf, sizeof buf, NULL, &err), KV_OK);
    assert_string_equal(buf, "");
    assert_int_equal(h5u_read_attr_str(g, "g", "config", buf, sizeof buf, NULL, &err), KV_OK);
    assert_string_equal(buf, "full"); /* never empty: pandas would read "" as NaN */
    H5Dclose(open_dset(g, "retained", H5T_STD_I32LE, 3, (const hsize_t[]){L, K, T}));
    H5Gclose(g), H5Gclose(runs), H5Fclose(f);
    assert_nothing_open();
    /* zero-padded to one width per file, at least 4 digits: name order is run order */
    char name[64];
    results_run_name(0, 2, name, sizeof name);
    assert_string_equal(name, "run0001");
    results_run_name(9998, 9999, name, sizeof name);
    assert_string_equal(name, "run9999");
    results_run_name(0, 10000, name, sizeof name);
    assert_string_equal(name, "run00001");
    results_run_name(9999, 10000, name, sizeof name);
    assert_string_equal(name, "run10000");
    results_config_label("tova", "scope=group", name, sizeof name);
    assert_string_equal(name, "tova:scope=group");
    results_config_label("h2o", "", name, sizeof name);
    assert_string_equal(name, "h2o");
}

static void writer_read_back(void **state)
{
    (void)state;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/rb", tu_dir);
    assert_int_equal(mkdir(dir, 0777), 0);
    write_two(dir);
    results_set rs;
    kv_err err = {0};
    int rc = results_read(dir, L, K, T, &rs, &err);
    if (rc) printf("# %s\n", err.msg);
    assert_int_equal(rc, KV_OK);
    assert_int_equal(rs.n_runs, 2);
    assert_string_equal(rs.runs[0].name, "run0001"); /* name order: the order written */
    assert_string_equal(rs.runs[0].policy, "keydiff");
    assert_string_equal(rs.runs[0].params, "anchor=pairwise");
    assert_string_equal(rs.runs[0].config, "keydiff:anchor=pairwise");
    assert_int_equal(rs.runs[0].budget, 3);
    assert_int_equal(rs.runs[0].width, 3);
    assert_int_equal(rs.runs[0].n_kept[2], 2);
    assert_int_equal(rs.runs[0].n_kept[3], 3);
    assert_string_equal(rs.runs[1].name, "run0002");
    assert_string_equal(rs.runs[1].config, "full");
    assert_int_equal(rs.runs[1].n_kept[0], T);
    for (int i = 0; i < L * K; i++) assert_true(rs.runs[0].final_logdet[i] == w_ld[0][i]);
    results_free(&rs);
    assert_nothing_open();
    const results_run_view twice[1] = {
        {.policy = "h2o", .params = "", .budget = 3, .width = 3, .retained = w_keep, .final_logdet = w_ld[0]},
    };
    snprintf(dir, sizeof dir, "%s/no/such", tu_dir);
    assert_int_equal(results_write(dir, L, K, twice, 1, NULL, &err), KV_EFAIL);
    assert_non_null(strstr(err.msg, "no/such/results.h5: cannot create"));
    assert_nothing_open();
}

/* A string attribute of the root of DIR/results.h5. */
static void root_attr(const char *dir, const char *name, char *buf, size_t cap)
{
    char path[500];
    snprintf(path, sizeof path, "%s/results.h5", dir);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    kv_err err = {0};
    bool present = false;
    assert_int_equal(h5u_read_attr_str(f, path, name, buf, cap, &present, &err), KV_OK);
    assert_true(present);
    assert_true(h5u_exists(f, "provenance"));
    H5Fclose(f);
}

static void origin_written(void **state)
{
    (void)state;
    char dir[400], trace[500], buf[512];
    snprintf(dir, sizeof dir, "%s/origin", tu_dir);
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(trace, sizeof trace, "%s/t.h5", dir);
    FILE *f = fopen(trace, "w");
    assert_non_null(f);
    fputs("abc", f); /* sha256 from FIPS 180-2's example */
    fclose(f);
    char *argv[] = {"sim", "t.h5", "--budgets", "3", "-o", "a b"};
    prov_record p;
    kv_err err = {0};
    assert_int_equal(prov_begin(&p, 6, argv, &err), KV_OK);
    assert_int_equal(prov_add_file(&p, "trace", trace, "t.h5", &err), KV_OK);
    const results_run_view run = {.policy = "h2o", .params = "", .budget = 3, .width = 3, .retained = w_keep,
                                  .final_logdet = w_ld[0]};
    assert_int_equal(results_write(dir, L, K, &run, 1, &p, &err), KV_OK);
    prov_free(&p);
    root_attr(dir, "command", buf, sizeof buf);
    assert_string_equal(buf, "kvtrace sim t.h5 --budgets 3 -o 'a b'");
    root_attr(dir, "trace_path", buf, sizeof buf);
    assert_string_equal(buf, "t.h5");
    root_attr(dir, "trace_sha256", buf, sizeof buf);
    assert_string_equal(buf, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    results_set rs;
    assert_int_equal(results_read(dir, L, K, T, &rs, &err), KV_OK);
    assert_int_equal(rs.n_runs, 1);
    results_free(&rs);
    assert_nothing_open();
}

int main(void)
{
    h5u_quiet();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_file_in_name_order),
        cmocka_unit_test(violations_name_the_object),
        cmocka_unit_test(missing_and_not_hdf5),
        cmocka_unit_test(copies),
        cmocka_unit_test(writer_layout),
        cmocka_unit_test(writer_read_back),
        cmocka_unit_test(origin_written),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
