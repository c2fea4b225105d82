/* results_h5: results.h5, the file of a `kvtrace sim` results directory that
 * `analyze` reads (docs/outputs.md#resultsh5--the-final-caches). Its one layout, written and read here:
 *
 *   /runs/runNNNN         one group per (policy, budget) run, in sim's order
 *                         (policy-major, budgets as given), numbered from 1
 *                         and zero-padded to one width (at least 4 digits:
 *                         run0001, run0002, ...) so that name order, which
 *                         h5py and HDF5 listings use, is run order
 *                         (results_run_name)
 *     @config        string          the configuration's label (results_config_label)
 *     @policy        string          the policy's registry name
 *     @params        string          its canonical parameters, defaults filled ("" for none)
 *     @budget        int64           N
 *     @chunk         int64           the prefill chunk B (0 when absent; a study keys runs by it)
 *     @trace         string          the prompt id of the run's trace ("" when absent)
 *     @allocator     string          the allocator's label (absent in older files: uniform)
 *     @budget_fraction f64           the budget as a fraction of T, only when given so
 *     retained       int32 [L, K, N']  each (layer, kv head)'s final cache positions,
 *                                      ascending, then RESULTS_PAD up to N', the
 *                                      most any (layer, kv head) kept (ragged by
 *                                      allocator: -1 padding to the largest)
 *     final_logdet   f64 [L, K]        the log-det of those keys (docs/sim.md#metrics)
 *     head_budget    int32 [L, K]      rows each kept at the end (the positions before the padding)
 *     head_budget_mean f64 [L, K]      rows kept after each evicting step, averaged (NaN: never evicted)
 *     step_candidates, step_kept  int32 [L, K, S]  with sim --step-counts only: at each of
 *                                      the S steps, the candidates and the rows kept after it
 *
 *   /index                compound [n_runs]: run (the group's name), config, policy, params, allocator,
 *                         budget, budget_fraction (NaN: given as N), chunk, trace; run order
 *   @command       string  the sim command as typed   } the provenance, kept apart from the
 *   @trace_path    string  the trace as given          } data (docs/provenance.md): written
 *   @trace_sha256  string  its sha256                  } from the record, with /provenance;
 *   @n_traces      int64   a study: its traces         } a study has no trace_path but n_traces
 *   @study_index, @study_index_sha256  a study given by its index.jsonl
 *   /provenance            the record's group (provenance/provenance.h)
 *
 * The writer records no object times, so the same run writes the same bytes.
 *
 * Every check a file reader owes its caller: /runs exists; each member is a
 * group with string policy and params and an integer budget >= 1, no two
 * runs with the same (config, allocator, budget, chunk, trace); retained is of
 * an integer type, rank 3, [L, K] as in the trace, N' in [1, T], each row's
 * positions strictly increasing within [0, T) and followed only by −1 padding
 * (sim pads a cache smaller than N'), at least one position per row and
 * no more than the budget unless all T (a policy that never evicts);
 * final_logdet of a float type, [L, K], each in [-1e6, 1] (a log-det of
 * unit keys plus 1e-6 I can take no other value; NaN and inf refused);
 * head_budget_mean (optional: all NaN when absent) of a float type, [L, K],
 * each NaN or in [1, T]; @budget_fraction (optional) in (0, 1]. The first violation is one KV_EINPUT
 * line "DIR/results.h5: /runs/NAME/retained: ...". Runs come in the file's
 * name order (what h5py shows; sim's order for the files sim writes). The
 * reader takes the configuration from policy and params, not from @config,
 * and does not depend on the group names (older files named runs
 * "POLICY[:PARAMS]:budget=N" and read the same way).
 */
#ifndef KV_RESULTS_H5_H
#define KV_RESULTS_H5_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "provenance/provenance.h"

/* What follows the kept positions in a row of retained. */
#define RESULTS_PAD (-1)

/* ---- writing ------------------------------------------------------------- */

/* One run to write: views of the caller's arrays (nothing is copied). */
typedef struct {
    const char *policy;          /* registry name */
    const char *params;          /* canonical parameters, defaults filled, "" for none */
    const char *definition;      /* a score expression's definition (--define), else NULL: attribute `definition` */
    const char *allocator;       /* its label ("uniform", "pyramid:beta=20:window=32") */
    double budget_fraction;      /* the budget's fraction of T when given so, else NaN or 0 (no attribute) */
    int64_t budget, chunk;
    const char *trace;           /* the prompt id of its trace (attribute `trace`), or NULL */
    int64_t L, K;                /* its trace's layers and kv heads; 0: results_write's */
    int64_t width;               /* N': the most rows any (layer, kv head) kept */
    int64_t stride;              /* row stride of retained (>= width; 0: width) */
    const int64_t *retained;     /* [L][K][stride] positions, ascending, then RESULTS_PAD */
    const double *final_logdet;  /* [L][K] */
    const int64_t *head_budget;  /* [L][K] rows kept at the end (NULL: counted from retained) */
    const double *head_mean;     /* [L][K] their mean over evicting steps (NaN: none; NULL: all NaN) */
    int64_t n_steps;             /* > 0 with the per-step record: */
    const int32_t *step_cand, *step_kept; /* [L][K][n_steps] */
} results_run_view;

/* The group name of run i (0-based) of n: "run" and i + 1 zero-padded to
 * the width of n, at least 4 digits ("run0001"). */
void results_run_name(int i, int n, char *buf, size_t cap);

/* Creates DIR/results.h5 (replacing one that exists) with runs[0..n) under
 * /runs, for a trace of L layers and K kv heads; with `prov` (may be NULL)
 * its root attributes command, trace_path, trace_sha256 and /provenance. */
int results_write(const char *dir, int64_t L, int64_t K, const results_run_view *runs, int n,
                  const prov_record *prov, kv_err *err);

/* ---- reading ------------------------------------------------------------- */

typedef struct {
    char name[512];          /* group name under /runs */
    char policy[128];
    char params[512];
    char config[648];        /* results_config_label(policy, params) */
    char allocator[300];     /* @allocator, "uniform" when absent */
    int64_t budget;
    double budget_fraction;  /* @budget_fraction, NaN when absent (a budget given as N) */
    int64_t width;           /* N' */
    int32_t *retained;       /* [L][K][N'], each row sorted, −1 padded at the end */
    int64_t *n_kept;         /* [L][K] positions before the padding */
    double *final_logdet;    /* [L][K] as sim wrote it */
    double *head_mean;       /* [L][K] head_budget_mean (NaN: never evicted, or absent in older files) */
    char trace[129];         /* @trace, the prompt id of its trace ("" when absent) */
    int64_t chunk;           /* @chunk (0 when absent) */
} results_run;

typedef struct {
    char path[4200];         /* DIR/results.h5 */
    int n_runs;
    results_run *runs;       /* [n_runs] */
} results_set;

/* Reads DIR/results.h5 against a trace of L layers, K kv heads, T tokens.
 * On failure nothing is left allocated. */
int results_read(const char *dir, int64_t L, int64_t K, int64_t T, results_set *out, kv_err *err);

void results_free(results_set *rs);

/* Which runs results_read_select reads: those of one trace and one chunk
 * (trace NULL: any; chunk 0: any). With attrs_only only the attributes are
 * read (retained, n_kept, final_logdet, head_mean stay NULL; L, K, T are not
 * used): what a study's analysis needs to list a file's (trace, chunk) pairs. */
typedef struct {
    const char *trace;
    int64_t chunk;
    bool attrs_only;
} results_select;

/* results_read of the runs `sel` selects (NULL: every run). Two runs of the
 * same (config, allocator, budget, chunk, trace) are refused. */
int results_read_select(const char *dir, int64_t L, int64_t K, int64_t T, const results_select *sel,
                        results_set *out, kv_err *err);

/* The root attribute trace_sha256 of DIR/results.h5 (the trace sim replayed)
 * into hex[65]; "" when the file has none or cannot be read (results_read
 * says what is wrong with such a file). */
void results_trace_sha256(const char *dir, char *hex);

#endif
