/* Figure 11: the needle's retention as a depth x length heat map per policy
 * configuration, as the needle figures of the papers draw it. The study's
 * traces are `kvtrace prompts needle`'s, ids needle-LENGTH-DEPTH; each cell
 * is one trace: the needle span's retention_final (the share of its
 * positions in the final cache, spans.csv, mean over layers and kv heads)
 * at one budget and chunk (the first of the study; all are in the data). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_figures.h"
#include "plot_style.h"

enum { MAX_CELLS = 1 << 20, MAX_PANELS = 16 };

typedef struct {
    int series;
    int64_t budget, chunk, length;
    double depth, sum;
    int n;
} cell;

typedef struct {
    cell *c;
    size_t n, cap;
    char span[64];
} cells;

static int series_of(const plot_data *d, const char *config, const char *alloc)
{
    for (int i = 0; i < d->series.n; i++)
        if (strcmp(d->series.s[i].config, config) == 0 && strcmp(d->series.s[i].alloc, alloc) == 0) return i;
    return -1;
}

/* Adds one spans.csv row to its cell (series, budget, chunk, trace). */
static int add(cells *cs, int series, int64_t budget, int64_t chunk, int64_t length, double depth, double v)
{
    for (size_t i = cs->n; i-- > 0;) {   /* rows come grouped: the latest cells first */
        cell *c = &cs->c[i];
        if (c->series == series && c->budget == budget && c->chunk == chunk && c->length == length &&
            c->depth == depth) {
            c->sum += v, c->n++;
            return 0;
        }
        if (cs->n - i > 64) break;
    }
    if (cs->n == cs->cap) {
        const size_t cap = cs->cap ? 2 * cs->cap : 256;
        cell *c = cap <= MAX_CELLS ? realloc(cs->c, cap * sizeof *c) : NULL;
        if (!c) return -1;
        cs->c = c, cs->cap = cap;
    }
    cs->c[cs->n++] = (cell){series, budget, chunk, length, depth, v, 1};
    return 0;
}

/* The needle cells of spans.csv: the span named "needle" (else the first span name), traces named
 * needle-LENGTH-DEPTH. 0: read (cs->n may be 0); else KV_ error. */
static int read_cells(const plot_data *d, cells *cs, kv_err *err)
{
    csv_table t;
    bool present = false;
    int rc = csv_read(&t, d->dir, "spans.csv", &present, err);   /* checked against its schema on load */
    if (rc || !present) return rc;
    const int tr = csv_column(&t, "trace"), sp = csv_column(&t, "span"), cf = csv_column(&t, "config"),
              bu = csv_column(&t, "budget"), ch = csv_column(&t, "chunk"), al = csv_column(&t, "allocator"),
              rf = csv_column(&t, "retention_final");
    if (tr < 0 || sp < 0 || cf < 0 || bu < 0 || ch < 0 || al < 0 || rf < 0) {
        csv_free(&t);
        return kv_fail(err, KV_EINPUT, "%s: not sim's spans.csv", t.path);
    }
    snprintf(cs->span, sizeof cs->span, "needle");
    bool has = false;
    for (size_t r = 0; r < t.n_rows && !has; r++) has = strcmp(csv_cell(&t, r, sp), "needle") == 0;
    if (!has && t.n_rows) snprintf(cs->span, sizeof cs->span, "%.63s", csv_cell(&t, 0, sp));
    for (size_t r = 0; !rc && r < t.n_rows; r++) {
        long long length;
        double depth, v;
        int64_t budget, chunk;
        char tail;
        if (strcmp(csv_cell(&t, r, sp), cs->span) != 0 ||
            sscanf(csv_cell(&t, r, tr), "needle-%lld-%lf%c", &length, &depth, &tail) != 2)
            continue;
        const int s = series_of(d, csv_cell(&t, r, cf), csv_cell(&t, r, al));
        if (s < 0 || csv_int(&t, r, bu, 1, INT64_MAX, &budget, err) || csv_int(&t, r, ch, 1, INT64_MAX, &chunk, err) ||
            csv_double(&t, r, rf, true, &v, err)) {
            rc = s < 0 ? 0 : err->code;
            continue;
        }
        if (add(cs, s, budget, chunk, length, depth, v)) rc = kv_fail(err, KV_EFAIL, "plot: out of memory");
    }
    csv_free(&t);
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_f64(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The distinct values of a field over the cells, sorted: lengths, or depths. */
static int distinct(const cells *cs, bool lengths, void *out, int cap)
{
    int n = 0;
    for (size_t i = 0; i < cs->n; i++) {
        bool seen = false;
        for (int k = 0; k < n && !seen; k++)
            seen = lengths ? ((int64_t *)out)[k] == cs->c[i].length : ((double *)out)[k] == cs->c[i].depth;
        if (seen || n == cap) continue;
        if (lengths) ((int64_t *)out)[n++] = cs->c[i].length;
        else ((double *)out)[n++] = cs->c[i].depth;
    }
    qsort(out, (size_t)n, lengths ? sizeof(int64_t) : sizeof(double), lengths ? cmp_i64 : cmp_f64);
    return n;
}

static void script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const char *data,
                   const cells *cs, const int *series, int np, const int64_t *len, int nl, const double *dep, int nd)
{
    const int cols = np < 4 ? np : 4, rows = (np + cols - 1) / cols, width = 300 * cols + 120, height = 260 * rows + 90;
    plot_gp_preamble(f, ctx, name, "needle retention by depth and length, one panel per configuration", width, height);
    fprintf(f, "N = %lld   # the budget drawn: any budget of %s\nB = %lld   # and the chunk\n",
            (long long)cs->c[0].budget, data, (long long)cs->c[0].chunk);
    fprintf(f, "set multiplot layout %d,%d margins %.3f,%.3f,%.3f,%.3f spacing 0.05,0.12 title sprintf(\"The span '%s': "
               "retention_final by depth and prompt length at N = %%d, chunk %%d (one cell a trace; white 0, dark 1)\", "
               "N, B) font ',12'\n", rows, cols, 78.0 / width, 1.0 - 110.0 / width, 62.0 / height, 1.0 - 60.0 / height,
            cs->span);
    fprintf(f, "unset key\nunset grid\nset palette defined (0 '#ffffff', 0.5 '#9ecae1', 1 '#08306b')\nset cbrange [0:1]\n");
    fprintf(f, "set xrange [-0.5:%g]\nset yrange [-0.5:%g]\nset xtics (", nl - 0.5, nd - 0.5);
    for (int i = 0; i < nl; i++) fprintf(f, "%s'%lld' %d", i ? ", " : "", (long long)len[i], i);
    fprintf(f, ")\nset ytics (");
    for (int i = 0; i < nd; i++) fprintf(f, "%s'%g' %d", i ? ", " : "", dep[i], i);
    fprintf(f, ")\nset xlabel 'prompt length (tokens)' font ',9'\nset ylabel 'needle depth' font ',9'\n");
    for (int p = 0; p < np; p++) {
        fputs("set title ", f);
        plot_gp_quote(f, d->series.s[series[p]].label);
        fprintf(f, " font ',9'\n%s", p == np - 1 ? "set colorbox user origin screen 0.955, screen 0.2 size screen 0.012, "
                                                   "screen 0.6\n" : "unset colorbox\n");
        fprintf(f, "plot '%s' index %d using ($1 == N && $2 == B ? $3 : NaN):4:($3 - 0.5):($3 + 0.5):($4 - 0.5):($4 + "
                   "0.5):5 with boxxyerror fs solid 1.0 noborder lc palette\n", data, p);
    }
    fprintf(f, "unset multiplot\n");
}

int plot_fig_needle(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_SPANS]) return plot_skip(out, "spans.csv is missing (the traces have no spans).");
    cells cs = {0};
    int rc = read_cells(d, &cs, err);
    if (rc || !cs.n) {
        free(cs.c);
        return rc ? rc : plot_skip(out, "no trace named needle-LENGTH-DEPTH (kvtrace prompts needle's ids).");
    }
    int64_t len[64];
    double dep[64];
    const int nl = distinct(&cs, true, len, 64), nd = distinct(&cs, false, dep, 64);
    int series[MAX_PANELS], np = 0;
    for (size_t i = 0; i < cs.n && np < MAX_PANELS; i++) {
        bool seen = false;
        for (int k = 0; k < np && !seen; k++) seen = series[k] == cs.c[i].series;
        if (!seen) series[np++] = cs.c[i].series;
    }
    char data[64], gp[64];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(gp, sizeof gp, "%s.gp", name);
    FILE *f;
    rc = plot_open_data(ctx, out, data, &f, err);
    if (!rc) {
        fprintf(f, "# one block (index) per configuration: budget chunk length_index depth_index retention_final "
                   "(the span '%s', mean over layers and kv heads)\n", cs.span);
        for (int p = 0; p < np; p++) {
            fprintf(f, "%s# %s\n", p ? "\n\n" : "", d->series.s[series[p]].label);
            for (size_t i = 0; i < cs.n; i++) {
                const cell *c = &cs.c[i];
                if (c->series != series[p]) continue;
                int li = 0, di = 0;
                while (len[li] != c->length) li++;
                while (dep[di] != c->depth) di++;
                fprintf(f, "%lld %lld %d %d ", (long long)c->budget, (long long)c->chunk, li, di);
                plot_num(f, c->sum / c->n);
                fputc('\n', f);
            }
        }
        rc = plot_close(f, ctx, data, err);
    }
    if (!rc) rc = plot_open(ctx, gp, &f, err);
    if (!rc) {
        script(f, d, ctx, name, data, &cs, series, np, len, nl, dep, nd);
        rc = plot_close(f, ctx, gp, err);
    }
    snprintf(out->caption, sizeof out->caption,
             "The needle-in-a-haystack picture: for each policy configuration (a panel; at most %d), the share of "
             "the span '%s''s positions in the final cache (retention_final of spans.csv, mean over layers and kv "
             "heads), one cell per trace, by the needle's depth in the prompt (0: first, 1: right before the "
             "question) and the prompt's length, at budget N = %lld and chunk %lld. How to read it: a dark column "
             "or row is a length or depth the policy keeps the needle at; a white cell lost it. %s.dat holds every "
             "budget and chunk: set N and B at the top of %s.gp to draw another.",
             MAX_PANELS, cs.span, (long long)cs.c[0].budget, (long long)cs.c[0].chunk, name, name);
    free(cs.c);
    return rc;
}
