/* heldout: the fitted policy measured on traces it was not fitted on (docs/policy-search.md#held-out-evaluation):
 * sim in-process over the test traces with the fitted expression and the
 * baselines, then per policy x budget the mean out_rel_err and attn_recall over the test traces with
 * sim's 95% percentile bootstrap intervals (study/), as heldout.csv, heldout.md and a figure. */
#ifndef KV_SEARCH_HELDOUT_H
#define KV_SEARCH_HELDOUT_H

#include <stdint.h>

#include "core/kv_error.h"
#include "study/study.h"

typedef struct {
    const char *definition;      /* the fitted policy's definition (policy.defines' line) */
    const char *name;            /* its name */
    const char *baselines;       /* comma list of policies */
    const int64_t *budgets;
    int n_budgets;
    int64_t chunk;
    const study_set *test;       /* the held-out traces */
    const char *train_model;     /* the training features' model ("" unknown) */
    const char *train_what;      /* how the training set was chosen, for the table's header */
    int threads;
    bool mixed_models;
} heldout_opts;

/* Writes DIR/heldout/ (sim's results directory), DIR/heldout.csv, DIR/heldout.md, DIR/heldout.svg
 * (when gnuplot runs; the table says so otherwise). */
int heldout_run(const heldout_opts *o, const char *dir, kv_err *err);

/* The mean over the test traces of out_rel_err(fitted) - out_rel_err(baseline) at budget, with the
 * 95% percentile bootstrap interval (study_resamples), from DIR/heldout/summary_by_trace.csv:
 * out[3] = mean, lo, hi (NaN when a trace lacks a row). */
int heldout_paired(const char *dir, const char *fitted, const char *baseline, int64_t budget, const study_set *test,
                   double out[3], kv_err *err);

/* A study's prompts split by a seeded shuffle: the first round(fraction * n) (at least 1, at most
 * n - 1) train, the rest test; train[i] and test[i] are indices into s, each list ascending. */
int heldout_split(const study_set *s, double fraction, uint64_t seed, int *train, int *n_train, int *test,
                  int *n_test, kv_err *err);

#endif
