/* heldout_paired: the fitted policy against a baseline on the same test traces: the mean over traces
 * of the per-trace difference of out_rel_err, with study/'s percentile bootstrap interval (the
 * resamples sim's summary.csv uses), from sim's summary_by_trace.csv (phase all). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "search/heldout.h"

static int column(const csv_table *t, const char *name, kv_err *err)
{
    const int c = csv_column(t, name);
    return c >= 0 ? c : -kv_fail(err, KV_EFAIL, "%s: no column %s", t->path, name);
}

/* x[i]: the trace test->t[i]'s out_rel_err_mean of policy at budget (NaN when absent). */
static int per_trace(const csv_table *t, const int *c, const char *policy, int64_t budget, const study_set *test,
                     double *x, kv_err *err)
{
    for (int i = 0; i < test->n; i++) x[i] = NAN;
    int rc = KV_OK;
    for (size_t j = 0; !rc && j < t->n_rows; j++) {
        int64_t b;
        if (strcmp(csv_cell(t, j, c[0]), policy) != 0 || strcmp(csv_cell(t, j, c[2]), "all") != 0) continue;
        rc = csv_int(t, j, c[1], 1, INT64_MAX, &b, err);
        for (int i = 0; !rc && b == budget && i < test->n; i++)
            if (strcmp(csv_cell(t, j, c[3]), test->t[i].id) == 0) rc = csv_double(t, j, c[4], true, &x[i], err);
    }
    return rc;
}

int heldout_paired(const char *dir, const char *fitted, const char *baseline, int64_t budget, const study_set *test,
                   double out[3], kv_err *err)
{
    char d[4200];
    snprintf(d, sizeof d, "%s/heldout", dir);
    csv_table t = {0};
    bool present;
    int rc = csv_read(&t, d, "summary_by_trace.csv", &present, err);
    static const char *const NAMES[] = {"policy", "budget", "phase", "trace", "out_rel_err_mean"};
    int c[5];
    for (int k = 0; !rc && k < 5; k++)
        if ((c[k] = column(&t, NAMES[k], err)) < 0) rc = KV_EFAIL;
    double *x = rc ? NULL : calloc(2 * (size_t)test->n, sizeof *x);
    if (!rc && !x) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc) rc = per_trace(&t, c, fitted, budget, test, x, err);
    if (!rc) rc = per_trace(&t, c, baseline, budget, test, x + test->n, err);
    int32_t *idx = rc ? NULL : study_resamples(test->n, err);
    if (!rc && !idx) rc = KV_EFAIL;
    if (!rc) {
        for (int i = 0; i < test->n; i++) x[i] -= x[test->n + i];
        study_mean_ci(x, test->n, idx, &out[0], &out[1], &out[2]);
    }
    free(idx), free(x);
    csv_free(&t);
    return rc;
}
