/* results.csv (a copy of sim's, analysis_dir.md) read for the per-layer
 * error figure: out_rel_err_mean of the phase=all rows, averaged over the
 * query heads of each (configuration, budget, layer) (and of a study's
 * traces; a --chunks run's first chunk only). Columns are found by
 * name, so added columns (a configuration label, a renamed head column) do
 * not matter; the ones used must be there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_input.h"
#include "plot_table.h"

static const int64_t BIG = (int64_t)1 << 40;

enum { C_POLICY, C_PARAMS, C_BUDGET, C_ALLOC, C_LAYER, C_PHASE, C_ERR, N_COLS };
static const char *const COLS[N_COLS] = {"policy", "params", "budget", "allocator", "layer", "phase",
                                         "out_rel_err_mean"};

static int find_columns(const csv_table *c, int *col, kv_err *err)
{
    for (int k = 0; k < N_COLS; k++) {
        col[k] = csv_column(c, COLS[k]);
        if (col[k] < 0) return kv_fail(err, KV_EINPUT, "%s:1: header has no '%s' column", c->path, COLS[k]);
    }
    return KV_OK;
}

static int by_key(const void *a, const void *b)
{
    const plot_layer_err *p = a, *q = b;
    if (p->series != q->series) return p->series < q->series ? -1 : 1;
    if (p->budget != q->budget) return p->budget < q->budget ? -1 : 1;
    return (p->layer > q->layer) - (p->layer < q->layer);
}

/* Sorts the per-head rows and folds each (series, budget, layer) into one mean. */
static void fold(plot_data *d)
{
    qsort(d->layers, d->n_layers, sizeof *d->layers, by_key);
    size_t n = 0;
    for (size_t i = 0; i < d->n_layers; i++) {
        if (n && by_key(&d->layers[n - 1], &d->layers[i]) == 0) {
            d->layers[n - 1].err_mean += d->layers[i].err_mean;
            d->layers[n - 1].n_heads++;
        } else {
            d->layers[n++] = d->layers[i];
        }
    }
    for (size_t i = 0; i < n; i++) d->layers[i].err_mean /= (double)d->layers[i].n_heads;
    d->n_layers = n;
}

int plot_input_layers(plot_data *d, kv_err *err)
{
    csv_table c;
    int col[N_COLS];
    int rc = plot_table_open(d, PF_RESULTS, &c, err);
    if (!rc && d->present[PF_RESULTS]) rc = find_columns(&c, col, err);
    if (!rc && d->present[PF_RESULTS] && c.n_rows)
        d->layers = kv_calloc(c.n_rows, sizeof *d->layers, c.path, err), rc = d->layers ? 0 : 1;
    char where[4300];
    /* a --chunks run: the first chunk's rows, as figure 5 (a study's traces are averaged with the heads) */
    const int chunk = d->present[PF_RESULTS] ? csv_column(&c, "chunk") : -1;
    for (size_t r = 0; !rc && d->present[PF_RESULTS] && r < c.n_rows; r++) {
        if (strcmp(csv_cell(&c, r, col[C_PHASE]), "all") != 0) continue;
        if (chunk >= 0 && strcmp(csv_cell(&c, r, chunk), csv_cell(&c, 0, chunk)) != 0) continue;
        plot_layer_err e = {.n_heads = 1};
        snprintf(where, sizeof where, "%s:%ld", c.path, c.lines[r]);
        if ((rc = plot_series_id(&d->series, csv_cell(&c, r, col[C_POLICY]), csv_cell(&c, r, col[C_PARAMS]),
                                 csv_cell(&c, r, col[C_ALLOC]), where, &e.series, err)) ||
            (rc = csv_int(&c, r, col[C_BUDGET], 1, BIG, &e.budget, err)) ||
            (rc = csv_int(&c, r, col[C_LAYER], 0, d->meta.L - 1, &e.layer, err)) ||
            (rc = csv_double(&c, r, col[C_ERR], true, &e.err_mean, err)))
            break;
        if (isnan(e.err_mean)) continue;   /* no measured query in this row (docs/sim.md#metrics) */
        if (e.err_mean < 0) rc = csv_fail(&c, r, err, "out_rel_err_mean is negative");
        else d->layers[d->n_layers++] = e;
    }
    if (!rc && d->n_layers) fold(d);
    csv_free(&c);
    return rc;
}
