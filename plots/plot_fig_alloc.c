/* Figure 8: how the allocators spread the memory, and what it buys
 * (budgets.csv, summary.csv). Top left: rows kept per kv head by layer at
 * one budget (figure 7's choice: the smallest below T), one line per
 * allocator, the mean over the layer's kv heads and over the allocator's
 * policy configurations (`full` aside: it keeps everything under any
 * allocator). Bottom: the same per (layer, kv head), a heat map per
 * allocator (at most PLOT_MAX_HEAT). Top right: out_rel_err versus the
 * run's total memory, Σ head_budget over its (layer, kv head) rows (the
 * rows really kept at the end, not the nominal L·K·N), one line per
 * (configuration, allocator). The data files hold every budget; the
 * script's variable B picks the one the left and bottom panels draw. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_figures.h"

enum { PLOT_MAX_HEAT = 8 };

typedef struct { int alloc; int64_t budget, layer, kv_head; double rows; int n; } cell;

typedef struct {
    const char *names[PLOT_MAX_HEAT * 8]; /* allocator labels, in order of first appearance */
    int n;
    cell *cells;   /* (allocator, budget, layer, kv head): mean head_budget over configurations */
    size_t n_cells;
    int64_t budget; /* the budget drawn: the smallest below T, else the smallest */
    double top;     /* the largest cell at that budget (the colour scale's top) */
} alloc_view;

static bool is_full(const plot_data *d, int series) { return strcmp(d->series.s[series].policy, "full") == 0; }

static int by_cell(const void *a, const void *b)
{
    const cell *p = a, *q = b;
    if (p->alloc != q->alloc) return p->alloc < q->alloc ? -1 : 1;
    if (p->budget != q->budget) return p->budget < q->budget ? -1 : 1;
    if (p->layer != q->layer) return p->layer < q->layer ? -1 : 1;
    return (p->kv_head > q->kv_head) - (p->kv_head < q->kv_head);
}

/* The cells of every budgets.csv row but full's, folded to means; false when none. */
static bool view_build(const plot_data *d, alloc_view *v)
{
    memset(v, 0, sizeof *v);
    v->cells = malloc((d->n_budgets ? d->n_budgets : 1) * sizeof *v->cells);
    KV_ASSERT(v->cells);
    const int cap = (int)(sizeof v->names / sizeof v->names[0]);
    for (size_t i = 0; i < d->n_budgets; i++) {
        const plot_budget *b = &d->budgets[i];
        if (is_full(d, b->series)) continue;
        const char *name = d->series.s[b->series].alloc;
        int a = 0;
        while (a < v->n && strcmp(v->names[a], name) != 0) a++;
        if (a == v->n && v->n < cap) v->names[v->n++] = name;
        if (a < v->n) v->cells[v->n_cells++] = (cell){a, b->budget, b->layer, b->kv_head, (double)b->head_budget, 1};
    }
    qsort(v->cells, v->n_cells, sizeof *v->cells, by_cell);
    size_t n = 0;
    for (size_t i = 0; i < v->n_cells; i++) {
        if (n && by_cell(&v->cells[n - 1], &v->cells[i]) == 0) v->cells[n - 1].rows += v->cells[i].rows, v->cells[n - 1].n++;
        else v->cells[n++] = v->cells[i];
    }
    v->n_cells = n;
    int64_t below = INT64_MAX, any = INT64_MAX;
    for (size_t i = 0; i < n; i++) {
        v->cells[i].rows /= v->cells[i].n;
        any = v->cells[i].budget < any ? v->cells[i].budget : any;
        if (v->cells[i].budget < d->meta.T && v->cells[i].budget < below) below = v->cells[i].budget;
    }
    v->budget = below != INT64_MAX ? below : any;
    v->top = 1;
    for (size_t i = 0; i < n; i++)
        if (v->cells[i].budget == v->budget && v->cells[i].rows > v->top) v->top = v->cells[i].rows;
    return n > 0;
}

/* fig8_alloc.dat (per layer: the mean of a layer's cells) and fig8_alloc_heat.dat (the cells): one block per
 * allocator, rows by budget then layer (then kv head), a blank line between budgets. */
static int write_cells(const plot_ctx *ctx, plot_fig_out *out, const alloc_view *v, const char *file, bool heat,
                       kv_err *err)
{
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    fprintf(f, "# one block (index) per allocator; rows: %s (mean over the allocator's policy configurations,\n"
               "# full aside), a blank line between budgets\n",
            heat ? "budget layer kv_head head_budget" : "budget layer head_budget (mean over the layer's kv heads)");
    for (size_t i = 0; i < v->n_cells;) {
        const cell *c = &v->cells[i];
        if (i == 0 || c->alloc != v->cells[i - 1].alloc)
            fprintf(f, "%s# index %d: %s\n", i ? "\n\n" : "", c->alloc, v->names[c->alloc]);
        else if (c->budget != v->cells[i - 1].budget)
            fputc('\n', f);
        size_t j = i + 1;
        double sum = c->rows;
        for (; !heat && j < v->n_cells && v->cells[j].alloc == c->alloc && v->cells[j].budget == c->budget &&
               v->cells[j].layer == c->layer; j++)
            sum += v->cells[j].rows;
        if (heat) fprintf(f, "%lld %lld %lld ", (long long)c->budget, (long long)c->layer, (long long)c->kv_head);
        else fprintf(f, "%lld %lld ", (long long)c->budget, (long long)c->layer);
        plot_num(f, sum / (double)(j - i));
        fputc('\n', f);
        i = j;
    }
    return plot_close(f, ctx, file, err);
}

static int by_series_budget(const void *a, const void *b)
{
    const plot_point *p = a, *q = b;
    if (p->series != q->series) return p->series < q->series ? -1 : 1;
    return (p->budget > q->budget) - (p->budget < q->budget);
}

/* One point per run: budget = its memory Σ head_budget, y1 = out_rel_err_mean (summary.csv, phase=all),
 * y2 = its N. Returns the count (pts holds d->n_budgets). */
static size_t memory_points(const plot_data *d, plot_point *pts)
{
    for (size_t i = 0; i < d->n_budgets; i++)
        pts[i] = (plot_point){.series = d->budgets[i].series, .budget = d->budgets[i].budget,
                              .y1 = (double)d->budgets[i].head_budget};
    qsort(pts, d->n_budgets, sizeof *pts, by_series_budget);
    size_t n = 0;
    for (size_t i = 0; i < d->n_budgets; i++) {
        if (n && by_series_budget(&pts[n - 1], &pts[i]) == 0) pts[n - 1].y1 += pts[i].y1;
        else pts[n++] = pts[i];
    }
    for (size_t i = 0; i < n; i++) {
        double err = NAN;
        for (size_t s = 0; s < d->n_summary; s++)
            if (d->summary[s].series == pts[i].series && d->summary[s].budget == pts[i].budget &&
                d->summary[s].chunk == d->summary[0].chunk)   /* a --chunks run: the first chunk's */
                err = d->summary[s].err_mean;
        pts[i] = (plot_point){.series = pts[i].series, .budget = (int64_t)pts[i].y1, .y1 = err,
                              .y2 = (double)pts[i].budget};
    }
    qsort(pts, n, sizeof *pts, by_series_budget);
    return n;
}

static int write_memory(const plot_data *d, const plot_ctx *ctx, plot_fig_out *out, const char *file,
                        const plot_point *pts, size_t n, int *order, int *blocks, kv_err *err)
{
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    fputs("# one block (index) per (policy configuration, allocator); rows by memory: memory out_rel_err_mean "
          "budget\n# (memory: the run's total rows kept at the end, sum of budgets.csv's head_budget)\n", f);
    *blocks = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || pts[i].series != pts[i - 1].series) {
            const plot_series *s = &d->series.s[pts[i].series];
            KV_ASSERT(*blocks < d->series.n);
            fprintf(f, "%s# index %d: %s %s\n", *blocks ? "\n\n" : "", *blocks, s->config, s->alloc);
            order[(*blocks)++] = pts[i].series;
        }
        fprintf(f, "%lld ", (long long)pts[i].budget);
        plot_num(f, pts[i].y1);
        fprintf(f, " %lld\n", (long long)pts[i].y2);
    }
    return plot_close(f, ctx, file, err);
}

/* The heat maps: one panel per allocator along the bottom. */
static void heat_panels(FILE *f, const plot_data *d, const alloc_view *v, const char *heat)
{
    const int n = v->n < PLOT_MAX_HEAT ? v->n : PLOT_MAX_HEAT;
    fprintf(f, "\n# heat maps: rows kept per (layer, kv head) at B, one panel per allocator\n");
    fprintf(f, "unset logscale\nunset grid\nset format x '%%g'\nset format y '%%g'\nunset key\n");
    fprintf(f, "set palette defined (0 '#ffffff', 1 '#9ecae1', 2 '#08306b')\nset cbrange [0:CBMAX]\n");
    fprintf(f, "set xrange [-0.5:%g]\nset yrange [-0.5:%g]\n", (double)d->meta.K - 0.5, (double)d->meta.L - 0.5);
    fprintf(f, "set xlabel 'kv head'\nset ylabel 'layer'\n");
    fprintf(f, d->meta.K <= 16 ? "set xtics 1\n" : "set xtics autofreq\n");
    fprintf(f, d->meta.L <= 40 ? "set ytics 1\n" : "set ytics autofreq\n");
    for (int a = 0; a < n; a++) {
        fprintf(f, "set origin %g,0\nset size %g,0.44\nset title ", (double)a / n, 1.0 / n);
        plot_gp_quote(f, v->names[a]);
        fprintf(f, " font ',9'\nplot '%s' index %d using ($1 == B ? $3 : NaN):2:($3 - 0.5):($3 + 0.5):($2 - 0.5):"
                   "($2 + 0.5):4 with boxxyerror fs solid 1.0 noborder lc palette\n", heat, a);
    }
}

static void write_script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const alloc_view *v,
                         char files[][64], const plot_point *pts, size_t n, const int *order, int blocks, bool log_y)
{
    plot_gp_preamble(f, ctx, name, "budgets by layer and head per allocator, error versus memory", 1200, 900);
    fprintf(f, "B = %lld   # the budget the per-layer and heat-map panels draw: any budget of %s\n",
            (long long)v->budget, files[0]);
    fprintf(f, "CBMAX = %g   # the heat maps' colour scale top: the largest head_budget at B\n", v->top);
    fprintf(f, "set multiplot title sprintf('Budget allocation: rows kept per kv head at N = %%d, and error versus "
               "memory', B) font ',13'\n");
    /* the two line panels take the left 70%; their keys stand in the column at the right, one above the
     * other, so no key covers a line (KEY_LINE: one key line at font 8, in screen units of the 900-pixel page) */
    const double KEY_LINE = 0.0145, key2 = 0.955 - (v->n + 2) * KEY_LINE;
    /* the two panels share what the keys' column leaves (its width: the longest label at font 8) */
    double half = (1.0 - (plot_key_px(d, 8) + 24.0) / 1200.0) / 2;
    if (half > 0.35) half = 0.35;
    fprintf(f, "set origin 0,0.44\nset size %.4f,0.52\n", half);
    fprintf(f, "set title sprintf('Rows kept per kv head by layer at N = %%d', B)\n");
    fprintf(f, "set xlabel 'layer'\nset ylabel 'rows kept (head_budget)'\nset xrange [-0.3:%g]\nset yrange [0:*]\n",
            (double)d->meta.L - 0.7);
    if (d->meta.L <= 40) fprintf(f, "set xtics %d\n", d->meta.L <= 16 ? 1 : 2);
    fprintf(f, "set key at screen 0.995, screen 0.955 top right font ',8'\nplot ");
    for (int a = 0; a < v->n; a++) {
        fprintf(f, "'%s' index %d using 2:($1 == B ? $3 : NaN) with linespoints lw 2 ps 1.1 lc rgb '%s' dt %d pt %d "
                   "title ", a ? "" : files[0], a, plot_alloc_colour(v->names[a]), plot_dash_type(a), plot_point_type(a));
        plot_gp_quote(f, v->names[a]);
        fputs(", \\\n     ", f);
    }
    fprintf(f, "B with lines dt 3 lw 1 lc rgb '#888888' title 'N'\n");
    fprintf(f, "\nset origin %.4f,0.44\nset size %.4f,0.52\nset xtics autofreq\nset yrange [*:*]\n", half, half);
    fprintf(f, "set title 'Output error versus total memory'\n");
    plot_gp_budget_axis(f, pts, n);
    fprintf(f, "set xlabel 'memory: rows kept at the end, all layers and kv heads'\n");
    fprintf(f, "set ylabel 'out_rel_err, mean%s'\n", log_y ? " (log scale)" : "");
    if (log_y) fprintf(f, "set logscale y 10\nset format y '%%g'\n");
    else fprintf(f, "set yrange [0:*]\n");
    fprintf(f, "set key at screen 0.995, screen %.4f top right font ',8'\n", key2);
    plot_gp_lines(f, d, files[2], order, blocks, log_y ? "1:($2 > 0 ? $2 : NaN)" : "1:2");
    heat_panels(f, d, v, files[1]);
    fprintf(f, "unset multiplot\n");
}

static void caption(plot_fig_out *out, const alloc_view *v, const char *name, bool log_y, bool study)
{
    snprintf(out->caption, sizeof out->caption,
             "How each allocator spreads the cache and what the memory buys. Top left: the rows each kv head kept "
             "at the end (budgets.csv's head_budget) by layer at cache budget N = %lld (the smallest below the "
             "trace length, as in figure 7), one line per allocator, averaged over the layer's kv heads and over "
             "the policy configurations run with that allocator (full aside: it keeps everything); the dotted "
             "line is N, what uniform gives every head. Bottom: the same per (layer, kv head) as a heat map, one "
             "panel per allocator%s (darker keeps more; one colour scale for all panels). Top right: the output "
             "relative error (summary.csv, phase = all) against the run's total memory, the sum of head_budget "
             "over its layers and kv heads (rows really kept, L·K·N once every stream is full), one line per "
             "policy configuration and allocator%s. How to read it: a line of the top-left panel above N in a "
             "layer gives that layer more than its even share; at equal memory, the lowest line on the right is "
             "the best (policy, allocator). %s.dat and %s_heat.dat hold every budget: set B at the top of %s.gp "
             "to draw another.%s",
             (long long)v->budget, v->n > PLOT_MAX_HEAT ? " (the first 8)" : "",
             log_y ? " (log axis; an error of exactly 0, such as full's, is left out)" : "", name, name, name,
             study ? " In a study the rows kept are the first trace's (analyze copies its budgets.csv from "
                     "traces/ID/chunkB/, where every trace's is); the errors are the means over the traces." : "");
}

int plot_fig_alloc(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_BUDGETS])
        return plot_skip(out, "budgets.csv is missing (analyze ran without --results).");
    if (!d->n_budgets) return plot_skip(out, "budgets.csv has no rows.");
    if (!d->n_summary) return plot_skip(out, "summary.csv is missing or has no phase=all rows.");
    alloc_view v;
    if (!view_build(d, &v)) {
        free(v.cells);
        return plot_skip(out, "budgets.csv holds only full runs, which keep every key under any allocator.");
    }
    char files[3][64], script[64];
    snprintf(files[0], sizeof files[0], "%s.dat", name);
    snprintf(files[1], sizeof files[1], "%s_heat.dat", name);
    snprintf(files[2], sizeof files[2], "%s_memory.dat", name);
    snprintf(script, sizeof script, "%s.gp", name);
    plot_point *pts = malloc(d->n_budgets * sizeof *pts);
    int *order = malloc((size_t)d->series.n * sizeof *order), blocks = 0;
    if (!pts || !order) {
        free(pts), free(order), free(v.cells);
        return kv_fail(err, KV_EFAIL, "plot: out of memory");
    }
    const size_t n = memory_points(d, pts);
    bool log_y = false;
    for (size_t i = 0; i < n; i++) log_y = log_y || pts[i].y1 > 0;
    FILE *f;
    int rc = write_cells(ctx, out, &v, files[0], false, err);
    if (!rc) rc = write_cells(ctx, out, &v, files[1], true, err);
    if (!rc) rc = write_memory(d, ctx, out, files[2], pts, n, order, &blocks, err);
    if (!rc) rc = plot_open(ctx, script, &f, err);
    if (!rc) {
        write_script(f, d, ctx, name, &v, files, pts, n, order, blocks, log_y);
        rc = plot_close(f, ctx, script, err);
    }
    bool study = false;
    for (size_t i = 0; i < d->n_summary; i++) study = study || d->summary[i].n_traces > 1;
    caption(out, &v, name, log_y, study);
    free(pts), free(order), free(v.cells);
    return rc;
}
