/* plot_input: the analysis directory (analysis_dir.md) read and checked
 * before anything is drawn. Every file's header, field counts, numbers and
 * ranges (against meta.csv's L, H, K, T) are validated here; the figures
 * then use plain arrays. meta.csv is required; any other file may be
 * missing (its figure is skipped with a note). */
#ifndef KV_PLOT_INPUT_H
#define KV_PLOT_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "core/csv.h"
#include "results/results_schema.h"
#include "plot_series.h"

/* The input files; `present` is indexed by these. */
enum { PF_META, PF_SPEARMAN, PF_LOGDET, PF_PCA, PF_PCA_KEPT, PF_PCA_VAR, PF_DETAIL, PF_SUMMARY, PF_TIMING, PF_RESULTS,
       PF_BUDGETS, PF_HEAD_IMPORTANCE, PF_SPANS, PF_SPANS_SUMMARY, PF_N };
extern const char *const PLOT_FILES[PF_N];   /* their names (plot_table.c) */

typedef struct {
    csv_table csv;  /* meta.csv, kept for the report's table (key, value per row) */
    int64_t L, H, K, D, T, detail_layer, detail_head;
} plot_meta;

typedef struct { int64_t layer, head; double rho_pairwise, rho_anchor; } plot_rho;
typedef struct { int series; int64_t budget, layer, kv_head; double logdet; } plot_logdet;
typedef struct {
    int series;
    int64_t budget, chunk, n_traces;     /* n_traces 1 for a summary without it (before studies) */
    double err_mean, recall_mean, logdet_mean;
    double err_lo, err_hi, recall_lo, recall_hi; /* their 95% intervals over traces (NaN without them) */
    char same_as[256];                   /* summary.csv's same_as: the run it coincides with ("" none, or no column) */
} plot_summary;
typedef struct { int series; int64_t budget, calls; double ns; } plot_timing;
typedef struct { int series; int64_t budget; } plot_pca_run;   /* one run of pca_kept.csv */
typedef struct { int series; int64_t budget, layer, n_heads; double err_mean; } plot_layer_err;
typedef struct { int series; int64_t budget, layer, kv_head, head_budget; } plot_budget; /* budgets.csv */
/* spans_summary.csv's three statistics, in its column order */
enum { PLOT_SPAN_RET_MEAN, PLOT_SPAN_RET_FINAL, PLOT_SPAN_RECALL, PLOT_SPAN_STATS };
extern const char *const PLOT_SPAN_STAT_NAMES[PLOT_SPAN_STATS];   /* "retention_mean", ... */
typedef struct {
    int series, span;                    /* span: index into plot_data.span_names */
    int64_t budget, chunk, n_traces;
    double mean[PLOT_SPAN_STATS], lo[PLOT_SPAN_STATS], hi[PLOT_SPAN_STATS];   /* NaN where the file says nan */
} plot_span;
enum { PLOT_MAX_SPANS = 64, PLOT_SPAN_NAME = 64 };

typedef struct {
    int64_t layer, kv_head;   /* the detail layer's kv head */
    int64_t n;                /* keys (T) */
    double *pc1, *pc2;        /* [T] */
    unsigned char *kept;      /* [n_runs][T]: 1 kept in that run's final cache (pca_kept.csv) */
    bool has_var;             /* pca_var.csv had this (layer, kv head) */
    double var_pc1, var_pc2, var_total;
} plot_pca;

typedef struct {
    int64_t n;                /* min(64, T) */
    double *cos, *attn;       /* [n][n], row-major (row = query / first key, col = key) */
} plot_detail;

typedef struct {
    const char *dir;
    bool present[PF_N];       /* file exists (it may still hold no rows) */
    plot_meta meta;
    plot_series_set series;
    plot_rho *rho;          size_t n_rho;
    plot_logdet *logdet;    size_t n_logdet;
    plot_summary *summary;  size_t n_summary;  /* phase=all rows only */
    size_t n_summary_rows;                     /* every phase */
    plot_timing *timing;    size_t n_timing;
    plot_layer_err *layers; size_t n_layers;   /* results.csv, phase=all: mean over query heads per layer */
    plot_budget *budgets;   size_t n_budgets;  /* budgets.csv: rows kept at the end per run and stream */
    plot_span *spans;       size_t n_spans;    /* spans_summary.csv, in file order */
    char span_names[PLOT_MAX_SPANS][PLOT_SPAN_NAME]; int n_span_names;   /* in order of first appearance */
    plot_pca_run *runs;         size_t n_runs;     /* pca_kept.csv's runs, in order of first row */
    plot_pca pca;           bool has_pca;
    plot_detail detail;
    results_runs runs_ref;    /* summary.csv's runs: every other file's must be these */
} plot_data;

/* The largest magnitude (and its inverse the smallest non-zero one) of a
 * number a figure is drawn from: beyond it gnuplot's ranges overflow, so
 * such a file is refused (exit 3) rather than drawn wrong. */
#define PLOT_MAX_ABS 1e100

/* Reads and validates everything; on error *d is freed and err says which
 * file and line (KV_EINPUT). */
int plot_input_load(plot_data *d, const char *dir, kv_err *err);

/* plot_input_spans.c: spans_summary.csv into d->spans (spans.csv checked only). */
int plot_input_spans(plot_data *d, kv_err *err);
void plot_input_free(plot_data *d);

/* A meta.csv value, or NULL when the key is absent. */
const char *plot_meta_get(const plot_meta *m, const char *key);

/* Internal to plot_input*.c: the PCA files (pca.csv, pca_kept.csv, pca_var.csv). */
int plot_input_pca(plot_data *d, kv_err *err);
/* results.csv (plot_input_layers.c). */
int plot_input_layers(plot_data *d, kv_err *err);

#endif
