/* results_read (analysis/results_read.c) on results.h5 files written here with
 * the HDF5 C API: a good file read back in name order with its padding; each
 * violation one KV_EINPUT line naming /runs/NAME/DATASET; no HDF5 object left
 * open after any call; command.txt's first line and byte copies. */
#include "testutil.h"

#include <hdf5.h>

#include "analysis/results_read.h"
#include "core/h5util.h"

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
    double ld[L * K * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
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
    assert_int_equal(rs.runs[0].budget, 4);
    assert_int_equal(rs.runs[0].width, W);
    assert_int_equal(rs.runs[0].n_kept[0], W);
    assert_int_equal(rs.runs[0].n_kept[3], W - 1);
    assert_int_equal(rs.runs[1].retained[1 * W + 2], 2 * 2 + 1 + 1);
    assert_true(rs.runs[0].final_logdet[3] == 4.0);
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

static void command_and_copies(void **state)
{
    (void)state;
    char path[500], out[400], buf[256];
    snprintf(path, sizeof path, "%s/command.txt", tu_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("kvtrace sim t.h5 --policies a,b\nsecond line\n", f);
    fclose(f);
    assert_true(results_sim_command(tu_dir, buf, sizeof buf));
    assert_string_equal(buf, "kvtrace sim t.h5 --policies a,b");
    snprintf(path, sizeof path, "%s/summary.csv", tu_dir);
    f = fopen(path, "wb");
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

int main(void)
{
    h5u_quiet();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_file_in_name_order),
        cmocka_unit_test(violations_name_the_object),
        cmocka_unit_test(missing_and_not_hdf5),
        cmocka_unit_test(command_and_copies),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
