/* results: what a sim run produced, in memory, and its outputs (docs/outputs.md). */
#ifndef KV_SIM_RESULTS_H
#define KV_SIM_RESULTS_H

#include "results/results_row.h"
#include "sim/replay.h"
#include "sim/sim.h"

typedef struct {
    int64_t L, H, K, T;
    int n_cfg;                 /* policies x allocators x chunks x budgets (sim_cfg_policy ...) */
    sim_stats *stats;          /* [cfg][L][H][N_PHASES] */
    double *logdet;            /* [cfg][L][K] */
    int64_t **retained;        /* [cfg] -> [L][K][width[cfg]] */
    int64_t *width;            /* [cfg] the most one (layer, kv head) can keep: N' = min(N, T) under uniform,
                                  the largest capacity (static) or K·N (dynamic), at most T; T for `full` */
    int64_t *head_budget;      /* [cfg][L][K] rows kept at the end */
    double *head_mean;         /* [cfg][L][K] rows kept after each evicting step, averaged; NaN: none */
    uint64_t *kept_hash;       /* [cfg][L][K] the hash of every step's kept positions (replay.h): same_as */
    int64_t n_steps;           /* eviction steps of the replay */
    int32_t *step_cand, *step_kept; /* NULL, or (--step-counts) [cfg][L][K][n_steps] */
    trace_span *spans;         /* [n_spans] the trace's /spans (a copy); NULL: none */
    int64_t n_spans;
    double *span_ret, *span_recall; /* NULL, or [cfg][L][K][n_spans]: retention_mean, attn_recall (sim/spans.c) */
    int64_t *calls, *candidates;
    double *score_ns;          /* [cfg][K] */
    /* where the time went (seconds; replay parts summed over threads) */
    double load_s, reference_s, replay_s, metrics_s, wall_s;
} sim_results;

/* A policy configuration or budget named twice is KV_EUSAGE (before any output). */
int sim_results_alloc(sim_results *r, const sim_opts *o, int64_t L, int64_t H, int64_t K, int64_t T, int64_t n_steps,
                      kv_err *err);
void sim_results_free(sim_results *r);

/* Configuration c's statistics of phase p averaged over layers and query
 * heads (n summed), and the mean final_logdet over layers and kv heads. */
void sim_results_summarize(const sim_results *r, int c, int p, sim_stats *out, double *logdet_mean);

/* One trace's results as written: its prompt id (the `trace` column), its
 * path, the options of its plan (budgets in N, labels) and its results. */
typedef struct {
    const char *id, *path;
    const sim_opts *o;
    const sim_results *r;
} sim_trace_out;

/* "config,...,chunk,decode_chunk,eval_stride" of configuration c, one string: what names a configuration
 * in the work folder and when the traces of a study are compared. */
void sim_cfg_prefix(const sim_opts *o, int c, char *buf, size_t cap);

/* The first configuration before c at the same budget that kept, in every trace of t[0..n), the same
 * positions at every step of every stream (their kept_hash agree), else -1: its results equal c's row
 * for row (docs/sim.md, "Configurations that coincide"). */
int sim_same_as(const sim_trace_out *t, int n, int c);

/* Configuration c's labels, as every sim CSV writes them (docs/outputs.md). */
typedef struct {
    char config[512], alloc[300], run[830];   /* run: results_run_label, the CSVs' last column */
    const char *policy, *params;
    int64_t budget, chunk;
    double fraction;   /* NaN: the budget was given as N */
} sim_cfg_cols;
void sim_cfg_cols_of(const sim_opts *o, int c, sim_cfg_cols *k);
/* The run columns results.csv, summary.csv and timing.csv start with: config, policy, params, budget,
 * allocator, budget_fraction, chunk, and (strides) decode_chunk, eval_stride. */
void sim_row_run(results_row *w, const sim_opts *o, const sim_cfg_cols *k, bool strides);
/* The same_as cell of configuration c over traces t[0..n): the run label of sim_same_as's configuration
 * (made in *k), or "" when there is none. */
const char *sim_same_as_label(const sim_trace_out *t, int n, int c, sim_cfg_cols *k);

/* results.csv, timing.csv, results.h5 and provenance.json into `dir` for
 * traces t[0..n) (one or a study); a one-trace run's table on stdout. The
 * summaries are sim/summary.c's (sim_run calls both). */
int sim_results_write(const sim_trace_out *t, int n, const char *dir, kv_err *err);

/* sim/summary.c: every trace has the same configurations (labels and N), or
 * KV_EINPUT naming the trace that differs; summary.csv (the mean over traces
 * with its bootstrap interval) and summary_by_trace.csv; the study's table. */
int sim_summary_check(const sim_trace_out *t, int n, kv_err *err);
int sim_summary_write(const sim_trace_out *t, int n, const char *dir, kv_err *err);
void sim_summary_print(const sim_trace_out *t, int n);

/* sim/spans.c: r's spans (a copy of the trace's) and their result arrays. */
int sim_spans_alloc(sim_results *r, const trace_span *spans, int64_t n_spans, kv_err *err);

/* The full-cache weight each query after a span puts on it, out [n_spans][H][T]
 * (malloc'ed; 0 for i < end), from one layer's q, k and the reference's
 * log-sum-exps: rows of scores in blocks, never T x T. */
int sim_spans_full(const sim_layer *ly, double **out, kv_err *err);

/* spans.csv (per trace, span, configuration, layer, kv head) and
 * spans_summary.csv (per span name and configuration: means over the traces
 * holding that span, with 95% bootstrap intervals); nothing when no trace
 * has spans (docs/sim.md, "Spans"). */
int sim_spans_write(const sim_trace_out *t, int n, const char *dir, kv_err *err);

#endif
