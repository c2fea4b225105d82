/* analyze: `kvtrace analyze trace.h5 [--results DIR] -o OUTDIR` (docs/analyze.md):
 * Spearman ρ, log-det, PCA and the detail matrices, written as the analysis
 * directory of docs/analysis_dir.md that `kvtrace plot` reads (every column:
 * docs/outputs.md#kvtrace-analyze--o-dir-an-analysis-directory).
 *
 * The trace is read one layer at a time on the calling thread (all HDF5 I/O
 * there); the layer's kv heads are independent work items on threads, each
 * with its own output slot and scratch, so every output file is
 * byte-identical whatever --threads. Memory: one layer's keys, column sums
 * and queries, per thread O(T·D) plus an O(256·T) cosine block; nothing T×T. */
#ifndef KV_ANALYZE_H
#define KV_ANALYZE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "provenance/provenance.h"
#include "study/study.h"

typedef struct {
    const char *trace;
    const char *results;       /* sim output directory, or NULL (the first of results_dirs) */
    const char *const *results_dirs; /* [n_results] every --results, merged when their runs are disjoint */
    int n_results;
    const char *output;        /* analysis directory */
    const prov_record *prov;   /* for provenance.json (may be NULL) */
    int64_t detail_layer, detail_head; /* -1: the median-ρ query head */
    int64_t sinks, recent;     /* head_importance.csv's S and W (head_importance.h) */
    int threads;               /* 0: one per CPU */
    bool force, quiet;
    /* A study's per-trace analyses (analyze_study.c): only the runs of this
     * trace and chunk (NULL, 0: every run), and no copies of sim's CSVs. */
    const char *sel_trace;
    int64_t sel_chunk;
    const char *baseline;      /* --baseline CONFIG[@ALLOCATOR]: paired.csv (analysis/paired.h), or NULL */
    const char *fidelity;      /* --fidelity DIR (fidelity --prompts): fidelity_join.csv (analysis/fidelity_join.h) */
} analyze_opts;

int analyze_run(const analyze_opts *o, kv_err *err);

/* Whether the --results directory holds runs of more than one (trace,
 * chunk): a study's or a --chunks sweep's, which analyze_study_run takes. */
int analyze_results_is_study(const char *dir, bool *study, kv_err *err);

/* `kvtrace analyze STUDY --results DIR -o OUT` (docs/analyze.md): every
 * trace's (and chunk's) analysis in OUT/traces/ID/chunkB/, and the means over
 * traces with their bootstrap intervals (study/). `set`: the traces as sim
 * takes them (study_set_resolve). */
int analyze_study_run(const analyze_opts *o, const study_set *set, kv_err *err);

/* `kvtrace analyze` */
int analyze_main(int argc, char **argv);

#endif
