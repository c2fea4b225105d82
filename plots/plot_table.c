#include "plot_table.h"

#include <stdio.h>
#include <string.h>

const char *const PLOT_FILES[PF_N] = {"meta.csv", "spearman.csv", "logdet.csv", "pca.csv", "pca_kept.csv",
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
    char where[4300];
    snprintf(where, sizeof where, "%s:%ld", c->path, c->lines[row]);
    return plot_series_id(&d->series, policy, params, where, id, err);
}
