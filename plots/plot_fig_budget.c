/* Figures 5 and 6: quantities versus the cache budget, one line per policy
 * configuration. Figure 5: out_rel_err (log y axis: the good policies would
 * pile up at 0 on a linear one; exact zeros, such as `full`'s, are left out)
 * and attn_recall (means over layers, heads and queries; summary.csv,
 * phase=all), two panels. Figure 6: the policy's scoring time per candidate
 * (timing.csv). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_figures.h"

/* Writes DATA (blocks) and SCRIPT's head; *order gets the block series. Caller writes the panels. */
static int write_data(const plot_data *d, const plot_ctx *ctx, plot_fig_out *out, const char *file, plot_point *pts,
                      size_t n, const char *columns, int *order, int *blocks, kv_err *err)
{
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    fprintf(f, "# one block (index) per policy configuration, rows by budget: %s\n", columns);
    *blocks = plot_write_blocks(f, d, pts, n, order);
    return plot_close(f, ctx, file, err);
}

static void error_script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const char *data,
                         const plot_point *pts, size_t n, const int *order, int blocks)
{
    /* two panels side by side and the legend in a column of its own at the right, as wide as its labels */
    const int key = plot_key_px(d, 10), width = 990 + key > 1200 ? 990 + key : 1200;
    plot_gp_preamble(f, ctx, name, "output error and attention recall versus budget", width, 500);
    fprintf(f, "set multiplot layout 1,2 margins %.3f,%.3f,0.12,0.87 spacing 0.08 title 'Eviction cost versus cache "
               "budget (mean over layers, heads and queries at positions >= N)' font ',13'\n", 84.0 / width,
            1.0 - (key + 24.0) / width);
    plot_gp_budget_axis(f, pts, n);
    fprintf(f, "set xlabel 'cache budget N (tokens)'\n");
    fprintf(f, "set title 'Output relative error (lower is better)'\n");
    bool log_y = false; /* any error above 0 to draw on a log axis */
    for (size_t i = 0; i < n; i++) log_y = log_y || pts[i].y1 > 0;
    fprintf(f, "set ylabel 'out_rel_err, mean  (||o_S - o_full|| / ||o_full||%s)'\n", log_y ? ", log scale" : "");
    if (log_y) fprintf(f, "set logscale y 10\nset format y '%%g'\n");
    else fprintf(f, "set yrange [0:*]\n");
    fprintf(f, "unset key\n");
    /* an exact 0 (full, or nothing evicted yet) has no place on a log axis: left out, said in the caption */
    const bool band = n > 0 && pts[0].band;
    if (band) plot_gp_bands(f, d, data, order, blocks, log_y ? "1:($4 > 0 ? $4 : NaN):5" : "1:4:5");
    plot_gp_lines_more(f, d, data, order, blocks, log_y ? "1:($2 > 0 ? $2 : NaN)" : "1:2", band);
    if (log_y) fprintf(f, "unset logscale y\nset format y '%%g'\n");
    fprintf(f, "\nset title 'Attention recall (higher is better)'\n");
    fprintf(f, "set ylabel 'attn_recall, mean  (full-cache attention mass kept)'\nset yrange [*:1.02]\n");
    fprintf(f, "set key at screen 0.995, screen 0.87 top right maxrows %d\n", d->series.n);
    if (band) plot_gp_bands(f, d, data, order, blocks, "1:6:7");
    plot_gp_lines_more(f, d, data, order, blocks, "1:3", band);
    fprintf(f, "unset multiplot\n");
}

static int write_figure(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, plot_point *pts,
                        size_t n, bool error, kv_err *err)
{
    char data[64], script[64];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(script, sizeof script, "%s.gp", name);
    int *order = malloc((size_t)(d->series.n ? d->series.n : 1) * sizeof *order), blocks = 0;
    if (!order) return kv_fail(err, KV_EFAIL, "plot: out of memory");
    const char *cols = !error ? "budget score_ns_per_candidate calls"
                       : n > 0 && pts[0].band ? "budget out_rel_err_mean attn_recall_mean out_rel_err_mean_ci_lo "
                                                "out_rel_err_mean_ci_hi attn_recall_mean_ci_lo attn_recall_mean_ci_hi"
                                              : "budget out_rel_err_mean attn_recall_mean";
    int rc = write_data(d, ctx, out, data, pts, n, cols, order, &blocks, err);
    FILE *f;
    if (!rc) rc = plot_open(ctx, script, &f, err);
    if (!rc) {
        if (error) {
            error_script(f, d, ctx, name, data, pts, n, order, blocks);
        } else {
            plot_gp_preamble(f, ctx, name, "policy scoring time versus budget", 1200, 500);
            fprintf(f, "set title 'Policy scoring time per candidate versus cache budget'\n");
            plot_gp_budget_axis(f, pts, n);
            double lo = pts[0].y1, hi = pts[0].y1;
            for (size_t i = 1; i < n; i++) lo = pts[i].y1 < lo ? pts[i].y1 : lo, hi = pts[i].y1 > hi ? pts[i].y1 : hi;
            if (lo > 0 && hi > 20 * lo) fprintf(f, "set logscale y 10\n");
            else fprintf(f, "set yrange [0:*]\n");
            fprintf(f, "set xlabel 'cache budget N (tokens)'\nset ylabel 'scoring time (ns per candidate)'\n");
            fprintf(f, "set key outside right top\n");
            plot_gp_lines(f, d, data, order, blocks, "1:2");
        }
        rc = plot_close(f, ctx, script, err);
    }
    free(order);
    return rc;
}

int plot_fig_error(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_SUMMARY])
        return plot_skip(out, "summary.csv is missing (analyze ran without --results, so there are no sim runs).");
    if (!d->n_summary)
        return plot_skip(out, "summary.csv has no phase=all rows.");
    plot_point *pts = malloc(d->n_summary * sizeof *pts);
    if (!pts) return kv_fail(err, KV_EFAIL, "plot: out of memory");
    size_t n = 0;
    int64_t traces = 1;
    for (size_t i = 0; i < d->n_summary; i++) traces = d->summary[i].n_traces > traces ? d->summary[i].n_traces : traces;
    for (size_t i = 0; i < d->n_summary; i++) {   /* a --chunks run: the first chunk's rows (figure 9 has the rest) */
        const plot_summary *s = &d->summary[i];
        if (s->chunk == d->summary[0].chunk)
            pts[n++] = (plot_point){s->series, s->budget, s->err_mean, s->recall_mean, traces > 1, s->err_lo,
                                    s->err_hi, s->recall_lo, s->recall_hi};
    }
    int rc = write_figure(d, ctx, name, out, pts, n, true, err);
    free(pts);
    char more[512] = "";
    if (traces > 1)
        snprintf(more, sizeof more, " A study of %lld traces: each line is the mean over traces (each weighing 1), "
                 "the shaded band around it its 95%% percentile bootstrap interval over traces (summary.csv's _ci_lo "
                 "and _ci_hi).", (long long)traces);
    bool chunks = false;
    for (size_t i = 0; i < d->n_summary; i++) chunks = chunks || d->summary[i].chunk != d->summary[0].chunk;
    if (chunks)
        snprintf(more + strlen(more), sizeof more - strlen(more), " Several chunk sizes: drawn at chunk %lld, the "
                 "first; figure 9 draws the error against the chunk.", (long long)d->summary[0].chunk);
    snprintf(out->caption, sizeof out->caption,
             "Left: the output relative error ||o_S − o_full|| / ||o_full|| of attention over the evicted cache "
             "against the full cache, on a log axis (so that the good policies do not pile up at 0; an error of "
             "exactly 0, as full's and that of any budget at least the trace length, cannot be drawn there and "
             "is left out of this panel); right: the attention recall, the share of the full-cache attention mass "
             "whose keys are still cached. Both are means over layers, query heads and the queries at positions "
             "i ≥ N (summary.csv, phase = all), one line per policy configuration (variants of a policy share a "
             "colour and differ in dash and marker). How to read it: lower-left and upper-right are better; at a "
             "given budget, the lowest error line is the best policy for this trace; full is the reference "
             "(error 0, so only in the right panel, at recall 1). On the log axis equal vertical distances are equal "
             "ratios: a line one grid step lower has a tenth of the error.%s", more);
    return rc;
}

int plot_fig_timing(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_TIMING])
        return plot_skip(out, "timing.csv is missing (analyze ran without --results, so there are no sim runs).");
    plot_point *pts = malloc((d->n_timing ? d->n_timing : 1) * sizeof *pts);
    if (!pts) return kv_fail(err, KV_EFAIL, "plot: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < d->n_timing; i++) /* a configuration that never scored (full, N >= T) has no time */
        if (d->timing[i].calls > 0)
            pts[n++] = (plot_point){.series = d->timing[i].series, .budget = d->timing[i].budget, .y1 = d->timing[i].ns,
                                    .y2 = (double)d->timing[i].calls};
    int rc = KV_OK;
    if (!n) plot_skip(out, "timing.csv has no configuration that scored candidates (calls > 0).");
    else rc = write_figure(d, ctx, name, out, pts, n, false, err);
    free(pts);
    snprintf(out->caption, sizeof out->caption,
             "Nanoseconds the policy spends scoring one candidate (its score function's time divided by the "
             "candidates it scored, timing.csv), per policy configuration and budget; configurations that never "
             "had to evict (full, or budgets at least the trace length) are left out. How to read it: this is the "
             "policy's own overhead, not the attention shared by every policy; lower is cheaper. Times depend on "
             "the machine and vary between runs: compare policies within one run.");
    return rc;
}
