/* The CSV reader (core/csv.c): exact headers, field counts, numbers
 * and ranges, each error one KV_EINPUT line "DIR/FILE:LINE: what"; a missing
 * file is "not present", not an error; header-only files have no rows. The
 * writing helpers: a header line, RFC 4180 quoting (read back by the reader),
 * line breaks flattened, a file that cannot be created. */
#include "testutil.h"

#include <math.h>

#include "core/csv.h"

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tu_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static const char *const COLS[] = {"layer", "head", "rho"};

/* Reads NAME expecting failure; checks the message holds every part. */
static void read_fails(const char *name, const char *text, const char *const *parts)
{
    put(name, text);
    csv_table c;
    bool present = false;
    kv_err err = {0};
    int rc = csv_read(&c, tu_dir, name, &present, &err);
    if (!rc) rc = csv_expect(&c, COLS, 3, false, &err);
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        int64_t v;
        double x;
        if (!(rc = csv_int(&c, r, 0, 0, 3, &v, &err)) && !(rc = csv_int(&c, r, 1, 0, 7, &v, &err)))
            rc = csv_double(&c, r, 2, false, &x, &err);
    }
    printf("# %s -> %s\n", name, err.msg);
    assert_int_equal(rc, KV_EINPUT);
    assert_int_equal(err.code, KV_EINPUT);
    assert_null(strchr(err.msg, '\n'));
    for (; *parts; parts++) {
        if (!strstr(err.msg, *parts)) printf("# missing '%s'\n", *parts);
        assert_non_null(strstr(err.msg, *parts));
    }
    csv_free(&c);
}

static void reads_a_good_file(void **state)
{
    (void)state;
    put("good.csv", "layer,head,rho\n0,0,0.5\n0,1,-0.25\n1,0,nan\n");
    csv_table c;
    bool present = false;
    kv_err err = {0};
    assert_int_equal(csv_read(&c, tu_dir, "good.csv", &present, &err), KV_OK);
    assert_true(present);
    assert_int_equal(csv_expect(&c, COLS, 3, false, &err), KV_OK);
    assert_int_equal(c.n_cols, 3);
    assert_int_equal(c.n_rows, 3);
    assert_int_equal(csv_column(&c, "layer"), 0);
    assert_int_equal(csv_column(&c, "rho"), 2);
    assert_int_equal(csv_column(&c, "Rho"), -1);   /* names match exactly */
    assert_string_equal(csv_cell(&c, 1, 2), "-0.25");
    assert_int_equal(c.lines[2], 4);
    double x;
    int64_t v;
    assert_int_equal(csv_double(&c, 1, 2, false, &x, &err), KV_OK);
    assert_true(x == -0.25);
    assert_int_equal(csv_int(&c, 1, 1, 0, 3, &v, &err), KV_OK);
    assert_int_equal(v, 1);
    assert_int_equal(csv_double(&c, 2, 2, true, &x, &err), KV_OK);
    assert_true(isnan(x));
    assert_int_equal(csv_double(&c, 2, 2, false, &x, &err), KV_EINPUT); /* NaN only where allowed */
    assert_non_null(strstr(err.msg, "good.csv:4: rho is NaN"));
    csv_free(&c);
}

/* RFC 4180 quoting as analyze writes meta.csv values that hold commas. */
static void quoted_fields(void **state)
{
    (void)state;
    put("q.csv", "key,value\nsim_command,\"kvtrace sim --budgets 32,64 -o 'a \"\"b\"\"'\"\nempty,\"\"\nplain,x\n");
    csv_table c;
    bool present = false;
    kv_err err = {0};
    assert_int_equal(csv_read(&c, tu_dir, "q.csv", &present, &err), KV_OK);
    assert_int_equal(c.n_rows, 3);
    assert_string_equal(csv_cell(&c, 0, 1), "kvtrace sim --budgets 32,64 -o 'a \"b\"'");
    assert_string_equal(csv_cell(&c, 1, 1), "");
    assert_string_equal(csv_cell(&c, 2, 1), "x");
    csv_free(&c);
    const char *open_quote[] = {"open.csv:2:", "quoted field is not closed", NULL};
    read_fails("open.csv", "layer,head,rho\n\"0,0,0.5\n", open_quote);
    const char *after_quote[] = {"after.csv:2:", "quoted field", NULL};
    read_fails("after.csv", "layer,head,rho\n\"0\"x,0,0.5\n", after_quote);
}

static void missing_header_only_and_crlf(void **state)
{
    (void)state;
    csv_table c;
    bool present = true;
    kv_err err = {0};
    assert_int_equal(csv_read(&c, tu_dir, "absent.csv", &present, &err), KV_OK);
    assert_false(present);
    assert_int_equal(c.n_rows, 0);
    csv_free(&c);
    put("empty_rows.csv", "layer,head,rho\n");
    assert_int_equal(csv_read(&c, tu_dir, "empty_rows.csv", &present, &err), KV_OK);
    assert_true(present);
    assert_int_equal(c.n_rows, 0);
    assert_int_equal(csv_expect(&c, COLS, 3, false, &err), KV_OK);
    csv_free(&c);
    put("cut.csv", "layer,head,rho\n1,2,3.5\n1,3,4"); /* no final newline: cut short */
    assert_int_equal(csv_read(&c, tu_dir, "cut.csv", &present, &err), KV_EINPUT);
    printf("# %s\n", err.msg);
    assert_non_null(strstr(err.msg, "cut.csv:3: the last line has no final newline"));
    csv_free(&c);
    err = (kv_err){0};
    put("crlf.csv", "layer,head,rho\r\n1,2,3.5\r\n1,3,4\r\n"); /* CRLF */
    assert_int_equal(csv_read(&c, tu_dir, "crlf.csv", &present, &err), KV_OK);
    assert_int_equal(csv_expect(&c, COLS, 3, false, &err), KV_OK);
    assert_int_equal(c.n_rows, 2);
    assert_string_equal(csv_cell(&c, 0, 2), "3.5");
    assert_string_equal(csv_cell(&c, 1, 2), "4");
    csv_free(&c);
}

static void open_ended_header(void **state)
{
    (void)state;
    put("pca.csv", "layer,head,rho,run1,run2\n0,0,1,0,1\n");
    csv_table c;
    bool present;
    kv_err err = {0};
    assert_int_equal(csv_read(&c, tu_dir, "pca.csv", &present, &err), KV_OK);
    assert_int_equal(csv_expect(&c, COLS, 3, true, &err), KV_OK);
    assert_int_equal(csv_expect(&c, COLS, 3, false, &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "pca.csv:1: header is 'layer,head,rho,run1,run2', expected 'layer,head,rho'"));
    csv_free(&c);
}

static void malformed_files(void **state)
{
    (void)state;
    read_fails("hdr.csv", "layer,head,rh\n0,0,1\n", (const char *const[]){"hdr.csv:1", "header", "rh'", NULL});
    read_fails("hdr2.csv", "layer,head\n0,0\n", (const char *const[]){"hdr2.csv:1", "expected 'layer,head,rho'", NULL});
    read_fails("short.csv", "layer,head,rho\n0,0,1\n0,1\n",
               (const char *const[]){"short.csv:3", "2 fields, the header has 3", NULL});
    read_fails("long.csv", "layer,head,rho\n0,0,1,9\n", (const char *const[]){"long.csv:2", "4 fields", NULL});
    read_fails("nan.csv", "layer,head,rho\n0,0,x1\n", (const char *const[]){"nan.csv:2", "rho", "'x1'", NULL});
    read_fails("trail.csv", "layer,head,rho\n0,0,1.5e\n", (const char *const[]){"trail.csv:2", "'1.5e'", NULL});
    read_fails("inf.csv", "layer,head,rho\n0,0,inf\n", (const char *const[]){"inf.csv:2", "finite", NULL});
    read_fails("huge.csv", "layer,head,rho\n0,0,1e999\n", (const char *const[]){"huge.csv:2", "finite", NULL});
    read_fails("empty.csv", "", (const char *const[]){"empty.csv:1", "empty file", NULL});
    read_fails("blank.csv", "layer,head,rho\n0,0,1\n\n0,1,1\n", (const char *const[]){"blank.csv:3", "empty line", NULL});
    read_fails("range.csv", "layer,head,rho\n4,0,1\n", (const char *const[]){"range.csv:2", "layer = 4", "[0, 3]", NULL});
    read_fails("int.csv", "layer,head,rho\n1.5,0,1\n", (const char *const[]){"int.csv:2", "not an integer", NULL});
    char path[512];
    snprintf(path, sizeof path, "%s/adir.csv", tu_dir);
    assert_int_equal(mkdir(path, 0777), 0);
    csv_table c;
    bool present;
    kv_err err = {0};
    assert_int_equal(csv_read(&c, tu_dir, "adir.csv", &present, &err), KV_EUSAGE); /* core/fileopen.h */
    assert_non_null(strstr(err.msg, "adir.csv: is a directory"));
    csv_free(&c);
}

/* The bytes of DIR/NAME into buf (NUL-terminated). */
static void slurp_text(const char *name, char *buf, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tu_dir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static void writes_quoted_fields(void **state)
{
    (void)state;
    static const char *const VALUES[] = {"plain", "a,b", "say \"hi\"", "two\nlines", "cr\rx", ""};
    enum { N = sizeof VALUES / sizeof VALUES[0] };
    kv_err err = {0};
    FILE *f = csv_create(tu_dir, "w.csv", "key,value,flat", &err);
    assert_non_null(f);
    for (int i = 0; i < N; i++) {
        fprintf(f, "k%d,", i);
        csv_field(f, VALUES[i], false);
        fputc(',', f);
        csv_field(f, VALUES[i], true);
        fputc('\n', f);
    }
    assert_int_equal(csv_close(f, "w.csv", &err), KV_OK);
    char text[1024];
    slurp_text("w.csv", text, sizeof text);
    assert_string_equal(text, "key,value,flat\n"
                              "k0,plain,plain\n"
                              "k1,\"a,b\",\"a,b\"\n"
                              "k2,\"say \"\"hi\"\"\",\"say \"\"hi\"\"\"\n"
                              "k3,\"two\nlines\",two lines\n"
                              "k4,cr\rx,cr x\n"
                              "k5,,\n");
    /* what the reader gives back of the flattened column (the other one holds a line break) */
    csv_table c;
    bool present = false;
    put("w2.csv", "key,flat\nk1,\"a,b\"\nk2,\"say \"\"hi\"\"\"\nk3,two lines\n");
    assert_int_equal(csv_read(&c, tu_dir, "w2.csv", &present, &err), KV_OK);
    assert_string_equal(csv_cell(&c, 0, 1), VALUES[1]);
    assert_string_equal(csv_cell(&c, 1, 1), VALUES[2]);
    assert_string_equal(csv_cell(&c, 2, 1), "two lines");
    csv_free(&c);
    f = csv_create(tu_dir, "nodir/x.csv", NULL, &err);
    assert_null(f);
    assert_int_equal(err.code, KV_EFAIL);
    assert_non_null(strstr(err.msg, "nodir/x.csv: cannot create"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_a_good_file),
        cmocka_unit_test(quoted_fields),
        cmocka_unit_test(missing_header_only_and_crlf),
        cmocka_unit_test(open_ended_header),
        cmocka_unit_test(malformed_files),
        cmocka_unit_test(writes_quoted_fields),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
