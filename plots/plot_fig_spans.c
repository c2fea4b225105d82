/* Figure 10: span retention (docs/sim.md#spans-what-a-task-cares-about): for each span name (the first
 * PLOT_MAX_DATA of spans_summary.csv, one column of panels each) the three
 * statistics sim measures per span, retention_mean, retention_final and
 * attn_recall (one row of panels each), versus the cache budget, one line per
 * policy configuration, at the first chunk of the file; a study's 95%
 * intervals over traces as bands. The report's span table (plot_report.c)
 * lists every row, every chunk. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plot_figures.h"

static int by_series_budget(const void *a, const void *b)
{
    const plot_span *p = *(const plot_span *const *)a, *q = *(const plot_span *const *)b;
    if (p->series != q->series) return p->series < q->series ? -1 : 1;
    return (p->budget > q->budget) - (p->budget < q->budget);
}

/* Span `span`'s rows at `chunk` into FILE: one block per configuration, rows by budget:
 * budget, then per statistic mean lo hi. Fills order[] and *blocks, and pts[] (the budgets, for the axis). */
static int write_span_data(const plot_data *d, const plot_ctx *ctx, plot_fig_out *out, const char *file, int span,
                           int64_t chunk, const plot_span **rows, plot_point *pts, size_t *n_pts, int *order,
                           int *blocks, kv_err *err)
{
    size_t n = 0;
    for (size_t i = 0; i < d->n_spans; i++)
        if (d->spans[i].span == span && d->spans[i].chunk == chunk) rows[n++] = &d->spans[i];
    qsort(rows, n, sizeof *rows, by_series_budget);
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    fprintf(f, "# span %s, chunk %lld: one block (index) per policy configuration, rows by budget: budget "
               "retention_mean lo hi retention_final lo hi attn_recall lo hi (spans_summary.csv)\n",
            d->span_names[span], (long long)chunk);
    *blocks = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || rows[i]->series != rows[i - 1]->series) {
            const plot_series *s = &d->series.s[rows[i]->series];
            if (*blocks) fputs("\n\n", f);
            fprintf(f, "# index %d: %s %s\n", *blocks, s->policy, s->params);
            order[(*blocks)++] = rows[i]->series;
        }
        fprintf(f, "%lld", (long long)rows[i]->budget);
        for (int k = 0; k < PLOT_SPAN_STATS; k++) {
            const double v[3] = {rows[i]->mean[k], rows[i]->lo[k], rows[i]->hi[k]};
            for (int j = 0; j < 3; j++) fputc(' ', f), plot_num(f, v[j]);
        }
        fputc('\n', f);
        pts[i] = (plot_point){.series = rows[i]->series, .budget = rows[i]->budget};
    }
    *n_pts = n;
    return plot_close(f, ctx, file, err);
}


/* Whether span s has a value of statistic k in any row (an answer that ends the sequence has no query
 * after it: retention_mean and attn_recall are nan in every row). */
static bool span_defined(const plot_data *d, int s, int k, int64_t chunk)
{
    for (size_t i = 0; i < d->n_spans; i++)
        if (d->spans[i].span == s && d->spans[i].chunk == chunk && !isnan(d->spans[i].mean[k])) return true;
    return false;
}

/* One column of panels: span s's three statistics (gnuplot fills the layout column by column). */
static void span_panels(FILE *f, const plot_data *d, int s, int ns, const char *data, const int *order, int blocks,
                        const plot_point *pts, size_t n, bool band, int64_t chunk)
{
    plot_gp_budget_axis(f, pts, n);
    for (int k = 0; k < PLOT_SPAN_STATS; k++) {
        const bool none = !span_defined(d, s, k, chunk);
        if (none)   /* say why the panel is empty rather than leave blank axes */
            fprintf(f, "set label 2 \"no value: no query comes after this span\\n(it ends the sequence), so %s is "
                       "nan\" at graph 0.5, graph 0.5 center font ',9' tc rgb '#666666'\n", PLOT_SPAN_STAT_NAMES[k]);
        char using[32], bands[32];
        snprintf(using, sizeof using, "1:%d", 2 + 3 * k);
        snprintf(bands, sizeof bands, "1:%d:%d", 3 + 3 * k, 4 + 3 * k);
        fprintf(f, "set title '%s: %s' font ',10'\n", d->span_names[s], PLOT_SPAN_STAT_NAMES[k]);
        fprintf(f, "set ylabel '%s'\n", s == 0 ? "fraction" : "");
        fprintf(f, "set xlabel '%s'\n", k == PLOT_SPAN_STATS - 1 ? "cache budget N (tokens)" : "");
        if (s == ns - 1 && k == 0) fprintf(f, "set key at screen 0.995, screen 0.9 top right maxrows %d\n", d->series.n);
        else fprintf(f, "unset key\n");
        if (band) plot_gp_bands(f, d, data, order, blocks, bands);
        plot_gp_lines_more(f, d, data, order, blocks, using, band);
        if (none) fprintf(f, "unset label 2\n");
    }
    fprintf(f, "unset logscale x\n");
}

static int write_spans(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, int ns,
                       int64_t chunk, bool band, kv_err *err)
{
    const plot_span **rows = malloc((d->n_spans ? d->n_spans : 1) * sizeof *rows);
    plot_point *pts = malloc((d->n_spans ? d->n_spans : 1) * sizeof *pts);
    int *order = malloc((size_t)(d->series.n ? d->series.n : 1) * sizeof *order);
    char script[64];
    snprintf(script, sizeof script, "%s.gp", name);
    FILE *f = NULL;
    int rc = rows && pts && order ? plot_open(ctx, script, &f, err) : kv_fail(err, KV_EFAIL, "plot: out of memory");
    const int key = plot_key_px(d, 10), width = 400 * ns + 60 + key;
    if (!rc) {
        /* each of the three rows as tall as the legend (one column of every series: gnuplot wraps it into
         * more columns, over the panels, when the panel beside it is shorter) */
        const int height = 3 * (18 * d->series.n + 130) > 1000 ? 3 * (18 * d->series.n + 130) : 1000;
        plot_gp_preamble(f, ctx, name, "span retention versus budget", width, height);
        fprintf(f, "set multiplot layout 3,%d columnsfirst margins 0.09,%.3f,0.06,0.9 spacing 0.06,0.08 title "
                   "'Span retention versus cache budget (chunk %lld; means over layers and kv heads%s)' font ',13'\n",
                ns, 1.0 - (key + 24.0) / width, (long long)chunk, band ? ", then over traces, 95% bands" : "");
        fprintf(f, "set yrange [0:1.02]\n");
    }
    for (int s = 0; !rc && s < ns; s++) {
        char data[64];
        int blocks = 0;
        size_t n = 0;
        snprintf(data, sizeof data, "%s_%d.dat", name, s);
        rc = write_span_data(d, ctx, out, data, s, chunk, rows, pts, &n, order, &blocks, err);
        if (!rc) span_panels(f, d, s, ns, data, order, blocks, pts, n, band, chunk);
    }
    if (f) {
        fprintf(f, "unset multiplot\n");
        int c = plot_close(f, ctx, script, err);
        if (!rc) rc = c;
    }
    free(rows), free(pts), free(order);
    return rc;
}

int plot_fig_spans(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_SPANS_SUMMARY] || d->n_spans == 0)
        return plot_skip(out, "no spans: spans_summary.csv is %s (sim writes it only for traces with spans, "
                         "e.g. capture --prompts with \"spans\", or a prompts needle set).",
                         d->present[PF_SPANS_SUMMARY] ? "empty" : "missing");
    const int ns = d->n_span_names < PLOT_MAX_DATA ? d->n_span_names : PLOT_MAX_DATA;
    const int64_t chunk = d->spans[0].chunk;
    int n_chunks = 0;
    int64_t seen[64];
    bool band = false;
    for (size_t i = 0; i < d->n_spans; i++) {
        band = band || (d->spans[i].n_traces > 1 && d->spans[i].span < ns && d->spans[i].chunk == chunk);
        int k = 0;
        while (k < n_chunks && seen[k] != d->spans[i].chunk) k++;
        if (k == n_chunks && n_chunks < 64) seen[n_chunks++] = d->spans[i].chunk;
    }
    int rc = write_spans(d, ctx, name, out, ns, chunk, band, err);
    snprintf(out->caption, sizeof out->caption,
             "Span retention (spans_summary.csv): for each span name (column; %d of %d shown), the fraction of the "
             "span's positions in the cache averaged over the queries after the span (retention_mean), the fraction "
             "in the final cache (retention_final), and the share of the span's full-cache attention from the later "
             "queries that its cached positions still receive (attn_recall), against the cache budget N, one line "
             "per policy configuration, at prefill chunk %lld%s. Each trace's value is its mean over layers and kv "
             "heads.%s How to read it: a needle the task needs should stay near 1; a policy whose line drops at "
             "small N loses the span (an offline proxy for a failed needle-in-a-haystack answer). The span table "
             "below lists every span, policy, budget and chunk.",
             ns, d->n_span_names, (long long)chunk,
             n_chunks > 1 ? " (the file's first chunk; the table has the others)" : "",
             band ? " A study: each line is the mean over the traces holding the span and the shaded band its 95% "
             "percentile bootstrap interval over traces (the _ci_lo, _ci_hi columns)." : "");
    return rc;
}
