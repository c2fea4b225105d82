/* analyze_out: the CSV files of the analysis directory (docs/outputs.md;
 * their columns are results/results_schema.c's tables, which plot checks),
 * every row written through results_row against them, numbers as %.9g, NaN
 * as "nan". Every row that names a configuration leads with its `config`
 * label (results_config_label), then policy and params; heads are `q_head`
 * (query head) and `kv_head`. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analysis/analyze_ctx.h"
#include "core/csv.h"
#include "core/version.h"
#include "results/results_dir.h"
#include "results/results_row.h"
#include "results/results_schema.h"

/* key,value; a value with a comma or a quote is written quoted (RFC 4180),
 * line breaks become spaces. */
static void meta_row(FILE *f, const char *key, const char *value)
{
    results_row w = results_row_begin(f, &RESULTS_SCHEMA_META);
    results_row_text(&w, key), results_row_quoted(&w, value);
    results_row_end(&w);
}

static void meta_int(FILE *f, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    meta_row(f, key, buf);
}

int aout_meta(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_META, err);
    if (!f) return err->code;
    const trace_meta *m = trace_get_meta(c->tr);
    meta_row(f, "trace", c->o->trace);
    meta_row(f, "model", m->model_name);
    meta_row(f, "creator", m->creator);
    meta_int(f, "L", c->L), meta_int(f, "H", c->H), meta_int(f, "K", c->K);
    meta_int(f, "D", c->D), meta_int(f, "T", c->T);
    meta_int(f, "prompt_tokens", m->prompt_len);
    meta_row(f, "capture_mode", m->capture_mode);
    meta_int(f, "capture_chunk", m->capture_chunk);
    meta_row(f, "storage_dtype", trace_dtype_name(m->storage));
    meta_int(f, "detail_layer", c->detail_layer);
    meta_int(f, "detail_q_head", c->detail_head);
    meta_int(f, "detail_kv_head", c->detail_head / (c->H / c->K));
    meta_row(f, "kvtrace_version", KVTRACE_VERSION);
    if (c->o->results) meta_row(f, "results_dir", c->o->results);
    int rc = csv_close(f, "meta.csv", err);
    /* the commands and inputs that made the directory: provenance.json, apart from the data */
    return !rc && c->o->prov ? prov_write_json(c->o->prov, c->outdir, err) : rc;
}

int aout_spearman(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_SPEARMAN, err);
    if (!f) return err->code;
    const int64_t G = c->H / c->K;
    for (int64_t i = 0; c->has_colsum && i < c->L * c->H; i++) {
        results_row w = results_row_begin(f, &RESULTS_SCHEMA_SPEARMAN);
        results_row_int(&w, i / c->H), results_row_int(&w, i % c->H), results_row_int(&w, i % c->H / G);
        results_row_real(&w, c->rho_pair[i]), results_row_real(&w, c->rho_anchor[i]);
        results_row_end(&w);
    }
    return csv_close(f, "spearman.csv", err);
}

void aout_run_cells(results_row *w, const results_run *run)
{
    results_row_text(w, run->config), results_row_text(w, run->policy), results_row_text(w, run->params);
    results_row_int(w, run->budget), results_row_text(w, run->allocator);
    results_row_fraction(w, run->budget_fraction);
}

/* A row of s for run r, its first columns written: the run's (aout_run_cells), then (layer, kv_head) of cache i. */
static results_row run_row(FILE *f, const results_schema *s, const results_run *run, int64_t i, int64_t K)
{
    results_row w = results_row_begin(f, s);
    aout_run_cells(&w, run);
    results_row_int(&w, i / K), results_row_int(&w, i % K);
    return w;
}

int aout_logdet(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_LOGDET, err);
    if (!f) return err->code;
    const int64_t LK = c->L * c->K;
    /* the whole trace's keys: config and policy "full_cache", budget T */
    const results_run whole = {.config = "full_cache", .policy = "full_cache", .params = "", .budget = c->T,
                               .allocator = RESULTS_ALLOC_NONE, .budget_fraction = NAN};
    for (int64_t i = 0; i < LK; i++) {
        results_row w = run_row(f, &RESULTS_SCHEMA_LOGDET, &whole, i, c->K);
        results_row_real(&w, c->logdet_full[i]);
        results_row_end(&w);
    }
    for (int r = 0; r < c->rs.n_runs; r++)
        for (int64_t i = 0; i < LK; i++) {
            results_row w = run_row(f, &RESULTS_SCHEMA_LOGDET, &c->rs.runs[r], i, c->K);
            results_row_real(&w, c->logdet_runs[(size_t)r * (size_t)LK + (size_t)i]);
            results_row_end(&w);
        }
    return csv_close(f, "logdet.csv", err);
}

int aout_pca_var(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_PCA_VAR, err);
    if (!f) return err->code;
    for (int64_t i = 0; i < c->L * c->K; i++) {
        results_row w = results_row_begin(f, &RESULTS_SCHEMA_PCA_VAR);
        results_row_int(&w, i / c->K), results_row_int(&w, i % c->K);
        results_row_real(&w, c->pca[i].var[0]), results_row_real(&w, c->pca[i].var[1]);
        results_row_real(&w, c->pca[i].var_total);
        results_row_end(&w);
    }
    return csv_close(f, "pca_var.csv", err);
}

/* pca_kept.csv: one row per kept position of each run's final cache, run
 * by run (results.h5's order), then layer, kv head and position ascending. */
int aout_pca_kept(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_PCA_KEPT, err);
    if (!f) return err->code;
    for (int r = 0; r < c->rs.n_runs; r++) {
        const results_run *run = &c->rs.runs[r];
        for (int64_t i = 0; i < c->L * c->K; i++)
            for (int64_t k = 0; k < run->n_kept[i]; k++) {
                results_row w = run_row(f, &RESULTS_SCHEMA_PCA_KEPT, run, i, c->K);
                results_row_int(&w, run->retained[i * run->width + k]);
                results_row_end(&w);
            }
    }
    return csv_close(f, "pca_kept.csv", err);
}

/* budgets.csv: per run (results.h5's order) and (layer, kv_head) the rows
 * kept at the end and their mean over evicting steps. */
int aout_budgets(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_BUDGETS, err);
    if (!f) return err->code;
    for (int r = 0; r < c->rs.n_runs; r++) {
        const results_run *run = &c->rs.runs[r];
        for (int64_t i = 0; i < c->L * c->K; i++) {
            results_row w = run_row(f, &RESULTS_SCHEMA_BUDGETS, run, i, c->K);
            results_row_int(&w, run->n_kept[i]), results_row_real(&w, run->head_mean[i]);
            results_row_end(&w);
        }
    }
    return csv_close(f, "budgets.csv", err);
}

/* head_importance.csv: per (layer, kv_head) the share of attention outside
 * the sinks and the recent window, and the concentration (head_importance.h);
 * only the header without /queries. */
int aout_head_importance(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_HEAD_IMPORTANCE, err);
    if (!f) return err->code;
    for (int64_t i = 0; c->has_queries && i < c->L * c->K; i++) {
        results_row w = results_row_begin(f, &RESULTS_SCHEMA_HEAD_IMPORTANCE);
        results_row_int(&w, i / c->K), results_row_int(&w, i % c->K);
        results_row_real(&w, c->importance[i].score), results_row_real(&w, c->importance[i].concentration);
        results_row_end(&w);
    }
    return csv_close(f, "head_importance.csv", err);
}

FILE *aout_pca_begin(const analyze_ctx *c, kv_err *err)
{
    return results_schema_create(c->outdir, &RESULTS_SCHEMA_PCA, err);
}

void aout_pca_layer(const analyze_ctx *c, FILE *f, int64_t l, const double *pc)
{
    for (int64_t g = 0; g < c->K; g++)
        for (int64_t j = 0; j < c->T; j++) {
            results_row w = results_row_begin(f, &RESULTS_SCHEMA_PCA);
            results_row_int(&w, l), results_row_int(&w, g), results_row_int(&w, j);
            results_row_real(&w, pc[(g * c->T + j) * 2]), results_row_real(&w, pc[(g * c->T + j) * 2 + 1]);
            results_row_end(&w);
        }
}
