/* Figure 4: the log-det volume of each run's final cache, one box per
 * (policy, budget) over (layer, kv head), grouped by budget, with the full
 * cache as the reference (its own box and a dashed line at its median).
 * sim's own `full` runs keep every key, so their boxes are the full cache's:
 * they are not drawn again per budget, and the legend lists the full cache
 * once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_figures.h"

typedef struct { int series; int64_t budget; double x; } box;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static bool is_full_cache(const plot_data *d, int series)
{
    return strcmp(d->series.s[series].policy, "full_cache") == 0;
}

/* A `full` run when the full cache has its own box: the same keys, drawn once. */
static bool is_full_again(const plot_data *d, int series, bool has_full_cache)
{
    return has_full_cache && strcmp(d->series.s[series].policy, "full") == 0;
}

/* Rows drawn in the budget groups. */
static bool in_groups(const plot_data *d, size_t r, bool has_full_cache)
{
    const int s = d->logdet[r].series;
    return !is_full_cache(d, s) && !is_full_again(d, s, has_full_cache);
}

static bool has_box(const box *b, int n, int series, int64_t budget)
{
    for (int i = 0; i < n; i++)
        if (b[i].series == series && b[i].budget == budget) return true;
    return false;
}

/* Boxes in drawing order: full cache first, then budgets ascending, series by id within. */
static int layout(const plot_data *d, box *b, int cap)
{
    int n = 0;
    double x = 0;
    for (size_t r = 0; r < d->n_logdet && n < cap; r++)
        if (is_full_cache(d, d->logdet[r].series) && !has_box(b, n, d->logdet[r].series, d->logdet[r].budget))
            b[n++] = (box){d->logdet[r].series, d->logdet[r].budget, x++};
    const bool fc = n > 0;
    int64_t last = 0;
    for (;;) {
        int64_t next = INT64_MAX;
        for (size_t r = 0; r < d->n_logdet; r++)
            if (in_groups(d, r, fc) && d->logdet[r].budget > last && d->logdet[r].budget < next)
                next = d->logdet[r].budget;
        if (next == INT64_MAX) break;
        x += n ? 1.5 : 0; /* a gap between groups */
        for (int s = 0; s < d->series.n; s++)
            for (size_t r = 0; r < d->n_logdet && n < cap; r++)
                if (d->logdet[r].series == s && d->logdet[r].budget == next && in_groups(d, r, fc)) {
                    b[n++] = (box){s, next, x++};
                    break;
                }
        last = next;
    }
    return n;
}

/* One block per box: its values. Returns the full cache's median (NaN if none). */
static int write_data(const plot_data *d, const plot_ctx *ctx, plot_fig_out *out, const char *file, const box *b,
                      int n, double *ref, kv_err *err)
{
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    double *v = malloc((d->n_logdet ? d->n_logdet : 1) * sizeof *v);
    if (!v) {
        fclose(f);
        return kv_fail(err, KV_EFAIL, "plot: out of memory");
    }
    *ref = NAN;
    for (int i = 0; i < n; i++) {
        const plot_series *s = &d->series.s[b[i].series];
        fprintf(f, "%s# index %d: %s %s budget=%lld, one log-det per (layer, kv head)\n", i ? "\n\n" : "", i,
                s->policy, s->params, (long long)b[i].budget);
        size_t m = 0;
        for (size_t r = 0; r < d->n_logdet; r++)
            if (d->logdet[r].series == b[i].series && d->logdet[r].budget == b[i].budget) {
                v[m++] = d->logdet[r].logdet;
                fprintf(f, "%lld %lld %.9g\n", (long long)d->logdet[r].layer, (long long)d->logdet[r].kv_head,
                        d->logdet[r].logdet);
            }
        if (is_full_cache(d, b[i].series) && isnan(*ref)) {
            qsort(v, m, sizeof *v, cmp_double);
            *ref = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
        }
    }
    free(v);
    return plot_close(f, ctx, file, err);
}

static void write_tics(FILE *f, const plot_data *d, const box *b, int n)
{
    fputs("set xtics (", f);
    for (int i = 0, first = 1; i < n;) {
        int j = i;
        while (j < n && b[j].budget == b[i].budget && is_full_cache(d, b[j].series) == is_full_cache(d, b[i].series)) j++;
        if (is_full_cache(d, b[i].series))
            fprintf(f, "%s\"full cache\\nT = %lld\" %g", first ? "" : ", ", (long long)b[i].budget, b[i].x);
        else
            fprintf(f, "%s'N = %lld' %g", first ? "" : ", ", (long long)b[i].budget, 0.5 * (b[i].x + b[j - 1].x));
        first = 0, i = j;
    }
    fputs(")\n", f);
}

static void write_script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const char *data,
                         const box *b, int n, double ref)
{
    plot_gp_preamble(f, ctx, name, "log-det distribution per policy and budget", 1200, 500);
    fprintf(f, "set title 'Log-det volume of the final cache per (layer, kv head), by budget and policy'\n");
    fprintf(f, "set ylabel 'log det(K̂ᵀK̂ / |S| + 1e-6 I)  (nats)'\nset xlabel 'cache budget'\n");
    fprintf(f, "set xrange [-0.8:%g]\nset xtics scale 0\nset grid noxtics ytics\n", b[n - 1].x + 0.8);
    fprintf(f, "set style boxplot outliers pointtype 7\nset pointsize 0.5\nset boxwidth 0.7\n");
    fprintf(f, "set key outside right top\n");
    write_tics(f, d, b, n);
    if (!isnan(ref))
        fprintf(f, "set arrow from graph 0, first %.9g to graph 1, first %.9g nohead dt 2 lc rgb '#000000' back\n",
                ref, ref);
    fputs("plot ", f);
    for (int i = 0; i < n; i++) {
        const plot_series *s = &d->series.s[b[i].series];
        bool first = true;
        for (int j = 0; j < i; j++) first = first && b[j].series != b[i].series;
        fprintf(f, "%s'%s' index %d using (%g):3 with boxplot lc rgb '%s' dt %d ", i ? ", \\\n     " : "",
                i ? "" : data, i, b[i].x, plot_policy_colour(s->policy), plot_dash_type(s->variant));
        /* an explicit light tint, not a fill density: the median line stays visible in every terminal */
        char tint[8];
        plot_tint(plot_policy_colour(s->policy), 0.4, tint);
        if (s->variant) fprintf(f, "fs pattern %d border lc rgb '%s' ", 4 + s->variant % 4, plot_policy_colour(s->policy));
        else fprintf(f, "fc rgb '%s' fs solid 1.0 border lc rgb '%s' ", tint, plot_policy_colour(s->policy));
        if (first) {
            fputs("title ", f);
            plot_gp_quote(f, s->label);
        } else {
            fputs("notitle", f);
        }
    }
    fputc('\n', f);
}

int plot_fig_logdet(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_LOGDET]) return plot_skip(out, "logdet.csv is missing from the analysis directory.");
    if (!d->n_logdet) return plot_skip(out, "logdet.csv has no rows.");
    box *b = malloc(d->n_logdet * sizeof *b);
    if (!b) return kv_fail(err, KV_EFAIL, "plot: out of memory");
    int n = layout(d, b, (int)(d->n_logdet > 4096 ? 4096 : d->n_logdet));
    char data[64], script[64];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(script, sizeof script, "%s.gp", name);
    double ref = NAN;
    FILE *f;
    int rc = write_data(d, ctx, out, data, b, n, &ref, err);
    if (!rc) rc = plot_open(ctx, script, &f, err);
    if (!rc) {
        write_script(f, d, ctx, name, data, b, n, ref);
        rc = plot_close(f, ctx, script, err);
    }
    free(b);
    snprintf(out->caption, sizeof out->caption,
             "The log-det volume log det(K̂ᵀK̂/|S| + 1e-6·I) of the row-normalised keys in each run's final "
             "cache, one value per (layer, kv head), as a box (median, quartiles, whiskers, outliers) per policy "
             "and budget; the leftmost box and the dashed line are the full cache (every token kept; sim's own "
             "full runs keep the same keys at every budget, so they are not drawn again). How to "
             "read it: higher means the kept keys span more directions, i.e. a more diverse cache; PrimeKV and "
             "KeyDiff aim for high volume. Smaller budgets keep fewer keys, so compare policies within a budget.");
    return rc;
}
