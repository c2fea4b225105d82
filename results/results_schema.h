/* results_schema: one description of each CSV that `sim` (results
 * directory) and `analyze` (analysis directory) write: its columns in order,
 * each with a kind (type and range) and whether it is part of the row's key,
 * and how many rows the file must have. The writers build their header rows
 * from it (results_schema_header); the readers (analyze of a results
 * directory before it copies the CSVs, plot of an analysis directory) check
 * every row against it (results_schema_check), so a column added to a writer
 * reaches its validator by construction (docs/outputs.md, "What readers
 * check").
 *
 * Row counts: the key columns of a row are unique in the file, and per run
 * (config, budget) the key columns span their whole grid (every layer, head,
 * phase, ...), so a file cut at a line boundary or missing rows is refused
 * just as one cut in the middle of a number is (csv_read requires the final
 * newline). */
#ifndef KV_RESULTS_SCHEMA_H
#define KV_RESULTS_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/csv.h"
#include "core/kv_error.h"

typedef enum {
    SC_TEXT,     /* any text (meta.csv's values) */
    SC_CONFIG,   /* the config label: policy, or policy ":" params (the next two columns) */
    SC_POLICY,   /* a policy name: not empty, no ':' */
    SC_PARAMS,   /* its canonical parameters, "" when none */
    SC_BUDGET,   /* integer >= 1 */
    SC_ALLOC,    /* an allocator label (name[:params]): not empty, no ',' */
    SC_FRACTION, /* "" (a budget given as N), or a real in (0, 1] (one given as a fraction of T) */
    SC_COUNT,    /* integer >= 0 */
    SC_LAYER,    /* integer in [0, L) */
    SC_QHEAD,    /* integer in [0, H) */
    SC_KVHEAD,   /* integer in [0, K); with a q_head column in the row, q_head / (H/K) */
    SC_POS,      /* integer in [0, T) */
    SC_DETAIL,   /* integer in [0, min(T, 64)) (detail.csv's row and col) */
    SC_PHASE,    /* prefill | decode | all */
    SC_REAL,     /* finite real */
    SC_NONNEG,   /* real >= 0 */
    SC_UNIT,     /* real in [0, 1] (a small rounding slack) */
    SC_CORR,     /* real in [-1, 1] (a small rounding slack) */
} results_col_kind;

typedef struct {
    const char *name;
    results_col_kind kind;
    bool nan_ok;   /* "nan" allowed (docs/outputs.md says where) */
    bool key;      /* part of the row's key (with config and budget, which always are) */
} results_col;

typedef enum {
    SR_GRID,      /* per run (or once, without config columns): the whole grid of the key columns */
    SR_GRID_OR_0, /* SR_GRID, or no rows at all (spearman.csv without colsum, detail.csv) */
    SR_SUBSET,    /* keys unique; per run, every (layer, kv_head) with at least one row, and for a uniform
                     run the same number of rows (pca_kept.csv) */
    SR_FREE,      /* meta.csv: checked by its reader */
} results_rows;

typedef struct {
    const char *file;
    const results_col *cols;
    int n_cols;
    results_rows rows;
    const char *maker;   /* the verb whose output directory holds the file: "sim", "analyze", "fidelity",
                            "fidelity --prompts" (docs/outputs.md's section) */
} results_schema;

/* The results directory's CSVs (sim/results.c writes them; analyze copies them). */
extern const results_schema RESULTS_SCHEMA_RESULTS, RESULTS_SCHEMA_SUMMARY, RESULTS_SCHEMA_TIMING,
    RESULTS_SCHEMA_SUMMARY_BY_TRACE;
/* spans.csv and spans_summary.csv (sim/spans.c writes them, only when a trace has /spans; analyze checks
 * and copies them, plot reads spans_summary.csv). Their run columns are not the first four: the checker
 * finds config, budget (the first budget-kind column) and allocator by kind. */
extern const results_schema RESULTS_SCHEMA_SPANS, RESULTS_SCHEMA_SPANS_SUMMARY;
/* The analysis directory's own CSVs (analysis/ writes them; plot reads them). */
extern const results_schema RESULTS_SCHEMA_META, RESULTS_SCHEMA_SPEARMAN, RESULTS_SCHEMA_LOGDET,
    RESULTS_SCHEMA_PCA, RESULTS_SCHEMA_PCA_KEPT, RESULTS_SCHEMA_PCA_VAR, RESULTS_SCHEMA_DETAIL,
    RESULTS_SCHEMA_BUDGETS, RESULTS_SCHEMA_HEAD_IMPORTANCE;
/* A study's analysis directory: the means over traces (analysis/analyze_study.c writes them). */
extern const results_schema RESULTS_SCHEMA_STUDY_SPEARMAN, RESULTS_SCHEMA_STUDY_LOGDET;
/* analyze --baseline: every configuration against the baseline, paired over traces (analysis/paired.c). */
extern const results_schema RESULTS_SCHEMA_PAIRED;
/* analyze --fidelity: sim's per-trace measures joined with fidelity --prompts' (analysis/fidelity_join.c). */
extern const results_schema RESULTS_SCHEMA_FIDELITY_JOIN;

/* Every table above, results directory first (`kvtrace info --columns` lists them; docs/outputs.md is
 * checked against it). */
extern const results_schema *const RESULTS_SCHEMAS[];
extern const int RESULTS_N_SCHEMAS;

/* Creates DIR/s->file with s's header row (csv_create). */
FILE *results_schema_create(const char *dir, const results_schema *s, kv_err *err);

/* The shape a file is checked against. */
typedef struct {
    int64_t L, H, K, T;
    double max_abs;   /* > 0: unbounded reals (SC_REAL, SC_NONNEG) must be 0 or within [1/max_abs, max_abs] in
                         magnitude (what a figure can draw: plot); fractions and correlations are not limited;
                         0: any finite value */
} results_dims;

/* The runs (config, allocator, budget) of a file, in order of first
 * appearance (the labels are copies). A file without an allocator column
 * (analyze's own, results directories before allocators) holds uniform runs. */
typedef struct {
    const char **config, **alloc;
    int64_t *budget;
    int n, cap;
} results_runs;
/* Appends a run; its index, or -1 (KV_EFAIL) when out of memory. */
int results_runs_add(results_runs *r, const char *config, const char *alloc, int64_t budget, kv_err *err);
void results_runs_free(results_runs *r);

/* Checks an already read table against s: the header exactly, every cell's
 * kind and range, unique keys and the row count. `runs` (may be NULL)
 * receives the file's runs. The first problem is one KV_EINPUT line
 * "DIR/FILE:LINE: what is wrong". */
int results_schema_check(const csv_table *c, const results_schema *s, const results_dims *d, results_runs *runs,
                         kv_err *err);

/* Whether runs `got` (of file `path`) are exactly `want` (the same set; any
 * order); `extra` names one run `got` may hold beyond them ("full_cache" in
 * logdet.csv), NULL for none. KV_EINPUT naming the first difference. */
int results_runs_match(const results_runs *got, const char *path, const results_runs *want, const char *want_path,
                       const char *extra, kv_err *err);

/* analyze's check of a results directory before it copies it: results.csv,
 * summary.csv and timing.csv, each present, checked against its schema and
 * holding exactly the runs of results.h5 (h5_runs), then results_check_spans. */
int results_check_csvs(const char *dir, const results_dims *d, const results_runs *h5_runs, kv_err *err);

/* spans.csv and spans_summary.csv when present (both or neither): each
 * checked against its schema and, when h5_runs is not NULL, holding exactly
 * those runs. Also what analyze runs on a study's results directory. */
int results_check_spans(const char *dir, const results_dims *d, const results_runs *h5_runs, kv_err *err);

#endif
