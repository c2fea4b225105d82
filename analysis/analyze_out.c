/* analyze_out: the CSV files of the analysis directory (docs/outputs.md;
 * their columns are results/results_schema.c's tables, which plot checks),
 * numbers as %.9g, NaN as "nan". Every row that names a configuration leads
 * with its `config` label (results_config_label), then policy and params;
 * heads are `q_head` (query head) and `kv_head`. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analysis/analyze_ctx.h"
#include "core/csv.h"
#include "core/version.h"
#include "results/results_schema.h"

/* key,value; a value with a comma or a quote is written quoted (RFC 4180),
 * line breaks become spaces. */
static void meta_row(FILE *f, const char *key, const char *value)
{
    fprintf(f, "%s,", key);
    csv_field(f, value, true);
    fputc('\n', f);
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
    for (int64_t i = 0; c->has_colsum && i < c->L * c->H; i++)
        fprintf(f, "%lld,%lld,%lld,%.9g,%.9g\n", (long long)(i / c->H), (long long)(i % c->H),
                (long long)(i % c->H / G), c->rho_pair[i], c->rho_anchor[i]);
    return csv_close(f, "spearman.csv", err);
}

/* "config,policy,params,budget,allocator,budget_fraction" of run r: the
 * columns that name a run in every analysis CSV, as in sim's files. */
static void run_key(FILE *f, const results_run *run)
{
    fprintf(f, "%s,%s,%s,%lld,%s,", run->config, run->policy, run->params, (long long)run->budget, run->allocator);
    if (!isnan(run->budget_fraction)) fprintf(f, "%.9g", run->budget_fraction);
}

int aout_logdet(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_LOGDET, err);
    if (!f) return err->code;
    const int64_t LK = c->L * c->K;
    for (int64_t i = 0; i < LK; i++) /* the whole trace's keys: config and policy "full_cache", budget T */
        fprintf(f, "full_cache,full_cache,,%lld,uniform,,%lld,%lld,%.9g\n", (long long)c->T, (long long)(i / c->K),
                (long long)(i % c->K), c->logdet_full[i]);
    for (int r = 0; r < c->rs.n_runs; r++) {
        const results_run *run = &c->rs.runs[r];
        for (int64_t i = 0; i < LK; i++) {
            run_key(f, run);
            fprintf(f, ",%lld,%lld,%.9g\n", (long long)(i / c->K), (long long)(i % c->K),
                    c->logdet_runs[(size_t)r * (size_t)LK + (size_t)i]);
        }
    }
    return csv_close(f, "logdet.csv", err);
}

int aout_pca_var(const analyze_ctx *c, kv_err *err)
{
    FILE *f = results_schema_create(c->outdir, &RESULTS_SCHEMA_PCA_VAR, err);
    if (!f) return err->code;
    for (int64_t i = 0; i < c->L * c->K; i++)
        fprintf(f, "%lld,%lld,%.9g,%.9g,%.9g\n", (long long)(i / c->K), (long long)(i % c->K), c->pca[i].var[0],
                c->pca[i].var[1], c->pca[i].var_total);
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
                run_key(f, run);
                fprintf(f, ",%lld,%lld,%d\n", (long long)(i / c->K), (long long)(i % c->K),
                        (int)run->retained[i * run->width + k]);
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
            run_key(f, run);
            fprintf(f, ",%lld,%lld,%lld,%.9g\n", (long long)(i / c->K), (long long)(i % c->K),
                    (long long)run->n_kept[i], run->head_mean[i]);
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
    for (int64_t i = 0; c->has_queries && i < c->L * c->K; i++)
        fprintf(f, "%lld,%lld,%.9g,%.9g\n", (long long)(i / c->K), (long long)(i % c->K), c->importance[i].score,
                c->importance[i].concentration);
    return csv_close(f, "head_importance.csv", err);
}

FILE *aout_pca_begin(const analyze_ctx *c, kv_err *err)
{
    return results_schema_create(c->outdir, &RESULTS_SCHEMA_PCA, err);
}

void aout_pca_layer(const analyze_ctx *c, FILE *f, int64_t l, const double *pc)
{
    for (int64_t g = 0; g < c->K; g++)
        for (int64_t j = 0; j < c->T; j++)
            fprintf(f, "%lld,%lld,%lld,%.9g,%.9g\n", (long long)l, (long long)g, (long long)j,
                    pc[(g * c->T + j) * 2], pc[(g * c->T + j) * 2 + 1]);
}
