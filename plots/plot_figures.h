/* plot_figures: figures 1-6, the per-layer error (7), the allocations (8), error versus chunk (9) and span retention (10) (docs/plot.md#the-figures). Each figure writes its gnuplot
 * script NAME.gp and data file(s) into the figure directory, and says in
 * `out` what it shows (the caption) or why it was skipped. The table in
 * plot_figures.c lists them in report order; the helpers they share are in
 * plot_fig_util.c. */
#ifndef KV_PLOT_FIGURES_H
#define KV_PLOT_FIGURES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "plot_input.h"
#include "plot_style.h"

enum { PLOT_MAX_DATA = 4 };

typedef struct {
    char caption[2048];             /* what it shows and how to read it (plain text) */
    char skip[512];                 /* non-empty: skipped, and why (plain text) */
    char data[PLOT_MAX_DATA][64];   /* data files written beside the script */
    int n_data;
} plot_fig_out;

typedef struct {
    const char *name;   /* file stem, e.g. "fig5_error" */
    const char *title;  /* heading in the report */
    int (*write)(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
} plot_figure;

extern const plot_figure PLOT_FIGURES[];
extern const int PLOT_N_FIGURES;

int plot_fig_detail(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
int plot_fig_spearman(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
int plot_fig_pca(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);

/* --pca-policies LIST (plot_fig_pca.c): figure 3's panels, each a policy name
 * or a configuration's full label (the config column). */
enum { PLOT_MAX_PCA = 8 };
typedef struct {
    char entry[PLOT_MAX_PCA][256];
    int n;
} plot_pca_list;

/* LIST split at commas; an empty entry, more than PLOT_MAX_PCA or one too
 * long is a KV_EUSAGE error. */
int plot_pca_parse(const char *list, plot_pca_list *out, kv_err *err);

/* With an explicit LIST (not NULL): each entry must match a run of the
 * analysis directory (pca_kept.csv), else KV_EUSAGE naming it. Called before
 * anything is written. */
int plot_fig_pca_check(const plot_data *d, const char *list, kv_err *err);
int plot_fig_logdet(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
int plot_fig_error(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
int plot_fig_timing(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
int plot_fig_layers(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
int plot_fig_alloc(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);

/* Shared by the figures (plot_fig_util.c). */

/* Writes a number for gnuplot: %.9g, or NaN. */
void plot_num(FILE *f, double v);

/* Records the skip reason (printf-style). Returns KV_OK: a skip is not an error. */
int plot_skip(plot_fig_out *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Opens NAME.dat style data file `file` and records it in out->data. */
int plot_open_data(const plot_ctx *ctx, plot_fig_out *out, const char *file, FILE **f, kv_err *err);

/* One point of a line-per-series figure (5, 6 and 9); `budget` is the x
 * value (figure 9: the chunk). With `band`, band[] = lo1, hi1, lo2, hi2: the
 * 95% intervals of y1 and y2 over traces (a study). */
typedef struct { int series; int64_t budget; double y1, y2; bool band; double lo1, hi1, lo2, hi2; } plot_point;

/* Writes one gnuplot data block (index) per series, sorted by budget: "budget y1 y2"
 * (and "lo1 hi1 lo2 hi2" for points with a band).
 * Fills order[] (capacity d->series.n) with the series of each block; returns the count. */
int plot_write_blocks(FILE *f, const plot_data *d, plot_point *pts, size_t n, int *order);

/* The plot command of a line-per-series panel: block i (index i) is series
 * order[i], drawn with `using` (a gnuplot using spec, e.g. "1:2"), in the
 * series' colour, dash and point type, titled with its legend label. */
void plot_gp_lines(FILE *f, const plot_data *d, const char *data, const int *order, int blocks, const char *using);
/* The same after plot_gp_bands (continued: no `plot` keyword). */
void plot_gp_lines_more(FILE *f, const plot_data *d, const char *data, const int *order, int blocks,
                        const char *using, bool continued);

/* Before plot_gp_lines_more's lines: the bands (gnuplot filledcurves, `using`
 * x:lo:hi, of each block) in the series' colours, translucent; `plot` is
 * written here and a trailing ", \" so that the lines continue the command. */
void plot_gp_bands(FILE *f, const plot_data *d, const char *data, const int *order, int blocks, const char *using);

/* Figure 9: output error and attention recall versus the prefill chunk (sim --chunks). */
int plot_fig_chunks(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);

/* Figure 10: span retention versus budget (spans_summary.csv; plot_fig_spans.c). */
int plot_fig_spans(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);

/* Figure 11: a needle study's retention as a depth x length heat map per configuration (plot_fig_needle.c). */
int plot_fig_needle(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
/* Figure 12: the same map of the needle span's attention recall; figure 13: of the in-model exact match
 * (fidelity_join.csv, analyze --fidelity) (plot_fig_needle.c). */
int plot_fig_needle_recall(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
int plot_fig_needle_answer(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);
/* Figure 14: paired.csv's differences against the baseline as a forest plot (plot_fig_paired.c). */
int plot_fig_paired(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err);

/* plot_key_width of a legend of every series' label at font size font_pt: a figure reserves it in a
 * margin of its own at the right, so that the legend never covers a panel (tests/scripts/test_legends.py). */
int plot_key_px(const plot_data *d, int font_pt);

/* The x axis of a budget figure: explicit tics at the budgets (when few) and
 * a log2 scale when they span more than 4x. */
void plot_gp_budget_axis(FILE *f, const plot_point *pts, size_t n);

#endif
