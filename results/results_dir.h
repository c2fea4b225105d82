/* results_dir: the directory `kvtrace sim -o DIR` writes and `kvtrace
 * analyze --results DIR` reads (docs/outputs.md#kvtrace-sim--o-dir-a-results-directory): its file names and
 * the byte copies analyze makes of its CSVs. Its provenance.json (the command
 * and the trace that made it) is provenance/'s. results.h5 is
 * results_h5.h's; the rows of the three CSVs are sim's (sim/results.c), the
 * only writer of them. */
#ifndef KV_RESULTS_DIR_H
#define KV_RESULTS_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"

#define RESULTS_FILE_H5 "results.h5"            /* final caches and log-dets (results_h5.h) */
#define RESULTS_FILE_CSV "results.csv"          /* one row per configuration, layer, query head, phase */
#define RESULTS_FILE_SUMMARY "summary.csv"      /* one row per configuration and phase (over traces) */
#define RESULTS_FILE_SUMMARY_BY_TRACE "summary_by_trace.csv" /* one row per trace, configuration and phase */
#define RESULTS_FILE_TIMING "timing.csv"        /* one row per configuration */
#define RESULTS_FILE_SPANS "spans.csv"          /* traces with /spans: one row per trace, span, configuration, layer, kv head */
#define RESULTS_FILE_SPANS_SUMMARY "spans_summary.csv" /* one row per span name and configuration (over traces) */
/* A configuration's label, the `config` column of every CSV that names one
 * and results.h5's @config: the policy's registry name, then ":" and its
 * canonical parameters (every parameter, defaults filled, sorted by key) when
 * it has any: "keydiff:anchor=norm:metric=cos:window=0", "full", "knorm".
 * Never empty for a non-empty policy, so pandas never reads it as NaN. */
void results_config_label(const char *policy, const char *params, char *buf, size_t cap);
/* The allocator label of a run that names none: results written before allocators, analyze's full_cache
 * rows, an --baseline without @ALLOCATOR (the default allocator's label, allocators/alloc_uniform.c). */
#define RESULTS_ALLOC_NONE "uniform"

/* The `run` label of sim's CSVs: the whole configuration but the budget, "CONFIG@ALLOCATOR/CHUNK"
 * (keydiff:anchor=norm:metric=cos:window=0@pyramid:beta=20:window=32/16), so that groupby(["run",
 * "budget"]) keeps every run of a sweep over allocators and chunks apart (docs/outputs.md). */
void results_run_label(const char *config, const char *allocator, int64_t chunk, char *buf, size_t cap);


/* Copies DIR/NAME byte for byte to OUTDIR/NAME when it exists (*copied says
 * whether it did); a read or write failure is KV_EFAIL. */
int results_copy_file(const char *dir, const char *name, const char *outdir, bool *copied, kv_err *err);

/* OUTDIR/NAME from dirs[0..n)'s NAME (analyze --results A --results B): the
 * first file whole, then each later one without its header row (the readers
 * checked that the headers are the same); a missing file is skipped. */
int results_concat_file(const char *const *dirs, int n, const char *name, const char *outdir, kv_err *err);

#endif
