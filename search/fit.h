/* fit: learn a score expression from feature files (docs/policy-search.md).
 *
 * Feature files (`kvtrace features`: HDF5 format "kvtrace-features" or its --csv form) hold, per
 * eviction step and candidate, the expression language's features and the oracle's targets. The
 * fitter reads them one eviction step at a time (fit_read.c), standardises every feature over the
 * step's candidates exactly as the language's z() does, and fits score = sum_i w_i z(f_i)
 * (fit_solve.c) by least squares, ridge, logistic regression on oracle_keep (IRLS) or a pairwise
 * ranking loss (kept over evicted, Newton); fit_write.c writes the result as a --defines file, fit.json
 * and report.md. Memory: O(F^2) plus one step; the files are read once per pass. */
#ifndef KV_SEARCH_FIT_H
#define KV_SEARCH_FIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/csv.h"
#include "core/kv_error.h"

enum { FIT_MAX_F = 16, FIT_MAX_FILES = 256, FIT_NAME_MAX = 64, FIT_EXPR_MAX = 2048 /* expr_def.text */ };

typedef enum { FIT_LS, FIT_RIDGE, FIT_LOGISTIC, FIT_RANK } fit_objective;
typedef enum { FIT_TARGET_ATTN, FIT_TARGET_KEEP } fit_target;

/* The feature files and the columns fitted. */
typedef struct {
    const char *const *files;        /* [n_files] */
    int n_files;
    int F;                           /* features fitted (the file's, or --features) */
    char names[FIT_MAX_F][FIT_NAME_MAX];
    char model[FIT_MAX_FILES][128];  /* each file's first trace's model ("" unknown) */
    bool csv[FIT_MAX_FILES];         /* the --csv form */
    int file_F[FIT_MAX_FILES];       /* the file's feature count */
    int col[FIT_MAX_FILES][FIT_MAX_F]; /* the fitted features' columns in each file */
    int64_t n_rows;                  /* over every file */
    const char *const *only;         /* NULL, or the trace ids fitted on ([n_only]; fit --split) */
    int n_only;
} fit_input;

/* Whether the trace `id` is fitted on (in->only). */
bool fit_trace_used(const fit_input *in, const char *id);

/* One eviction step: n candidates, their standardised features z[n·F] (row-major) and the
 * features as the file holds them, raw[n·F]. */
typedef struct {
    int64_t n;
    int F;
    const double *z;
    const double *raw;
    const double *attn;      /* future_attn [n] */
    const uint8_t *keep;     /* oracle_keep [n] */
    int file;                /* index into fit_input.files */
    const char *trace;       /* the trace's id (HDF5 group name, CSV `trace`) */
    int64_t row0;            /* the step's first row within the trace */
    int64_t ordinal;         /* the step's index over every file (seeds the ranking pairs) */
} fit_step;

typedef int (*fit_step_fn)(void *ctx, const fit_step *s, kv_err *err);

/* Opens and checks every file's header (in->only and n_only are kept: set them before) (format, version, feature names, every trace's datasets
 * and their lengths); picks the columns: `subset` (comma list, NULL: every feature of the first
 * file). Every problem of a file is KV_EINPUT naming it. */
int fit_input_open(fit_input *in, const char *const *files, int n_files, const char *subset, kv_err *err);

/* Calls fn for every eviction step of every file in order (rows are checked: NaN or infinite
 * features and targets, oracle_keep not 0/1, are KV_EINPUT naming file, trace and row). */
int fit_scan(const fit_input *in, fit_step_fn fn, void *ctx, kv_err *err);

/* A --csv features file read whole (csv.h); PATH split into csv_read's directory and name. */
int fit_csv_open(csv_table *t, const char *path, kv_err *err);

typedef struct {
    fit_objective objective;
    fit_target target;       /* ls, ridge; logistic and rank use oracle_keep */
    double lambda;           /* ridge, logistic, rank penalty on the weights */
    uint64_t seed;           /* rank: the pairs sampled */
    int pairs;               /* rank: pairs sampled per step (at most) */
    int max_iter;            /* logistic, rank */
} fit_opts;

typedef struct {
    int F;
    double w[FIT_MAX_F];     /* weights of z(f_i) */
    double intercept;        /* ls, ridge, logistic (0 for rank) */
    double loss;             /* the training loss, per row (per pair for rank), without the penalty */
    double objective;        /* the minimised objective (loss summed + penalty) */
    double recall;           /* mean over steps with a kept set: share of oracle-kept in the top |kept| */
    int64_t n_rows, n_steps, n_pairs;
    int iterations;
    bool converged;
} fit_result;

int fit_run(const fit_input *in, const fit_opts *o, fit_result *r, kv_err *err);

/* The fitted score of a step's candidate i: sum_f w_f z_if, summed in the order the expression does. */
double fit_score(const fit_result *r, const double *z_row);

/* Outputs (fit_write.c): NAME = c1*z(f1) + ..., %.17g coefficients. */
int fit_expression(const fit_input *in, const fit_result *r, const char *name, char *buf, size_t cap, kv_err *err);
typedef struct {
    const char *name, *command;
    const fit_opts *opts;
    double reproduced;       /* set by fit_write: the check's largest relative difference (fit.json) */
} fit_out;
int fit_write(const char *dir, const fit_input *in, const fit_result *r, const fit_out *out, kv_err *err);
/* DIR/scores.csv: file,trace,row,score (every row, %.17g), for checking the expression. */
int fit_write_scores(const char *dir, const fit_input *in, const fit_result *r, kv_err *err);
const char *fit_objective_name(fit_objective o);

/* `kvtrace fit FEATURES... -o DIR`: a score expression fitted on feature files, and its held-out
 * evaluation (verb_fit.c, docs/policy-search.md). */
int fit_main(int argc, char **argv);

#endif
