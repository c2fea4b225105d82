/* Figure 9: output error versus the prefill chunk B (sim --chunks,
 * docs/sim.md#chunk-sizes---chunks-list). During a chunk the cache holds N + B rows, so B is an axis of its
 * own: one panel per budget (the first PLOT_MAX_DATA budgets of
 * summary.csv), one line per policy configuration, x the chunk; a study's
 * 95% intervals over traces as bands. summary.csv, phase = all. */
#include <stdio.h>
#include <stdlib.h>

#include "plot_figures.h"

/* The distinct values of the summary's budgets (or chunks) in order of first appearance. */
static int distinct(const plot_data *d, bool chunk, int64_t *v, int cap)
{
    int n = 0;
    for (size_t i = 0; i < d->n_summary; i++) {
        const int64_t x = chunk ? d->summary[i].chunk : d->summary[i].budget;
        int k = 0;
        while (k < n && v[k] != x) k++;
        if (k == n && n < cap) v[n++] = x;
    }
    return n;
}

/* Budget b's data file: one block per configuration, rows by chunk; *blocks and order[] as plot_write_blocks. */
static int write_panel_data(const plot_data *d, const plot_ctx *ctx, plot_fig_out *out, const char *file, int64_t b,
                            bool band, plot_point *pts, int *order, int *blocks, kv_err *err)
{
    size_t n = 0;
    for (size_t i = 0; i < d->n_summary; i++) {
        const plot_summary *s = &d->summary[i];
        if (s->budget == b)
            pts[n++] = (plot_point){s->series, s->chunk, s->err_mean, s->recall_mean, band, s->err_lo, s->err_hi,
                                    s->recall_lo, s->recall_hi};
    }
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    fprintf(f, "# budget %lld: one block (index) per policy configuration, rows by chunk: chunk out_rel_err_mean "
               "attn_recall_mean%s\n", (long long)b,
            band ? " out_rel_err_mean_ci_lo out_rel_err_mean_ci_hi attn_recall_mean_ci_lo attn_recall_mean_ci_hi" : "");
    *blocks = plot_write_blocks(f, d, pts, n, order);
    return plot_close(f, ctx, file, err);
}

static int write_chunks(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out,
                        const int64_t *budgets, int nb, bool band, kv_err *err)
{
    plot_point *pts = malloc(d->n_summary * sizeof *pts);
    int *order = malloc((size_t)(d->series.n ? d->series.n : 1) * sizeof *order);
    char script[64];
    snprintf(script, sizeof script, "%s.gp", name);
    FILE *f = NULL;
    int rc = pts && order ? plot_open(ctx, script, &f, err) : kv_fail(err, KV_EFAIL, "plot: out of memory");
    if (!rc) {
        const int key = plot_key_px(d, 10), width = 420 * nb + 40 + key;
        plot_gp_preamble(f, ctx, name, "output error versus prefill chunk", width, 480);
        fprintf(f, "set multiplot layout 1,%d margins %.3f,%.3f,0.12,0.85 spacing 0.06 title 'Output relative error "
                   "versus prefill chunk B (the cache holds N + B rows during a chunk)' font ',13'\n", nb,
                70.0 / width, 1.0 - (key + 24.0) / width);
        fprintf(f, "set xlabel 'prefill chunk B (tokens)'\nset ylabel 'out_rel_err, mean'\nset yrange [0:*]\n");
    }
    for (int k = 0; !rc && k < nb; k++) {
        char data[64];
        int blocks = 0;
        snprintf(data, sizeof data, "%s_N%lld.dat", name, (long long)budgets[k]);
        rc = write_panel_data(d, ctx, out, data, budgets[k], band, pts, order, &blocks, err);
        if (rc) break;
        size_t n = 0;
        for (size_t i = 0; i < d->n_summary; i++)
            if (d->summary[i].budget == budgets[k]) pts[n++].budget = d->summary[i].chunk;
        plot_gp_budget_axis(f, pts, n);
        fprintf(f, "set title 'budget N = %lld'\n", (long long)budgets[k]);
        if (k == nb - 1) fprintf(f, "set key at screen 0.995, screen 0.85 top right maxrows %d\n", d->series.n);
        else fprintf(f, "unset key\n");
        if (band) plot_gp_bands(f, d, data, order, blocks, "1:4:5");
        plot_gp_lines_more(f, d, data, order, blocks, "1:2", band);
        fprintf(f, "unset logscale x\n");
    }
    if (f) {
        fprintf(f, "unset multiplot\n");
        int c = plot_close(f, ctx, script, err);
        if (!rc) rc = c;
    }
    free(pts), free(order);
    return rc;
}

int plot_fig_chunks(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_SUMMARY])
        return plot_skip(out, "summary.csv is missing (analyze ran without --results, so there are no sim runs).");
    int64_t chunks[2], budgets[PLOT_MAX_DATA];
    if (distinct(d, true, chunks, 2) < 2)
        return plot_skip(out, "one chunk size only (sim --chunks LIST sweeps several).");
    const int nb = distinct(d, false, budgets, PLOT_MAX_DATA);
    int64_t traces = 1;
    for (size_t i = 0; i < d->n_summary; i++) traces = d->summary[i].n_traces > traces ? d->summary[i].n_traces : traces;
    int rc = write_chunks(d, ctx, name, out, budgets, nb, traces > 1, err);
    snprintf(out->caption, sizeof out->caption,
             "The output relative error ||o_S − o_full|| / ||o_full|| against the prefill chunk B (sim --chunks), one "
             "panel per cache budget N (at most the first %d budgets of summary.csv), one line per policy "
             "configuration; means over layers, query heads and the queries at positions i ≥ N (summary.csv, phase "
             "= all).%s How to read it: while a chunk is processed the cache holds the N kept rows plus the B new "
             "ones, so a larger chunk gives every query more keys and usually a lower error; a policy whose line "
             "falls steeply depends on the chunk, a flat one does not. Compare policies at one B.",
             PLOT_MAX_DATA, traces > 1 ? " A study: each line is the mean over its traces and the shaded band the "
             "95% percentile bootstrap interval over traces (summary.csv's _ci_lo, _ci_hi)." : "");
    return rc;
}
