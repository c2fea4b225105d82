/* Figure 14: the paired differences against the baseline (paired.csv, analyze --baseline) as a forest plot:
 * one panel per headline measure (out_rel_err_mean, attn_recall_mean, the first span's retention_final),
 * one row per configuration, budget and chunk, its mean difference with the 95% bootstrap interval paired
 * over traces as a horizontal bar, and a line at 0. Rows are labelled on the left; there is no legend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_figures.h"
#include "plot_style.h"
#include "results/results_schema.h"

enum { MAX_ROWS = 80, MAX_MEASURES = 3, LABEL_MAX = 160 };

typedef struct {
    char label[LABEL_MAX];   /* "series label  N=32 B=16" */
    double v[MAX_MEASURES][3];   /* diff_mean, lo, hi per measure; NaN where paired.csv has none */
} forest_row;

typedef struct {
    char measure[MAX_MEASURES][96];
    int n_measures;
    forest_row row[MAX_ROWS];
    int n_rows;
    size_t more;             /* rows past MAX_ROWS (in paired.csv, not drawn) */
    char baseline[300];
} forest;

static int series_of(const plot_data *d, const char *config, const char *alloc)
{
    for (int i = 0; i < d->series.n; i++)
        if (strcmp(d->series.s[i].config, config) == 0 && strcmp(d->series.s[i].alloc, alloc) == 0) return i;
    return -1;
}

/* The measures drawn: error, recall and the first span's retention_final, those paired.csv holds. */
static void pick_measures(const csv_table *c, int col_metric, forest *fo)
{
    static const char *const FIXED[] = {"out_rel_err_mean", "attn_recall_mean"};
    for (int k = 0; k < 2; k++)
        for (size_t r = 0; r < c->n_rows; r++)
            if (strcmp(csv_cell(c, r, col_metric), FIXED[k]) == 0) {
                snprintf(fo->measure[fo->n_measures++], sizeof fo->measure[0], "%s", FIXED[k]);
                break;
            }
    for (size_t r = 0; r < c->n_rows; r++) {
        const char *m = csv_cell(c, r, col_metric);
        const size_t n = strlen(m);
        if (n > 16 && n < sizeof fo->measure[0] && strcmp(m + n - 16, ":retention_final") == 0) {
            snprintf(fo->measure[fo->n_measures++], sizeof fo->measure[0], "%s", m);
            break;
        }
    }
}

/* The row of (run, budget) labelled `label`, added when new (NULL past MAX_ROWS). */
static forest_row *row_of(forest *fo, const char *label)
{
    for (int i = fo->n_rows; i-- > 0;)
        if (strcmp(fo->row[i].label, label) == 0) return &fo->row[i];
    if (fo->n_rows == MAX_ROWS) return NULL;
    forest_row *w = &fo->row[fo->n_rows++];
    snprintf(w->label, sizeof w->label, "%s", label);
    for (int m = 0; m < MAX_MEASURES; m++) w->v[m][0] = w->v[m][1] = w->v[m][2] = NAN;
    return w;
}

static int read_forest(const plot_data *d, forest *fo, kv_err *err)
{
    csv_table c;
    bool present = false;
    int rc = csv_read(&c, d->dir, RESULTS_SCHEMA_PAIRED.file, &present, err);
    const results_dims dims = {.L = d->meta.L, .H = d->meta.H, .K = d->meta.K, .T = d->meta.T};
    if (!rc && present) rc = results_schema_check(&c, &RESULTS_SCHEMA_PAIRED, &dims, NULL, err);
    if (rc || !present) {
        csv_free(&c);
        return rc;
    }
    /* paired.csv's columns, in its table's order (checked above) */
    enum { RUN, CONFIG, ALLOC, CHUNK, BUDGET, BASELINE, METRIC, N_TRACES, MEAN, BASE_MEAN, DIFF, LO, HI };
    pick_measures(&c, METRIC, fo);
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        int m = 0;
        while (m < fo->n_measures && strcmp(fo->measure[m], csv_cell(&c, r, METRIC)) != 0) m++;
        if (m == fo->n_measures) continue;
        const int s = series_of(d, csv_cell(&c, r, CONFIG), csv_cell(&c, r, ALLOC));
        char label[LABEL_MAX];
        snprintf(label, sizeof label, "%.100s  N=%s B=%s", s >= 0 ? d->series.s[s].label : csv_cell(&c, r, RUN),
                 csv_cell(&c, r, BUDGET), csv_cell(&c, r, CHUNK));
        snprintf(fo->baseline, sizeof fo->baseline, "%s", csv_cell(&c, r, BASELINE));
        char *slash = strrchr(fo->baseline, '/');   /* the run label's chunk: each row's own */
        if (slash) *slash = '\0';
        forest_row *w = row_of(fo, label);
        if (!w) {
            fo->more++;
            continue;
        }
        for (int k = 0; k < 3 && !rc; k++) rc = csv_double(&c, r, DIFF + k, true, &w->v[m][k], err);
    }
    csv_free(&c);
    return rc;
}

static void script(FILE *f, const plot_ctx *ctx, const char *name, const char *data, const forest *fo)
{
    size_t longest = 8;
    for (int i = 0; i < fo->n_rows; i++) longest = strlen(fo->row[i].label) > longest ? strlen(fo->row[i].label) : longest;
    const int left = (int)(6.6 * (double)longest) + 30, panel = 330, width = left + panel * fo->n_measures + 30,
              height = 16 * fo->n_rows + 150;
    plot_gp_preamble(f, ctx, name, "paired differences against the baseline, one panel per measure", width, height);
    fprintf(f, "set multiplot layout 1,%d margins %.4f,%.4f,%.4f,%.4f spacing 0.04 title ", fo->n_measures,
            (double)left / width, 1.0 - 30.0 / width, 60.0 / height, 1.0 - 70.0 / height);
    char title[600];
    snprintf(title, sizeof title, "Configuration minus baseline %s at the same N and B, paired over traces (mean and 95%% bootstrap "
             "interval; a bar clear of 0 is a difference the traces support)", fo->baseline);
    plot_gp_quote(f, title);
    fprintf(f, " font ',11'\nunset key\nset yrange [%d.5:-0.5]\nset grid xtics\nset xtics font ',8' rotate by -35\n",
            fo->n_rows - 1);
    for (int m = 0; m < fo->n_measures; m++) {
        if (m == 0) {
            fputs("set ytics (", f);
            for (int i = 0; i < fo->n_rows; i++) {
                fprintf(f, "%s", i ? ", " : "");
                plot_gp_quote(f, fo->row[i].label);
                fprintf(f, " %d", i);
            }
            fputs(") font ',8'\n", f);
        } else {
            fputs("set ytics 0, 1 format ''\n", f);   /* the same rows, unlabelled: the first panel names them */
        }
        fputs("set title ", f);
        char t[160];
        snprintf(t, sizeof t, "%s (%s is better)", fo->measure[m],
                 strcmp(fo->measure[m], "out_rel_err_mean") == 0 ? "lower" : "higher");
        plot_gp_quote(f, t);
        fprintf(f, " font ',9'\nset arrow 1 from first 0, graph 0 to first 0, graph 1 nohead lc rgb '#555555' dt 2\n");
        fprintf(f, "plot '%s' using %d:1:%d:%d with xerrorbars pt 7 ps 0.6 lc rgb '#08519c'\n", data, 2 + 3 * m,
                3 + 3 * m, 4 + 3 * m);
    }
    fputs("unset multiplot\n", f);
}

int plot_fig_paired(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    forest *fo = calloc(1, sizeof *fo);
    if (!fo) return kv_fail(err, KV_EFAIL, "plot: out of memory");
    int rc = read_forest(d, fo, err);
    if (rc || !fo->n_rows || !fo->n_measures) {
        free(fo);
        return rc ? rc : plot_skip(out, "paired.csv is missing or has no rows (analyze ran without --baseline).");
    }
    char data[64], gp[64];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(gp, sizeof gp, "%s.gp", name);
    FILE *f;
    rc = plot_open_data(ctx, out, data, &f, err);
    if (!rc) {
        fputs("# one row per configuration, budget and chunk (top to bottom): row, then per measure diff_mean "
              "diff_ci_lo diff_ci_hi:", f);
        for (int m = 0; m < fo->n_measures; m++) fprintf(f, " %s", fo->measure[m]);
        fputc('\n', f);
        for (int i = 0; i < fo->n_rows; i++) {
            fprintf(f, "%d", i);
            for (int m = 0; m < fo->n_measures; m++)
                for (int k = 0; k < 3; k++) fputc(' ', f), plot_num(f, fo->row[i].v[m][k]);
            fputc('\n', f);
        }
        rc = plot_close(f, ctx, data, err);
    }
    if (!rc) rc = plot_open(ctx, gp, &f, err);
    if (!rc) {
        script(f, ctx, name, data, fo);
        rc = plot_close(f, ctx, gp, err);
    }
    char more[120] = "";
    if (fo->more) snprintf(more, sizeof more, " (the first %d rows; %zu more in paired.csv)", MAX_ROWS, fo->more);
    snprintf(out->caption, sizeof out->caption,
             "Paired differences against the baseline %s: each configuration minus the baseline at the same budget "
             "N and chunk B, paired by trace (paired.csv of analyze --baseline)%s. A dot is the mean difference over "
             "the traces, its bar the 95%% percentile bootstrap interval of that mean; a bar that does not cross the "
             "dashed line at 0 is a difference the traces support. Error: left of 0 is better; recall and "
             "retention: right of 0 is better.", fo->baseline, more);
    free(fo);
    return rc;
}
