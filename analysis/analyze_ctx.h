/* analyze_ctx: what the analyze driver (analyze.c), its output writers
 * (analyze_out.c) and the detail matrices (detail.c) share. Internal to
 * analysis/. */
#ifndef KV_ANALYZE_CTX_H
#define KV_ANALYZE_CTX_H

#include <stdio.h>

#include "analysis/analyze.h"
#include "analysis/head_importance.h"
#include "analysis/pca.h"
#include "trace/trace.h"
#include "results/results_h5.h"
#include "results/results_row.h"

typedef struct {
    const analyze_opts *o;
    trace *tr;
    int64_t L, H, K, D, T;
    bool has_colsum, has_queries;
    bool has_row_stats;        /* /queries with /attention/lse and /attention/max: head importance's O(T·(S+W)) pass */
    results_set rs;            /* n_runs = 0 without --results */
    double *rho_pair;          /* [L][H] (NaN when constant, or no colsum) */
    double *rho_anchor;        /* [L][H] */
    double *logdet_full;       /* [L][K] */
    double *logdet_runs;       /* [n_runs][L][K], recomputed from the trace keys */
    pca_summary *pca;          /* [L][K] */
    head_importance *importance; /* [L][K] (with /queries) */
    int64_t detail_layer, detail_head;
    const char *outdir;        /* the temporary directory being written */
    bool no_warnings;          /* a study's later chunks of a trace: its warnings were said once */
} analyze_ctx;

/* analyze.c: one trace's analysis into the existing directory `dir` (no
 * provenance.json, no copies of sim's CSVs); *c is left filled for the
 * caller, who frees it with analyze_ctx_free. */
int analyze_into(analyze_ctx *c, const char *dir, kv_err *err);
void analyze_ctx_free(analyze_ctx *c);

/* analyze_out.c: one CSV per function, into ctx->outdir (created from its table with
 * results_schema_create, each row through results_row, closed with csv_close). */
int aout_meta(const analyze_ctx *c, kv_err *err);
int aout_spearman(const analyze_ctx *c, kv_err *err);
int aout_logdet(const analyze_ctx *c, kv_err *err);
int aout_pca_var(const analyze_ctx *c, kv_err *err);
int aout_pca_kept(const analyze_ctx *c, kv_err *err);
int aout_budgets(const analyze_ctx *c, kv_err *err);
int aout_head_importance(const analyze_ctx *c, kv_err *err);
/* The cells that name a run in every analysis CSV, as in sim's files: config, policy, params, budget,
 * allocator, budget_fraction (study_logdet.csv's rows too). */
void aout_run_cells(results_row *w, const results_run *run);
/* pca.csv: the header, then one layer's rows at a time; pc [K][T][2]. */
FILE *aout_pca_begin(const analyze_ctx *c, kv_err *err);
void aout_pca_layer(const analyze_ctx *c, FILE *f, int64_t l, const double *pc);

/* detail.c: the default detail head (median ρ) and detail.csv. */
void detail_choose(const analyze_ctx *c, int64_t *layer, int64_t *head);
int detail_write(const analyze_ctx *c, kv_err *err);

#endif
