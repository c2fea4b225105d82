#include "plot_table.h"

#include <stdio.h>
#include <string.h>

const char *const PLOT_FILES[PF_N] = {"meta.csv", "spearman.csv", "logdet.csv", "pca.csv", "pca_kept.csv",
                                      "pca_var.csv", "detail.csv", "summary.csv", "timing.csv",
                                      "results.csv", "budgets.csv", "head_importance.csv", "spans.csv",
                                      "spans_summary.csv"};

/* The schema of each file (results/results_schema.c: the tables the writers use). */
static const results_schema *const SCHEMAS[PF_N] = {
    &RESULTS_SCHEMA_META, &RESULTS_SCHEMA_SPEARMAN, &RESULTS_SCHEMA_LOGDET, &RESULTS_SCHEMA_PCA,
    &RESULTS_SCHEMA_PCA_KEPT, &RESULTS_SCHEMA_PCA_VAR, &RESULTS_SCHEMA_DETAIL, &RESULTS_SCHEMA_SUMMARY,
    &RESULTS_SCHEMA_TIMING, &RESULTS_SCHEMA_RESULTS, &RESULTS_SCHEMA_BUDGETS, &RESULTS_SCHEMA_HEAD_IMPORTANCE,
    &RESULTS_SCHEMA_SPANS, &RESULTS_SCHEMA_SPANS_SUMMARY};

/* Whether a file's rows name runs (a config column, wherever it is: spans.csv's is the third). */
static bool names_runs(const results_schema *s)
{
    for (int j = 0; j < s->n_cols; j++)
        if (s->cols[j].kind == SC_CONFIG) return true;
    return false;
}

int plot_table_open(plot_data *d, int file, csv_table *c, kv_err *err)
{
    bool present = false;
    int rc = csv_read(c, d->dir, PLOT_FILES[file], &present, err);
    d->present[file] = present;
    if (rc || !present) return rc;
    const results_dims dims = {.L = d->meta.L, .H = d->meta.H, .K = d->meta.K, .T = d->meta.T,
                               .max_abs = PLOT_MAX_ABS};
    results_runs runs = {0};
    rc = results_schema_check(c, SCHEMAS[file], &dims, &runs, err);
    /* every file that names runs names summary.csv's (logdet.csv also the whole trace, full_cache);
     * a header-only file has no rows to disagree: its figure is skipped with a note */
    char ref[4300];
    snprintf(ref, sizeof ref, "%s/%s", d->dir, PLOT_FILES[PF_SUMMARY]);
    if (!rc && file != PF_SUMMARY && d->present[PF_SUMMARY] && c->n_rows && names_runs(SCHEMAS[file]))
        rc = results_runs_match(&runs, c->path, &d->runs_ref, ref, file == PF_LOGDET ? "full_cache" : NULL, err);
    if (!rc && file == PF_SUMMARY) d->runs_ref = runs;
    else results_runs_free(&runs);
    return rc;
}

/* Whether config is policy, or policy ":" params when params is not empty
 * (the label analyze and sim write; docs/outputs.md). */
static bool config_matches(const char *config, const char *policy, const char *params)
{
    size_t n = strlen(policy);
    if (strncmp(config, policy, n) != 0) return false;
    return params[0] ? config[n] == ':' && strcmp(config + n + 1, params) == 0 : config[n] == '\0';
}

int plot_table_series(plot_data *d, const csv_table *c, size_t row, int col_config, int *id, kv_err *err)
{
    const char *config = csv_cell(c, row, col_config), *policy = csv_cell(c, row, col_config + 1),
               *params = csv_cell(c, row, col_config + 2);
    if (!config_matches(config, policy, params))
        return csv_fail(c, row, err, "config '%.200s' is not policy '%.60s' with params '%.200s'", config, policy,
                        params);
    /* sim's run columns (and analyze's since allocators): allocator after budget */
    const int a = col_config + 4;
    const char *alloc = a < c->n_cols && strcmp(c->header[a], "allocator") == 0 ? csv_cell(c, row, a) : "uniform";
    char where[4300];
    snprintf(where, sizeof where, "%s:%ld", c->path, c->lines[row]);
    return plot_series_id(&d->series, policy, params, alloc, where, id, err);
}
