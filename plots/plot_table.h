/* plot_table: one file of the analysis directory read as a table, for the
 * readers in plot_input.c and plot_input_pca.c: the file's name
 * (PLOT_FILES), its presence recorded in plot_data, its rows checked against
 * the file's schema (results/results_schema.h, the writers' tables), and
 * the series of a row's (config, policy, params) cells. */
#ifndef KV_PLOT_TABLE_H
#define KV_PLOT_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/csv.h"
#include "results/results_schema.h"
#include "plot_input.h"

/* Reads d->dir/PLOT_FILES[file] into c and records d->present[file]; a
 * missing file leaves an empty table and is not an error. Everything
 * results_schema_check checks (header, kinds, ranges against meta.csv's L,
 * H, K, T, what a figure can draw, unique keys, row counts) is checked
 * here, and the runs of a file that names runs must be summary.csv's. */
int plot_table_open(plot_data *d, int file, csv_table *c, kv_err *err);

/* The series id of row `row`'s cells (config at col_config, then policy and
 * params, and the allocator 4 columns after config when the header has one
 * there, "uniform" otherwise), added to d->series if new; config must be the
 * label of policy and params. Errors name "FILE:LINE". */
int plot_table_series(plot_data *d, const csv_table *c, size_t row, int col_config, int *id, kv_err *err);

#endif
