/* What the figures share (declared in plot_figures.h): numbers and skips,
 * data files, one gnuplot block per series, the budget axis, one line per
 * block. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "plot_figures.h"

void plot_num(FILE *f, double v)
{
    if (isnan(v)) fputs("NaN", f);
    else fprintf(f, "%.9g", v);
}

int plot_skip(plot_fig_out *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->skip, sizeof out->skip, fmt, ap);
    va_end(ap);
    return KV_OK;
}

int plot_open_data(const plot_ctx *ctx, plot_fig_out *out, const char *file, FILE **f, kv_err *err)
{
    KV_ASSERT(out->n_data < PLOT_MAX_DATA);
    snprintf(out->data[out->n_data++], sizeof out->data[0], "%s", file);
    return plot_open(ctx, file, f, err);
}

static int by_series_budget(const void *a, const void *b)
{
    const plot_point *p = a, *q = b;
    if (p->series != q->series) return p->series < q->series ? -1 : 1;
    return (p->budget > q->budget) - (p->budget < q->budget);
}

int plot_write_blocks(FILE *f, const plot_data *d, plot_point *pts, size_t n, int *order)
{
    qsort(pts, n, sizeof *pts, by_series_budget);
    int blocks = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || pts[i].series != pts[i - 1].series) {
            const plot_series *s = &d->series.s[pts[i].series];
            KV_ASSERT(blocks < d->series.n);
            if (blocks) fputs("\n\n", f);
            fprintf(f, "# index %d: %s %s\n", blocks, s->policy, s->params);
            order[blocks++] = pts[i].series;
        }
        fprintf(f, "%lld ", (long long)pts[i].budget);
        plot_num(f, pts[i].y1);
        fputc(' ', f);
        plot_num(f, pts[i].y2);
        const double band[4] = {pts[i].lo1, pts[i].hi1, pts[i].lo2, pts[i].hi2};
        for (int k = 0; pts[i].band && k < 4; k++) fputc(' ', f), plot_num(f, band[k]);
        fputc('\n', f);
    }
    return blocks;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int plot_key_px(const plot_data *d, int font_pt)
{
    size_t longest = 8;
    for (int i = 0; i < d->series.n; i++)
        if (strlen(d->series.s[i].label) > longest) longest = strlen(d->series.s[i].label);
    return plot_key_width(longest, font_pt);
}

void plot_gp_budget_axis(FILE *f, const plot_point *pts, size_t n)
{
    int64_t *b = malloc((n ? n : 1) * sizeof *b);
    KV_ASSERT(b);
    for (size_t i = 0; i < n; i++) b[i] = pts[i].budget;
    qsort(b, n, sizeof *b, cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || b[i] != b[u - 1]) b[u++] = b[i];
    bool log_x = u > 0 && b[u - 1] > 4 * b[0];
    if (log_x) fprintf(f, "set logscale x 2\n");
    if (u > 0) {
        double lo = (double)b[0], hi = (double)b[u - 1];
        double pad = log_x ? 1.15 : 1.0;
        double lin = lo == hi ? 0.5 * lo : 0.05 * (hi - lo);
        fprintf(f, "set xrange [%g:%g]\n", log_x ? lo / pad : lo - lin, log_x ? hi * pad : hi + lin);
    }
    if (u > 0 && u <= 12) {
        fputs("set xtics (", f);
        for (size_t i = 0; i < u; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)b[i]);
        fputs(")\n", f);
    }
    free(b);
}

void plot_gp_bands(FILE *f, const plot_data *d, const char *data, const int *order, int blocks, const char *using)
{
    fputs("plot ", f);
    for (int i = 0; i < blocks; i++) {
        const plot_series *s = &d->series.s[order[i]];
        fprintf(f, "'%s' index %d using %s with filledcurves fs transparent solid 0.15 noborder lc rgb '%s' "
                "notitle, \\\n     ", data, i, using, plot_policy_colour(s->policy));
    }
}

void plot_gp_lines(FILE *f, const plot_data *d, const char *data, const int *order, int blocks, const char *using)
{
    plot_gp_lines_more(f, d, data, order, blocks, using, false);
}

void plot_gp_lines_more(FILE *f, const plot_data *d, const char *data, const int *order, int blocks,
                        const char *using, bool continued)
{
    if (!continued) fputs("plot ", f);
    for (int i = 0; i < blocks; i++) {
        const plot_series *s = &d->series.s[order[i]];
        fprintf(f, "%s'%s' index %d using %s with linespoints lw 2 ps 1.1 ", i ? ", \\\n     " : "",
                i && !continued ? "" : data, i, using);
        plot_gp_series_style(f, s->policy, s->variant);
        fputs(" title ", f);
        plot_gp_quote(f, s->label);
    }
    fputc('\n', f);
}
