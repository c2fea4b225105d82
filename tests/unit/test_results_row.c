/* results_row (results/results_row.h): a row written cell by cell against its
 * file's column table. The text of a row written here is compared with one
 * typed out in the test (integers, %.9g reals, "nan" for either sign of NaN,
 * an empty budget_fraction); every table of sim, analyze and fidelity takes
 * one value of each column's kind and gives as many cells as its header has
 * names; and each misuse (a row ended short, a value past the last column, a
 * value of the wrong kind, an empty cell where the table allows none) aborts
 * the program that made it, run here in a child process. */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <sys/wait.h>

#include "results/fidelity_schema.h"
#include "results/results_row.h"

/* What tmpfile f holds, into buf. */
static void contents(FILE *f, char *buf, size_t cap)
{
    fflush(f);
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
}

static void typed_row(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    results_row w = results_row_begin(f, &RESULTS_SCHEMA_HEAD_IMPORTANCE); /* layer,kv_head,score,concentration */
    results_row_int(&w, 3), results_row_int(&w, 1), results_row_real(&w, -NAN), results_row_real(&w, 0.1);
    results_row_end(&w);
    w = results_row_begin(f, &RESULTS_SCHEMA_LOGDET); /* config,policy,params,budget,allocator,budget_fraction,... */
    results_row_text(&w, "knorm"), results_row_text(&w, "knorm"), results_row_text(&w, "");
    results_row_int(&w, 64), results_row_text(&w, "uniform"), results_row_fraction(&w, NAN);
    results_row_int(&w, 0), results_row_int(&w, 2), results_row_real(&w, -1234567.891234);
    results_row_end(&w);
    char buf[256];
    contents(f, buf, sizeof buf);
    assert_string_equal(buf, "3,1,nan,0.1\nknorm,knorm,,64,uniform,,0,2,-1234567.89\n");
    fclose(f);
}

/* One value of column c's kind. */
static void any_value(results_row *w, const results_col *c)
{
    switch (c->kind) {
    case SC_TEXT: case SC_CONFIG: case SC_POLICY: case SC_PARAMS: case SC_ALLOC: case SC_PHASE:
        results_row_text(w, "x");
        break;
    case SC_FRACTION: results_row_fraction(w, 0.5); break;
    case SC_REAL: case SC_NONNEG: case SC_UNIT: case SC_CORR: results_row_real(w, 0.5); break;
    default: results_row_int(w, 1); break;
    }
}

static void every_table(void **state)
{
    (void)state;
    const results_schema *const *lists[] = {RESULTS_SCHEMAS, FID_SCHEMAS};
    const int counts[] = {RESULTS_N_SCHEMAS, FID_N_SCHEMAS};
    int tables = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < counts[l]; i++, tables++) {
            const results_schema *s = lists[l][i];
            kv_err err = {0};
            FILE *f = results_schema_create(tu_dir, s, &err);
            assert_non_null(f);
            results_row w = results_row_begin(f, s);
            for (int c = 0; c < s->n_cols; c++) any_value(&w, &s->cols[c]);
            results_row_end(&w);
            assert_int_equal(csv_close(f, s->file, &err), KV_OK);
            char path[512], text[8192];
            snprintf(path, sizeof path, "%s/%s", tu_dir, s->file);
            FILE *r = fopen(path, "r");
            assert_non_null(r);
            contents(r, text, sizeof text);
            fclose(r);
            char *second = strchr(text, '\n');
            assert_non_null(second);
            int header = 0, row = 0;
            for (const char *p = text; p < second; p++) header += *p == ',';
            for (const char *p = second + 1; *p; p++) row += *p == ',';
            assert_int_equal(header, s->n_cols - 1);
            assert_int_equal(row, s->n_cols - 1);
        }
    assert_true(tables >= 24);
}

typedef enum { SHORT_ROW, PAST_END, WRONG_KIND, EMPTY_NOT_ALLOWED } misuse;

/* Whether the misuse, done in a child, kills it with SIGABRT. */
static bool aborts(misuse m)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(2);
        FILE *f = tmpfile();
        if (!f) _exit(2);
        results_row w = results_row_begin(f, &RESULTS_SCHEMA_PCA_VAR); /* layer,kv_head,var_pc1,var_pc2,var_total */
        results_row_int(&w, 0);
        if (m == WRONG_KIND) results_row_real(&w, 1.0);
        if (m == EMPTY_NOT_ALLOWED) results_row_none(&w);
        results_row_int(&w, 0), results_row_real(&w, 1.0), results_row_real(&w, 1.0);
        if (m != SHORT_ROW) results_row_real(&w, 1.0);
        if (m == PAST_END) results_row_real(&w, 1.0);
        results_row_end(&w);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void misuse_aborts(void **state)
{
    (void)state;
    assert_true(aborts(SHORT_ROW));
    assert_true(aborts(PAST_END));
    assert_true(aborts(WRONG_KIND));
    assert_true(aborts(EMPTY_NOT_ALLOWED));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(typed_row),
        cmocka_unit_test(every_table),
        cmocka_unit_test(misuse_aborts),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
