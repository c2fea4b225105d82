/* Figure 7: out_rel_err by layer at one budget, one line per policy
 * configuration (results.csv, phase=all, mean over each layer's query
 * heads). The budget drawn is the smallest at which something is evicted
 * (N < T): where the policies differ most. The data file holds every
 * budget, and the script draws the one named in its variable B, so
 * `B = 128` at its top redraws another. Log y axis when any error is above
 * 0; an exact 0 (full) is left out of it. */
#include <stdio.h>
#include <stdlib.h>

#include "plot_figures.h"

/* The budget drawn: the smallest below T, else the smallest. */
static int64_t chosen_budget(const plot_data *d)
{
    int64_t below = INT64_MAX, any = INT64_MAX;
    for (size_t i = 0; i < d->n_layers; i++) {
        const int64_t b = d->layers[i].budget;
        any = b < any ? b : any;
        if (b < d->meta.T) below = b < below ? b : below;
    }
    return below != INT64_MAX ? below : any;
}

/* One block (index) per series, rows "budget layer err" by budget then layer,
 * a blank line between budgets so that lines never join two budgets. d->layers
 * is sorted by series, budget, layer (plot_input_layers.c). */
static int write_data(const plot_data *d, const plot_ctx *ctx, plot_fig_out *out, const char *file, int *order,
                      int *blocks, kv_err *err)
{
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    fputs("# one block (index) per policy configuration; rows: budget layer out_rel_err_mean (mean over the\n"
          "# layer's query heads, phase=all), a blank line between budgets\n", f);
    *blocks = 0;
    for (size_t i = 0; i < d->n_layers; i++) {
        const plot_layer_err *e = &d->layers[i];
        if (i == 0 || e->series != d->layers[i - 1].series) {
            const plot_series *s = &d->series.s[e->series];
            KV_ASSERT(*blocks < d->series.n);
            fprintf(f, "%s# index %d: %s %s\n", *blocks ? "\n\n" : "", *blocks, s->policy, s->params);
            order[(*blocks)++] = e->series;
        } else if (e->budget != d->layers[i - 1].budget) {
            fputc('\n', f);
        }
        fprintf(f, "%lld %lld ", (long long)e->budget, (long long)e->layer);
        plot_num(f, e->err_mean);
        fputc('\n', f);
    }
    return plot_close(f, ctx, file, err);
}

static void write_script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const char *data,
                         const int *order, int blocks, int64_t budget, bool log_y)
{
    plot_gp_preamble(f, ctx, name, "output error by layer at one budget", 1200, 500);
    fprintf(f, "B = %lld   # the budget drawn: any budget of %s\n", (long long)budget, data);
    /* the title centred on the canvas (a plot title centres on the plot area, which the legend at its right
     * narrows, and a long one was cut at the left) */
    fprintf(f, "set tmargin 3\nset label 1 sprintf('Output relative error by layer at cache budget N = %%d (mean over "
               "each layer''s query heads and queries at positions >= N)', B) at screen 0.5, screen 0.965 center "
               "font ',12'\n");
    fprintf(f, "set xlabel 'layer'\nset ylabel 'out_rel_err, mean%s'\n", log_y ? " (log scale)" : "");
    fprintf(f, "set xrange [-0.3:%g]\n", (double)d->meta.L - 0.7);
    if (d->meta.L <= 40) fprintf(f, "set xtics 1\n");
    if (log_y) fprintf(f, "set logscale y 10\nset format y '%%g'\n");
    else fprintf(f, "set yrange [0:*]\n");
    fprintf(f, "set key outside right top\n");
    plot_gp_lines(f, d, data, order, blocks, log_y ? "2:($1 == B && $3 > 0 ? $3 : NaN)" : "2:($1 == B ? $3 : NaN)");
}

int plot_fig_layers(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_RESULTS])
        return plot_skip(out, "results.csv is missing (analyze ran without --results, or the analysis directory "
                              "predates its copy of results.csv).");
    if (!d->n_layers) return plot_skip(out, "results.csv has no phase=all rows.");
    const int64_t budget = chosen_budget(d);
    bool log_y = false;
    for (size_t i = 0; i < d->n_layers; i++) log_y = log_y || (d->layers[i].budget == budget && d->layers[i].err_mean > 0);
    char data[64], script[64];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(script, sizeof script, "%s.gp", name);
    int *order = malloc((size_t)(d->series.n ? d->series.n : 1) * sizeof *order), blocks = 0;
    if (!order) return kv_fail(err, KV_EFAIL, "plot: out of memory");
    FILE *f;
    int rc = write_data(d, ctx, out, data, order, &blocks, err);
    if (!rc) rc = plot_open(ctx, script, &f, err);
    if (!rc) {
        write_script(f, d, ctx, name, data, order, blocks, budget, log_y);
        rc = plot_close(f, ctx, script, err);
    }
    free(order);
    snprintf(out->caption, sizeof out->caption,
             "The output relative error ||o_S − o_full|| / ||o_full|| per layer at cache budget N = %lld (the "
             "smallest budget below the trace length: where policies differ most), one line per policy "
             "configuration: results.csv's phase = all rows, averaged over each layer's query heads (so the mean "
             "of a line over the layers is figure 5's value at this budget). %sHow to read it: a policy can be "
             "good on average and poor in a few layers (often the first); lower is better. %s.dat holds every "
             "budget: set B at the top of %s.gp to draw another.",
             (long long)budget,
             log_y ? "The y axis is logarithmic; an error of exactly 0 (full) is left out. " : "", name, name);
    return rc;
}
