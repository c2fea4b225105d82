#include "plot_table.h"

#include <stdio.h>

const char *const PLOT_FILES[PF_N] = {"meta.csv", "spearman.csv", "logdet.csv", "pca.csv", "pca_runs.csv",
                                      "pca_var.csv", "detail.csv", "summary.csv", "timing.csv",
                                      "results.csv"};

int plot_table_open(plot_data *d, int file, const char *const *cols, int n, bool open_ended, csv_table *c,
                    kv_err *err)
{
    bool present = false;
    int rc = csv_read(c, d->dir, PLOT_FILES[file], &present, err);
    d->present[file] = present;
    if (rc || !present) return rc;
    return csv_expect(c, cols, n, open_ended, err);
}

int plot_table_series(plot_data *d, const csv_table *c, size_t row, int col_policy, int *id, kv_err *err)
{
    char where[4300];
    snprintf(where, sizeof where, "%s:%ld", c->path, c->lines[row]);
    return plot_series_id(&d->series, csv_cell(c, row, col_policy), csv_cell(c, row, col_policy + 1), where, id,
                          err);
}
