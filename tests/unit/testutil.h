/* Helpers shared by the unit tests (header-only; each test is one program). */
#ifndef KV_TESTUTIL_H
#define KV_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* Marks the running test skipped, never passed: a "# skip: REASON" line (which
 * tests/run_all.sh reports once at the end), then cmocka's skip(), which with
 * CMOCKA_MESSAGE_OUTPUT=TAP prints "not ok N # SKIP name" and leaves the test. */
static inline void tu_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tu_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# skip: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    skip();
}

/* The test model directory ($KVTRACE_MODEL_DIR: tests/run_all.sh makes it from
 * stories260K.gguf, with derived/ and the golden values); skips the running
 * test when it is not set. */
static inline const char *tu_model_dir(void)
{
    const char *dir = getenv("KVTRACE_MODEL_DIR");
    if (!dir || !*dir) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    return dir;
}

/* A fresh temporary directory per test program; path written into buf. */
static inline void tu_tmpdir(char *buf, size_t cap)
{
    snprintf(buf, cap, "/tmp/kvtrace-test-XXXXXX");
    assert_non_null(mkdtemp(buf));
}

static inline void tu_rmdir(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* One temporary directory per test group: pass these to cmocka_run_group_tests. */
static char tu_dir[256];

static inline int tu_group_setup(void **state)
{
    (void)state;
    tu_tmpdir(tu_dir, sizeof tu_dir);
    return 0;
}

static inline int tu_group_teardown(void **state)
{
    (void)state;
    tu_rmdir(tu_dir);
    return 0;
}

/* Number of entries in a directory (to prove nothing was left behind). */
static inline int tu_count_entries(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int n = -1;
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

/* |got - ref| <= abs + rel * |ref|; prints the first failures with context. */
static inline int tu_close_array(const char *what, const double *ref, const float *got, size_t n,
                                 double abs_tol, double rel_tol)
{
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = ref[i] - (double)got[i];
        if (d < 0) d = -d;
        double lim = abs_tol + rel_tol * (ref[i] < 0 ? -ref[i] : ref[i]);
        if (d > worst) worst = d;
        if (!(d <= lim)) {
            if (bad < 5) printf("# %s[%zu]: ref %.9g got %.9g (diff %.3g > %.3g)\n", what, i, ref[i], (double)got[i], d, lim);
            bad++;
        }
    }
    printf("# %s: %zu values, max abs diff %.3g, %d outside tolerance\n", what, n, worst, bad);
    return bad;
}

#endif
