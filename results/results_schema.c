/* results_schema: the column tables of every CSV sim and analyze write, and
 * the one checker their readers run (results_schema.h). */
#include "results/results_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "results/results_dir.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define RUN_COLS {"config", SC_CONFIG, false, true}, {"policy", SC_POLICY, false, false}, \
                 {"params", SC_PARAMS, false, false}, {"budget", SC_BUDGET, false, true}

#define RUN_COLS_OPEN_BUDGET {"config", SC_CONFIG, false, true}, {"policy", SC_POLICY, false, false}, \
                 {"params", SC_PARAMS, false, false}, {"budget", SC_BUDGET, true, true}

/* the last column of sim's CSVs: config@allocator/chunk (results_run_label), the whole configuration but the budget */
#define RUN_LABEL {"run", SC_TEXT, false, false}
/* the run label of the first configuration at the same budget that kept the same positions at every step, or "" */
#define SAME_AS {"same_as", SC_TEXT, false, false}

/* sim's CSVs: the run's allocator (part of its key) and the budget's fraction of T */
#define SIM_RUN_COLS RUN_COLS, {"allocator", SC_ALLOC, false, true}, {"budget_fraction", SC_FRACTION, false, false}

/* chunk is part of a row's key (sim --chunks sweeps it), and so is a study's trace */
static const results_col COLS_RESULTS[] = {
    SIM_RUN_COLS, {"chunk", SC_BUDGET, false, true}, {"decode_chunk", SC_BUDGET, false, false},
    {"eval_stride", SC_BUDGET, false, false}, {"layer", SC_LAYER, false, true}, {"q_head", SC_QHEAD, false, true},
    {"kv_head", SC_KVHEAD, false, false}, {"phase", SC_PHASE, false, true}, {"n_queries", SC_COUNT, false, false},
    {"out_rel_err_mean", SC_NONNEG, true, false}, {"out_rel_err_p95", SC_NONNEG, true, false},
    {"attn_recall_mean", SC_UNIT, true, false}, {"attn_recall_min", SC_UNIT, true, false},
    {"head_budget", SC_COUNT, false, false}, {"head_budget_mean", SC_NONNEG, true, false},
    {"trace", SC_TEXT, false, true}, SAME_AS, RUN_LABEL,
};
#define SUMMARY_COLS SIM_RUN_COLS, {"chunk", SC_BUDGET, false, true}, {"decode_chunk", SC_BUDGET, false, false}, \
    {"eval_stride", SC_BUDGET, false, false}, {"phase", SC_PHASE, false, true}, {"n_queries", SC_COUNT, false, false}, \
    {"out_rel_err_mean", SC_NONNEG, true, false}, {"out_rel_err_p95", SC_NONNEG, true, false}, \
    {"attn_recall_mean", SC_UNIT, true, false}, {"attn_recall_min", SC_UNIT, true, false}, \
    {"final_logdet_mean", SC_REAL, true, false}
/* over traces: the means, n_traces, each mean's 95% bootstrap interval (docs/study.md) */
static const results_col COLS_SUMMARY[] = {
    SUMMARY_COLS, {"n_traces", SC_COUNT, false, false},
    {"out_rel_err_mean_ci_lo", SC_NONNEG, true, false}, {"out_rel_err_mean_ci_hi", SC_NONNEG, true, false},
    {"out_rel_err_p95_ci_lo", SC_NONNEG, true, false}, {"out_rel_err_p95_ci_hi", SC_NONNEG, true, false},
    {"attn_recall_mean_ci_lo", SC_UNIT, true, false}, {"attn_recall_mean_ci_hi", SC_UNIT, true, false},
    {"attn_recall_min_ci_lo", SC_UNIT, true, false}, {"attn_recall_min_ci_hi", SC_UNIT, true, false},
    {"final_logdet_mean_ci_lo", SC_REAL, true, false}, {"final_logdet_mean_ci_hi", SC_REAL, true, false}, SAME_AS,
    RUN_LABEL,
};
static const results_col COLS_SUMMARY_BY_TRACE[] = {SUMMARY_COLS, {"trace", SC_TEXT, false, true}, SAME_AS,
                                                    RUN_LABEL};
static const results_col COLS_TIMING[] = {
    SIM_RUN_COLS, {"chunk", SC_BUDGET, false, true}, {"calls", SC_COUNT, false, false},
    {"candidates", SC_COUNT, false, false}, {"score_ns_per_candidate", SC_NONNEG, false, false},
    {"trace", SC_TEXT, false, true}, RUN_LABEL,
};
/* spans.csv and spans_summary.csv (sim/spans.c): no policy/params columns; the run's columns are found by kind */
static const results_col COLS_SPANS[] = {
    {"trace", SC_TEXT, false, true}, {"span", SC_TEXT, false, true}, {"config", SC_CONFIG, false, true},
    {"budget", SC_BUDGET, false, true}, {"chunk", SC_BUDGET, false, true}, {"layer", SC_LAYER, false, true},
    {"kv_head", SC_KVHEAD, false, true}, {"retention_mean", SC_UNIT, true, false},
    {"retention_final", SC_UNIT, false, false}, {"attn_recall", SC_UNIT, true, false},
    {"allocator", SC_ALLOC, false, true}, RUN_LABEL,
};
#define SPAN_STAT(n) {n, SC_UNIT, true, false}, {n "_ci_lo", SC_UNIT, true, false}, {n "_ci_hi", SC_UNIT, true, false}
static const results_col COLS_SPANS_SUMMARY[] = {
    {"span", SC_TEXT, false, true}, {"config", SC_CONFIG, false, true}, {"budget", SC_BUDGET, false, true},
    {"chunk", SC_BUDGET, false, true}, {"allocator", SC_ALLOC, false, true}, {"n_traces", SC_COUNT, false, false},
    SPAN_STAT("retention_mean"), SPAN_STAT("retention_final"), SPAN_STAT("attn_recall"), RUN_LABEL,
};
static const results_col COLS_META[] = {{"key", SC_TEXT, false, false}, {"value", SC_TEXT, false, false}};
static const results_col COLS_SPEARMAN[] = {
    {"layer", SC_LAYER, false, true}, {"q_head", SC_QHEAD, false, true}, {"kv_head", SC_KVHEAD, false, false},
    {"rho_pairwise", SC_CORR, true, false}, {"rho_anchor", SC_CORR, true, false},
};
static const results_col COLS_LOGDET[] = {
    SIM_RUN_COLS, {"layer", SC_LAYER, false, true}, {"kv_head", SC_KVHEAD, false, true}, {"logdet", SC_REAL, false, false},
};
static const results_col COLS_PCA[] = {
    {"layer", SC_LAYER, false, true}, {"kv_head", SC_KVHEAD, false, true}, {"position", SC_POS, false, true},
    {"pc1", SC_REAL, false, false}, {"pc2", SC_REAL, false, false},
};
static const results_col COLS_PCA_KEPT[] = {
    SIM_RUN_COLS, {"layer", SC_LAYER, false, true}, {"kv_head", SC_KVHEAD, false, true}, {"position", SC_POS, false, true},
};
static const results_col COLS_PCA_VAR[] = {
    {"layer", SC_LAYER, false, true}, {"kv_head", SC_KVHEAD, false, true}, {"var_pc1", SC_NONNEG, false, false},
    {"var_pc2", SC_NONNEG, false, false}, {"var_total", SC_NONNEG, false, false},
};
static const results_col COLS_BUDGETS[] = {
    SIM_RUN_COLS, {"layer", SC_LAYER, false, true}, {"kv_head", SC_KVHEAD, false, true},
    {"head_budget", SC_COUNT, false, false}, {"head_budget_mean", SC_NONNEG, true, false},
};
static const results_col COLS_HEAD_IMPORTANCE[] = {
    {"layer", SC_LAYER, false, true}, {"kv_head", SC_KVHEAD, false, true}, {"score", SC_UNIT, false, false},
    {"concentration", SC_UNIT, false, false},
};
/* a study's analysis (analyze over several traces or chunks): means over traces and their intervals */
static const results_col COLS_STUDY_SPEARMAN[] = {
    {"layer", SC_LAYER, false, true}, {"q_head", SC_QHEAD, false, true}, {"kv_head", SC_KVHEAD, false, false},
    {"rho_pairwise", SC_CORR, true, false}, {"rho_anchor", SC_CORR, true, false}, {"n_traces", SC_COUNT, false, false},
    {"rho_pairwise_ci_lo", SC_CORR, true, false}, {"rho_pairwise_ci_hi", SC_CORR, true, false},
    {"rho_anchor_ci_lo", SC_CORR, true, false}, {"rho_anchor_ci_hi", SC_CORR, true, false},
};
/* the full_cache rows have no budget and no chunk (T differs between traces) */
static const results_col COLS_STUDY_LOGDET[] = {
    RUN_COLS_OPEN_BUDGET, {"allocator", SC_ALLOC, false, true}, {"budget_fraction", SC_FRACTION, false, false},
    {"chunk", SC_BUDGET, true, true}, {"layer", SC_LAYER, false, true}, {"kv_head", SC_KVHEAD, false, true},
    {"logdet", SC_REAL, true, false}, {"n_traces", SC_COUNT, false, false}, {"logdet_ci_lo", SC_REAL, true, false},
    {"logdet_ci_hi", SC_REAL, true, false},
};
/* analyze --baseline: each configuration minus the baseline, paired over traces */
static const results_col COLS_PAIRED[] = {
    {"run", SC_TEXT, false, true}, {"config", SC_TEXT, false, false}, {"allocator", SC_TEXT, false, false},
    {"chunk", SC_BUDGET, false, false}, {"budget", SC_BUDGET, false, true}, {"baseline", SC_TEXT, false, false},
    {"metric", SC_TEXT, false, true}, {"n_traces", SC_COUNT, false, false}, {"mean", SC_REAL, true, false},
    {"baseline_mean", SC_REAL, true, false}, {"diff_mean", SC_REAL, true, false},
    {"diff_ci_lo", SC_REAL, true, false}, {"diff_ci_hi", SC_REAL, true, false},
};
/* analyze --fidelity: sim's per-trace measures beside fidelity --prompts' in-model ones, joined on the run */
static const results_col COLS_FIDELITY_JOIN[] = {
    {"trace", SC_TEXT, false, true}, {"run", SC_TEXT, false, true}, {"config", SC_TEXT, false, false},
    {"allocator", SC_TEXT, false, false}, {"budget", SC_BUDGET, false, true}, {"chunk", SC_BUDGET, false, false},
    {"out_rel_err_mean", SC_NONNEG, true, false}, {"attn_recall_mean", SC_UNIT, true, false},
    {"kl_mean", SC_NONNEG, true, false}, {"greedy_agree", SC_UNIT, true, false}, {"ppl_full", SC_NONNEG, false, false},
    {"ppl_evict", SC_NONNEG, false, false}, {"answer_logprob_full", SC_REAL, true, false},
    {"answer_logprob_evict", SC_REAL, true, false}, {"answer_logprob_delta", SC_REAL, true, false},
    {"answer_rank_full", SC_NONNEG, true, false}, {"answer_rank_evict", SC_NONNEG, true, false},
    {"exact_match_full", SC_UNIT, true, false}, {"exact_match_evict", SC_UNIT, true, false},
};
static const results_col COLS_DETAIL[] = {
    {"row", SC_DETAIL, false, true}, {"col", SC_DETAIL, false, true}, {"cos", SC_CORR, false, false},
    {"attn", SC_UNIT, true, false},
};

const results_schema RESULTS_SCHEMA_RESULTS = {RESULTS_FILE_CSV, COLS_RESULTS, N(COLS_RESULTS), SR_GRID, "sim"};
const results_schema RESULTS_SCHEMA_SUMMARY = {RESULTS_FILE_SUMMARY, COLS_SUMMARY, N(COLS_SUMMARY), SR_GRID, "sim"};
const results_schema RESULTS_SCHEMA_SUMMARY_BY_TRACE = {RESULTS_FILE_SUMMARY_BY_TRACE, COLS_SUMMARY_BY_TRACE,
                                                       N(COLS_SUMMARY_BY_TRACE), SR_GRID, "sim"};
const results_schema RESULTS_SCHEMA_TIMING = {RESULTS_FILE_TIMING, COLS_TIMING, N(COLS_TIMING), SR_GRID, "sim"};
const results_schema RESULTS_SCHEMA_SPANS = {RESULTS_FILE_SPANS, COLS_SPANS, N(COLS_SPANS), SR_GRID, "sim"};
const results_schema RESULTS_SCHEMA_SPANS_SUMMARY = {RESULTS_FILE_SPANS_SUMMARY, COLS_SPANS_SUMMARY,
                                                    N(COLS_SPANS_SUMMARY), SR_GRID, "sim"};
const results_schema RESULTS_SCHEMA_META = {"meta.csv", COLS_META, N(COLS_META), SR_FREE, "analyze"};
const results_schema RESULTS_SCHEMA_SPEARMAN = {"spearman.csv", COLS_SPEARMAN, N(COLS_SPEARMAN), SR_GRID_OR_0, "analyze"};
const results_schema RESULTS_SCHEMA_LOGDET = {"logdet.csv", COLS_LOGDET, N(COLS_LOGDET), SR_GRID, "analyze"};
const results_schema RESULTS_SCHEMA_PCA = {"pca.csv", COLS_PCA, N(COLS_PCA), SR_GRID, "analyze"};
const results_schema RESULTS_SCHEMA_PCA_KEPT = {"pca_kept.csv", COLS_PCA_KEPT, N(COLS_PCA_KEPT), SR_SUBSET, "analyze"};
const results_schema RESULTS_SCHEMA_PCA_VAR = {"pca_var.csv", COLS_PCA_VAR, N(COLS_PCA_VAR), SR_GRID, "analyze"};
const results_schema RESULTS_SCHEMA_BUDGETS = {"budgets.csv", COLS_BUDGETS, N(COLS_BUDGETS), SR_GRID, "analyze"};
const results_schema RESULTS_SCHEMA_HEAD_IMPORTANCE = {"head_importance.csv", COLS_HEAD_IMPORTANCE,
                                                       N(COLS_HEAD_IMPORTANCE), SR_GRID_OR_0, "analyze"};
const results_schema RESULTS_SCHEMA_DETAIL = {"detail.csv", COLS_DETAIL, N(COLS_DETAIL), SR_GRID_OR_0, "analyze"};

const results_schema RESULTS_SCHEMA_STUDY_SPEARMAN = {"study_spearman.csv", COLS_STUDY_SPEARMAN,
                                                      N(COLS_STUDY_SPEARMAN), SR_FREE, "analyze"};
const results_schema RESULTS_SCHEMA_STUDY_LOGDET = {"study_logdet.csv", COLS_STUDY_LOGDET, N(COLS_STUDY_LOGDET),
                                                    SR_FREE, "analyze"};

const results_schema RESULTS_SCHEMA_PAIRED = {"paired.csv", COLS_PAIRED, N(COLS_PAIRED), SR_FREE, "analyze"};
const results_schema RESULTS_SCHEMA_FIDELITY_JOIN = {"fidelity_join.csv", COLS_FIDELITY_JOIN, N(COLS_FIDELITY_JOIN),
                                                     SR_FREE, "analyze"};

const results_schema *const RESULTS_SCHEMAS[] = {
    &RESULTS_SCHEMA_RESULTS, &RESULTS_SCHEMA_SUMMARY_BY_TRACE, &RESULTS_SCHEMA_SUMMARY, &RESULTS_SCHEMA_SPANS,
    &RESULTS_SCHEMA_SPANS_SUMMARY, &RESULTS_SCHEMA_TIMING, &RESULTS_SCHEMA_META, &RESULTS_SCHEMA_SPEARMAN,
    &RESULTS_SCHEMA_LOGDET, &RESULTS_SCHEMA_PCA, &RESULTS_SCHEMA_PCA_KEPT, &RESULTS_SCHEMA_PCA_VAR,
    &RESULTS_SCHEMA_BUDGETS, &RESULTS_SCHEMA_HEAD_IMPORTANCE, &RESULTS_SCHEMA_DETAIL, &RESULTS_SCHEMA_STUDY_SPEARMAN,
    &RESULTS_SCHEMA_STUDY_LOGDET, &RESULTS_SCHEMA_PAIRED, &RESULTS_SCHEMA_FIDELITY_JOIN,
};
const int RESULTS_N_SCHEMAS = N(RESULTS_SCHEMAS);

static const char *const PHASES[] = {"prefill", "decode", "all"};

/* "a,b,c": the header row (without the newline) into buf. */
static void results_schema_header(const results_schema *s, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->n_cols && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? "," : "", s->cols[i].name);
}

FILE *results_schema_create(const char *dir, const results_schema *s, kv_err *err)
{
    char header[1024];
    results_schema_header(s, header, sizeof header);
    return csv_create(dir, s->file, header, err);
}

void results_runs_free(results_runs *r)
{
    for (int i = 0; i < r->n; i++) free((char *)r->config[i]), free((char *)r->alloc[i]);
    free(r->config), free(r->alloc), free(r->budget);
    memset(r, 0, sizeof *r);
}

static bool run_is(const results_runs *r, int i, const char *config, const char *alloc, int64_t budget)
{
    return r->budget[i] == budget && strcmp(r->config[i], config) == 0 && strcmp(r->alloc[i], alloc) == 0;
}

static int runs_find(const results_runs *r, const char *config, const char *alloc, int64_t budget, int hint)
{
    if (hint >= 0 && hint < r->n && run_is(r, hint, config, alloc, budget)) return hint;
    for (int i = 0; i < r->n; i++)
        if (run_is(r, i, config, alloc, budget)) return i;
    return -1;
}

int results_runs_add(results_runs *r, const char *config, const char *alloc, int64_t budget, kv_err *err)
{
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        const char **c = realloc(r->config, (size_t)cap * sizeof *c);
        if (c) r->config = c;
        const char **a = realloc(r->alloc, (size_t)cap * sizeof *a);
        if (a) r->alloc = a;
        int64_t *b = realloc(r->budget, (size_t)cap * sizeof *b);
        if (b) r->budget = b;
        if (!c || !a || !b) return kv_fail(err, KV_EFAIL, "out of memory for %d runs", cap);
        r->cap = cap;
    }
    r->config[r->n] = strdup(config), r->alloc[r->n] = strdup(alloc);
    if (!r->config[r->n] || !r->alloc[r->n]) {
        free((char *)r->config[r->n]), free((char *)r->alloc[r->n]);
        return kv_fail(err, KV_EFAIL, "out of memory for a run");
    }
    r->budget[r->n] = budget;
    return r->n++;
}

/* The grid size of a kind used as a key column (1 for run columns). */
static int64_t extent(results_col_kind k, const results_dims *d)
{
    switch (k) {
    case SC_LAYER: return d->L;
    case SC_QHEAD: return d->H;
    case SC_KVHEAD: return d->K;
    case SC_POS: return d->T;
    case SC_DETAIL: return d->T < 64 ? d->T : 64;
    case SC_PHASE: return 3;
    default: return 1;
    }
}

/* Whether config is policy, or policy ":" params when params is not empty. */
static bool config_is(const char *config, const char *policy, const char *params)
{
    size_t n = strlen(policy);
    if (strncmp(config, policy, n) != 0) return false;
    return params[0] ? config[n] == ':' && strcmp(config + n + 1, params) == 0 : config[n] == '\0';
}

static int real_cell(const csv_table *c, size_t r, int j, const results_col *col, const results_dims *d, kv_err *err)
{
    double x;
    int rc = csv_double(c, r, j, col->nan_ok, &x, err);
    if (rc || isnan(x)) return rc;
    const double slack = 1e-6;
    if ((col->kind == SC_NONNEG && x < 0) || (col->kind == SC_UNIT && (x < -slack || x > 1 + slack)) ||
        (col->kind == SC_CORR && (x < -1 - slack || x > 1 + slack)))
        return csv_fail(c, r, err, "%s = %.9g is outside %s", col->name, x,
                        col->kind == SC_NONNEG ? "[0, inf)" : col->kind == SC_UNIT ? "[0, 1]" : "[-1, 1]");
    /* only unbounded kinds: a fraction or a correlation cannot overflow a range, and a tiny one (the
     * attention a head puts outside its window when it underflows, head_importance.csv's score, or detail.csv's
     * attn) is a true value, drawn on linear axes or figure 1's colour scale clipped at 1e-4 */
    const bool unbounded = col->kind == SC_REAL || col->kind == SC_NONNEG;
    if (d->max_abs > 0 && unbounded && x != 0 && (fabs(x) > d->max_abs || fabs(x) < 1 / d->max_abs))
        return csv_fail(c, r, err, "%s = %.9g is too extreme to draw (|x| must be 0 or in [%g, %g])", col->name, x,
                        1 / d->max_abs, d->max_abs);
    return KV_OK;
}

/* One cell against its column's kind. */
static int check_cell(const csv_table *c, size_t r, int j, const results_schema *s, const results_dims *d,
                      kv_err *err)
{
    const results_col *col = &s->cols[j];
    const char *v = csv_cell(c, r, j);
    int64_t x;
    switch (col->kind) {
    case SC_TEXT: case SC_PARAMS: return KV_OK;
    case SC_CONFIG:
        if (j + 2 < s->n_cols && s->cols[j + 1].kind == SC_POLICY && !config_is(v, csv_cell(c, r, j + 1), csv_cell(c, r, j + 2)))
            return csv_fail(c, r, err, "config '%.200s' is not policy '%.60s' with params '%.200s'", v,
                            csv_cell(c, r, j + 1), csv_cell(c, r, j + 2));
        return KV_OK;
    case SC_POLICY:
        return !v[0] || strchr(v, ':') ? csv_fail(c, r, err, "policy '%.60s' is empty or holds ':'", v) : KV_OK;
    case SC_BUDGET: return csv_int(c, r, j, 1, INT64_MAX, &x, err);
    case SC_ALLOC:
        return !v[0] ? csv_fail(c, r, err, "allocator is empty") : KV_OK;
    case SC_FRACTION: {
        double f;
        if (!v[0]) return KV_OK;
        int rc = csv_double(c, r, j, false, &f, err);
        return rc || (f > 0 && f <= 1) ? rc : csv_fail(c, r, err, "budget_fraction = %.9g is outside (0, 1]", f);
    }
    case SC_COUNT: return csv_int(c, r, j, 0, INT64_MAX, &x, err);
    case SC_PHASE:
        for (int p = 0; p < 3; p++)
            if (strcmp(v, PHASES[p]) == 0) return KV_OK;
        return csv_fail(c, r, err, "phase is '%.40s', expected prefill, decode or all", v);
    case SC_LAYER: case SC_QHEAD: case SC_KVHEAD: case SC_POS: case SC_DETAIL:
        return csv_int(c, r, j, 0, extent(col->kind, d) - 1, &x, err);
    default: return real_cell(c, r, j, col, d, err);
    }
}

/* The row's index in its run's grid of key columns; checks kv_head against q_head. */
static int grid_index(const csv_table *c, size_t r, const results_schema *s, const results_dims *d, int64_t *at,
                      kv_err *err)
{
    int64_t idx = 0, q = -1;
    for (int j = 0; j < s->n_cols; j++) {
        const char *v = csv_cell(c, r, j);
        int64_t x = 0;
        if (s->cols[j].kind == SC_PHASE) while (strcmp(v, PHASES[x]) != 0) x++;
        else if (s->cols[j].kind >= SC_LAYER && s->cols[j].kind <= SC_DETAIL) x = strtoll(v, NULL, 10);
        if (s->cols[j].kind == SC_QHEAD) q = x;
        if (s->cols[j].kind == SC_KVHEAD && q >= 0 && x != q / (d->H / d->K))
            return csv_fail(c, r, err, "kv_head %lld is not the kv head of q_head %lld (q_head / (H/K) = %lld)",
                            (long long)x, (long long)q, (long long)(q / (d->H / d->K)));
        if (s->cols[j].key && s->cols[j].kind >= SC_LAYER && s->cols[j].kind <= SC_PHASE)
            idx = idx * extent(s->cols[j].kind, d) + x;
    }
    *at = idx;
    return KV_OK;
}

static int64_t grid_size(const results_schema *s, const results_dims *d)
{
    int64_t n = 1;
    for (int j = 0; j < s->n_cols; j++)
        if (s->cols[j].key && s->cols[j].kind >= SC_LAYER && s->cols[j].kind <= SC_PHASE) n *= extent(s->cols[j].kind, d);
    return n;
}

/* The first column of kind k, -1: none. A run's columns are found by kind:
 * config (SC_CONFIG), budget (the first SC_BUDGET), allocator (SC_ALLOC). */
static int col_of(const results_schema *s, results_col_kind k)
{
    for (int j = 0; j < s->n_cols; j++)
        if (s->cols[j].kind == k) return j;
    return -1;
}

/* A key column beyond the run's and the grid's (chunk, a study's trace, a
 * span's name): its values are not known in advance, so each distinct
 * combination of them is one more copy of the grid (every run at every chunk
 * and trace, as sim writes). */
static bool extra_key(const results_schema *s, int j)
{
    const results_col_kind k = s->cols[j].kind;
    return s->cols[j].key && k != SC_CONFIG && k != SC_ALLOC && j != col_of(s, SC_BUDGET) &&
           !(k >= SC_LAYER && k <= SC_PHASE);
}

/* The index of row r's combination of extra key values among those seen (added when new); -1 out of memory. */
static int extra_find(const csv_table *c, size_t r, const results_schema *s, size_t *first, int *n, int hint)
{
    for (int k = 0; k <= *n; k++) {
        const int e = k == 0 ? hint : k - 1;
        if (e < 0 || e >= *n) continue;
        bool same = true;
        for (int j = 0; same && j < s->n_cols; j++)
            same = !extra_key(s, j) || strcmp(csv_cell(c, r, j), csv_cell(c, first[e], j)) == 0;
        if (same) return e;
    }
    first[*n] = r;
    return (*n)++;
}

/* Pass 1: every cell, the runs (run[r] of each row) and the extra keys' combinations (extra[r], *n_extra). */
static int check_cells(const csv_table *c, const results_schema *s, const results_dims *d, results_runs *runs,
                       int *run, int *extra, int *n_extra, kv_err *err)
{
    const int config_col = col_of(s, SC_CONFIG), budget_col = col_of(s, SC_BUDGET), alloc_col = col_of(s, SC_ALLOC);
    const bool has_run = config_col >= 0;
    size_t *first = c->n_rows ? kv_calloc(c->n_rows, sizeof *first, c->path, err) : NULL;
    int last = -1, hint = -1, rc = c->n_rows && !first ? KV_EFAIL : KV_OK;
    *n_extra = 1;
    if (first) *n_extra = 0;
    for (size_t r = 0; !rc && r < c->n_rows; r++) {
        for (int j = 0; !rc && j < s->n_cols; j++) rc = check_cell(c, r, j, s, d, err);
        if (rc) continue;
        extra[r] = hint = extra_find(c, r, s, first, n_extra, hint);
        if (!has_run) continue;
        int64_t b = strtoll(csv_cell(c, r, budget_col), NULL, 10);
        const char *alloc = alloc_col >= 0 ? csv_cell(c, r, alloc_col) : RESULTS_ALLOC_NONE;
        last = runs_find(runs, csv_cell(c, r, config_col), alloc, b, last);
        if (last < 0) last = results_runs_add(runs, csv_cell(c, r, config_col), alloc, b, err);
        if (last < 0) rc = KV_EFAIL;
        run[r] = last;
    }
    free(first);
    return rc;
}

/* Pass 2: unique keys, the row count, and (SR_SUBSET) equal counts per (run, layer, kv_head). */
static int check_grid(const csv_table *c, const results_schema *s, const results_dims *d, const results_runs *runs,
                      const int *run, const int *extra, int n_extra, kv_err *err)
{
    const bool has_run = col_of(s, SC_CONFIG) >= 0;
    const int64_t G = grid_size(s, d) * (n_extra > 0 ? n_extra : 1), R = has_run ? runs->n : 1;
    if (s->rows != SR_SUBSET && !(s->rows == SR_GRID_OR_0 && c->n_rows == 0) && (int64_t)c->n_rows != R * G)
        return kv_fail(err, KV_EINPUT, "%s: %zu rows, expected %lld (%lld run(s) x %lld; rows are missing or the "
                       "file was cut)", c->path, c->n_rows, (long long)(R * G), (long long)R, (long long)G);
    unsigned char *seen = kv_calloc((size_t)(R * G + 8) / 8, 1, c->path, err);
    int64_t *count = s->rows == SR_SUBSET ? kv_calloc((size_t)(R * d->L * d->K + 1), sizeof *count, c->path, err) : NULL;
    int rc = seen && (count || s->rows != SR_SUBSET) ? KV_OK : KV_EFAIL;
    for (size_t r = 0; !rc && r < c->n_rows; r++) {
        int64_t at = 0;
        if ((rc = grid_index(c, r, s, d, &at, err))) break;
        at = at * (n_extra > 0 ? n_extra : 1) + extra[r];
        at += (int64_t)(has_run ? run[r] : 0) * G;
        if (seen[at / 8] & (1u << (at % 8))) rc = csv_fail(c, r, err, "the same row key appears twice");
        seen[at / 8] |= (unsigned char)(1u << (at % 8));
        if (count) count[at / d->T]++;   /* pca_kept: the key is (layer, kv_head, position) */
    }
    /* a uniform run keeps as many rows in every (layer, kv_head); other allocators at least one */
    for (int64_t i = 0; !rc && count && i < R * d->L * d->K; i++)
        if ((count[i] != count[i - i % (d->L * d->K)] && strcmp(runs->alloc[i / (d->L * d->K)], RESULTS_ALLOC_NONE) == 0) ||
            count[i] == 0)
            rc = kv_fail(err, KV_EINPUT, "%s: run '%s' budget %lld keeps %lld positions at (layer %lld, kv_head %lld) "
                         "but %lld at (0, 0) (rows are missing or the file was cut)", c->path,
                         runs->config[i / (d->L * d->K)], (long long)runs->budget[i / (d->L * d->K)],
                         (long long)count[i], (long long)(i % (d->L * d->K) / d->K), (long long)(i % d->K),
                         (long long)count[i - i % (d->L * d->K)]);
    free(seen), free(count);
    return rc;
}

int results_schema_check(const csv_table *c, const results_schema *s, const results_dims *d, results_runs *runs,
                         kv_err *err)
{
    const char *names[32];
    for (int j = 0; j < s->n_cols; j++) names[j] = s->cols[j].name;
    int rc = csv_expect(c, names, s->n_cols, false, err);
    if (rc || s->rows == SR_FREE) return rc;
    results_runs own = {0};
    results_runs *rr = runs ? runs : &own;
    memset(rr, 0, sizeof *rr);
    int *run = c->n_rows ? kv_calloc(2 * c->n_rows, sizeof *run, c->path, err) : NULL, n_extra = 0;
    if (c->n_rows && !run) return KV_EFAIL;
    rc = check_cells(c, s, d, rr, run, run + c->n_rows, &n_extra, err);
    if (!rc) rc = check_grid(c, s, d, rr, run, run + c->n_rows, n_extra, err);
    free(run);
    if (rc || !runs) results_runs_free(rr);
    return rc;
}

int results_runs_match(const results_runs *got, const char *path, const results_runs *want, const char *want_path,
                       const char *extra, kv_err *err)
{
    int n_extra = 0;
    for (int i = 0; i < got->n; i++) {
        if (runs_find(want, got->config[i], got->alloc[i], got->budget[i], i) >= 0) continue;
        if (extra && strcmp(got->config[i], extra) == 0 && !n_extra++) continue;
        return kv_fail(err, KV_EINPUT, "%s: run '%s' allocator '%s' budget %lld is not in %s", path, got->config[i],
                       got->alloc[i], (long long)got->budget[i], want_path);
    }
    for (int i = 0; i < want->n; i++)
        if (runs_find(got, want->config[i], want->alloc[i], want->budget[i], i) < 0)
            return kv_fail(err, KV_EINPUT, "%s: run '%s' allocator '%s' budget %lld of %s is missing (rows are "
                           "missing or the file was cut)", path, want->config[i], want->alloc[i],
                           (long long)want->budget[i], want_path);
    return KV_OK;
}

/* DIR/FILE against s, present or not (*present); its runs must be h5_runs (when given). */
static int check_one(const char *dir, const results_schema *s, const results_dims *d, const results_runs *h5_runs,
                     bool *present, kv_err *err)
{
    csv_table c;
    results_runs runs = {0};
    char h5[4200];
    snprintf(h5, sizeof h5, "%s/" RESULTS_FILE_H5, dir);
    int rc = csv_read(&c, dir, s->file, present, err);
    if (!rc && *present) rc = results_schema_check(&c, s, d, &runs, err);
    if (!rc && *present && h5_runs) rc = results_runs_match(&runs, c.path, h5_runs, h5, NULL, err);
    results_runs_free(&runs);
    if (*present) csv_free(&c);
    return rc;
}

int results_check_spans(const char *dir, const results_dims *d, const results_runs *h5_runs, kv_err *err)
{
    bool rows = false, summary = false;
    int rc = check_one(dir, &RESULTS_SCHEMA_SPANS, d, h5_runs, &rows, err);
    if (!rc) rc = check_one(dir, &RESULTS_SCHEMA_SPANS_SUMMARY, d, h5_runs, &summary, err);
    if (!rc && rows != summary)
        rc = kv_fail(err, KV_EINPUT, "%s/%s: missing (sim writes %s and %s together)", dir,
                     rows ? RESULTS_FILE_SPANS_SUMMARY : RESULTS_FILE_SPANS, RESULTS_FILE_SPANS,
                     RESULTS_FILE_SPANS_SUMMARY);
    return rc;
}

int results_check_csvs(const char *dir, const results_dims *d, const results_runs *h5_runs, kv_err *err)
{
    static const results_schema *const FILES[] = {&RESULTS_SCHEMA_RESULTS, &RESULTS_SCHEMA_SUMMARY,
                                                  &RESULTS_SCHEMA_TIMING};
    int rc = KV_OK;
    for (int i = 0; !rc && i < N(FILES); i++) {
        bool present = false;
        rc = check_one(dir, FILES[i], d, h5_runs, &present, err);
        if (!rc && !present) rc = kv_fail(err, KV_EINPUT, "%s/%s: missing", dir, FILES[i]->file);
    }
    return rc ? rc : results_check_spans(dir, d, h5_runs, err);
}
