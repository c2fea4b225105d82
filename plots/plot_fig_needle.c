/* Figures 11-13: a needle study's pictures, as the needle figures of the
 * papers draw them: per policy configuration (a panel), one measure as a
 * depth x length heat map, one cell per trace (`kvtrace prompts needle`'s
 * ids needle-LENGTH-DEPTH), at one budget and chunk (the first of the study;
 * all are in the data). The measures: the needle span's retention_final and
 * attn_recall (spans.csv, mean over layers and kv heads), and the in-model
 * exact match of the answer (fidelity_join.csv, analyze --fidelity). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plot_figures.h"
#include "plot_style.h"
#include "results/results_schema.h"

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
    char span[64];           /* the span drawn ("" for a measure of the whole prompt) */
} cells;

/* One heat map's measure: its file and column, and how the figure names it. */
typedef struct {
    const results_schema *file;
    const char *column;
    bool span;               /* a span's measure (spans.csv): the rows of the needle span */
    const char *title;       /* the measure in the figure's title */
    const char *meaning;     /* what a cell is, in the caption */
    const char *missing;     /* the skip note without the file */
} heat_measure;

static const heat_measure RETENTION = {
    &RESULTS_SCHEMA_SPANS, "retention_final", true, "retention_final",
    "the share of the span's positions in the final cache (retention_final of spans.csv, mean over layers and kv "
    "heads)", "spans.csv is missing (the traces have no spans)."};
static const heat_measure RECALL = {
    &RESULTS_SCHEMA_SPANS, "attn_recall", true, "attn_recall",
    "the span's attention recall (attn_recall of spans.csv: the full-cache attention weight its cached positions "
    "get from the queries after it over the weight all its positions get, mean over layers and kv heads)",
    "spans.csv is missing (the traces have no spans)."};
static const heat_measure ANSWER = {
    &RESULTS_SCHEMA_FIDELITY_JOIN, "exact_match_evict", false, "exact match inside the model",
    "whether the model, evicting inside under that configuration, answers (exact_match_evict of "
    "fidelity_join.csv: its greedy continuation after the question starts with the answer; 1 dark, 0 white)",
    "fidelity_join.csv is missing (analyze ran without --fidelity DIR, a fidelity --prompts run on the study's "
    "prompts)."};

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

/* The cells of measure m: rows of traces named needle-LENGTH-DEPTH (and of a span measure, the span named
 * "needle", else the first span name). 0: read (cs->n may be 0); else KV_ error. */
static int read_cells(const plot_data *d, const heat_measure *m, cells *cs, kv_err *err)
{
    csv_table t;
    bool present = false;
    int rc = csv_read(&t, d->dir, m->file->file, &present, err);
    const results_dims dims = {.L = d->meta.L, .H = d->meta.H, .K = d->meta.K, .T = d->meta.T};
    if (!rc && present && !m->span) rc = results_schema_check(&t, m->file, &dims, NULL, err); /* spans.csv: on load */
    if (rc || !present) {
        csv_free(&t);
        return rc;
    }
    const int tr = csv_column(&t, "trace"), sp = m->span ? csv_column(&t, "span") : -2, cf = csv_column(&t, "config"),
              bu = csv_column(&t, "budget"), ch = csv_column(&t, "chunk"), al = csv_column(&t, "allocator"),
              vc = csv_column(&t, m->column);
    if (tr < 0 || sp == -1 || cf < 0 || bu < 0 || ch < 0 || al < 0 || vc < 0) {
        csv_free(&t);
        return kv_fail(err, KV_EINPUT, "%s: not %s's %s", t.path, m->file->maker, m->file->file);
    }
    cs->span[0] = '\0';
    if (m->span) {
        snprintf(cs->span, sizeof cs->span, "needle");
        bool has = false;
        for (size_t r = 0; r < t.n_rows && !has; r++) has = strcmp(csv_cell(&t, r, sp), "needle") == 0;
        if (!has && t.n_rows) snprintf(cs->span, sizeof cs->span, "%.63s", csv_cell(&t, 0, sp));
    }
    for (size_t r = 0; !rc && r < t.n_rows; r++) {
        long long length;
        double depth, v;
        int64_t budget, chunk;
        char tail;
        if ((m->span && strcmp(csv_cell(&t, r, sp), cs->span) != 0) ||
            sscanf(csv_cell(&t, r, tr), "needle-%lld-%lf%c", &length, &depth, &tail) != 2)
            continue;
        const int s = series_of(d, csv_cell(&t, r, cf), csv_cell(&t, r, al));
        if (s < 0 || csv_int(&t, r, bu, 1, INT64_MAX, &budget, err) || csv_int(&t, r, ch, 1, INT64_MAX, &chunk, err) ||
            csv_double(&t, r, vc, true, &v, err)) {
            rc = s < 0 ? 0 : err->code;
            continue;
        }
        if (isnan(v)) continue;   /* nothing measured there: the cell stays empty */
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

/* The measure as the title names it: "The span 'needle': retention_final", or the measure alone. */
static void measure_title(char *buf, size_t cap, const heat_measure *m, const cells *cs)
{
    if (m->span) snprintf(buf, cap, "The span '%s': %s", cs->span, m->title);
    else snprintf(buf, cap, "The answer: %s", m->title);
}

static void script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const char *data,
                   const heat_measure *m, const cells *cs, const int *series, int np, const int64_t *len, int nl,
                   const double *dep, int nd)
{
    const int cols = np < 4 ? np : 4, rows = (np + cols - 1) / cols, width = 300 * cols + 120, height = 260 * rows + 90;
    char what[200], about[260];
    measure_title(what, sizeof what, m, cs);
    snprintf(about, sizeof about, "%s by depth and length, one panel per configuration", m->title);
    plot_gp_preamble(f, ctx, name, about, width, height);
    fprintf(f, "N = %lld   # the budget drawn: any budget of %s\nB = %lld   # and the chunk\n",
            (long long)cs->c[0].budget, data, (long long)cs->c[0].chunk);
    fprintf(f, "set multiplot layout %d,%d margins %.3f,%.3f,%.3f,%.3f spacing 0.05,0.12 title sprintf(\"%s "
               "by depth and prompt length at N = %%d, chunk %%d (one cell a trace; white 0, dark 1, grey nothing "
               "measured)\", "
               "N, B) font ',12'\n", rows, cols, 78.0 / width, 1.0 - 110.0 / width, 62.0 / height, 1.0 - 60.0 / height,
            what);
    fprintf(f, "set object 1 rectangle from graph 0, graph 0 to graph 1, graph 1 behind fc rgb '#d9d9d9' fs solid "
               "1.0 noborder\n");
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

/* The full-cache model's exact-match rate over the cells' traces, as a caption's sentence (answer map only). */
static void full_rate(const plot_data *d, char *buf, size_t cap)
{
    buf[0] = '\0';
    csv_table t;
    bool present = false;
    kv_err ignore = {0};
    if (csv_read(&t, d->dir, RESULTS_SCHEMA_FIDELITY_JOIN.file, &present, &ignore) || !present) return;
    const int ru = csv_column(&t, "run"), bu = csv_column(&t, "budget"), fm = csv_column(&t, "exact_match_full");
    int n = 0, k = 0;
    for (size_t r = 0; ru >= 0 && bu >= 0 && fm >= 0 && r < t.n_rows; r++) {
        /* each trace once: the full run is the same for every configuration, so the rows of the first one */
        if (strcmp(csv_cell(&t, r, ru), csv_cell(&t, 0, ru)) != 0 || strcmp(csv_cell(&t, r, bu), csv_cell(&t, 0, bu)) != 0 ||
            strcmp(csv_cell(&t, r, fm), "nan") == 0)
            continue;
        n++, k += strtod(csv_cell(&t, r, fm), NULL) == 1.0;
    }
    csv_free(&t);
    if (n)
        snprintf(buf, cap, " The full-cache model answers %d of these %d prompts%s.", k, n,
                 2 * k < n ? ": fewer than half, so the task is beyond the model and this map says little about "
                             "eviction" : "");
}

static int heat_map(const plot_data *d, const plot_ctx *ctx, const char *name, const heat_measure *m,
                    plot_fig_out *out, kv_err *err)
{
    bool present = false;
    if (m->span) present = d->present[PF_SPANS];
    else {
        char path[4300];
        snprintf(path, sizeof path, "%s/%s", d->dir, m->file->file);
        present = access(path, F_OK) == 0;
    }
    if (!present) return plot_skip(out, "%s", m->missing);
    cells cs = {0};
    int rc = read_cells(d, m, &cs, err);
    if (rc || !cs.n) {
        free(cs.c);
        return rc ? rc : plot_skip(out, "no trace named needle-LENGTH-DEPTH (kvtrace prompts needle's ids) with a "
                                        "value.");
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
    char data[64], gp[64], what[200];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(gp, sizeof gp, "%s.gp", name);
    measure_title(what, sizeof what, m, &cs);
    FILE *f;
    rc = plot_open_data(ctx, out, data, &f, err);
    if (!rc) {
        fprintf(f, "# one block (index) per configuration: budget chunk length_index depth_index %s (%s)\n",
                m->column, what);
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
        script(f, d, ctx, name, data, m, &cs, series, np, len, nl, dep, nd);
        rc = plot_close(f, ctx, gp, err);
    }
    char rate[300] = "";
    if (!m->span) full_rate(d, rate, sizeof rate);
    snprintf(out->caption, sizeof out->caption,
             "The needle-in-a-haystack picture: for each policy configuration (a panel; at most %d), %s%s%s, one "
             "cell per trace, by the needle's depth in the prompt (0: first, 1: right before the question) and the "
             "prompt's length, at budget N = %lld and chunk %lld. How to read it: a dark column or row is a length "
             "or depth the policy keeps the needle at; a white cell lost it; a grey one measured nothing.%s "
             "%s.dat holds every budget and chunk: set N and B at the top of %s.gp to draw another.",
             MAX_PANELS, m->meaning, m->span ? " for the span " : "", m->span ? cs.span : "",
             (long long)cs.c[0].budget, (long long)cs.c[0].chunk, rate, name, name);
    free(cs.c);
    return rc;
}

int plot_fig_needle(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    return heat_map(d, ctx, name, &RETENTION, out, err);
}

int plot_fig_needle_recall(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    return heat_map(d, ctx, name, &RECALL, out, err);
}

int plot_fig_needle_answer(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    return heat_map(d, ctx, name, &ANSWER, out, err);
}
