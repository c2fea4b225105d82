/* The tidy CSV outputs of `kvtrace fidelity` (docs/fidelity.md): per
 * configuration, per position, the rank agreement summary and the
 * mis-ordered pairs; then the figure and the report (report.c). A
 * configuration is named by its config label first, then policy and params
 * (docs/outputs.md). */
#include <stdio.h>

#include "core/csv.h"
#include "fidelity/fidelity.h"
#include "fidelity/rank.h"
#include "fidelity/report.h"
#include "results/fidelity_schema.h"
#include "results/results_dir.h"
#include "results/results_row.h"

/* Closes DIR/NAME, naming it whole in a write error. */
static int close_out(FILE *f, const char *dir, const char *name, kv_err *err)
{
    char what[4400];
    snprintf(what, sizeof what, "%s/%s", dir, name);
    return csv_close(f, what, err);
}

/* "config,policy,params" of a configuration (config: results_config_label), and with `alloc` its allocator. */
static void config_names(results_row *w, const fid_config *c, bool alloc)
{
    char config[600];
    results_config_label(c->pc->iface->name, c->pc->canonical, config, sizeof config);
    results_row_text(w, config), results_row_text(w, c->pc->iface->name), results_row_text(w, c->pc->canonical);
    if (alloc) results_row_text(w, c->alloc);
}

void fid_config_key(results_row *w, const fid_config *c)
{
    config_names(w, c, false);
    results_row_int(w, c->budget), results_row_text(w, c->alloc);
}

void fid_config_measures(results_row *w, const fidelity_opts *o, const fid_results *r, const fid_config *c)
{
    (void)o;
    results_row_int(w, c->chunk), results_row_int(w, c->n_positions);
    results_row_real(w, c->kl_mean), results_row_real(w, c->kl_p95), results_row_real(w, c->kl_max);
    results_row_real(w, c->greedy_agree), results_row_real(w, r->ppl_full), results_row_real(w, c->ppl_evict);
    results_row_real(w, c->out_rel_err_mean), results_row_real(w, c->out_rel_err_p95);
    results_row_real(w, c->attn_recall_mean), results_row_int(w, c->cache_peak), results_row_int(w, c->rows_peak);
}

static int write_configs(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &FID_SCHEMA_CONFIGS, err);
    if (!f) return err->code;
    for (int i = 0; i < r->n; i++) {
        results_row w = results_row_begin(f, &FID_SCHEMA_CONFIGS);
        fid_config_key(&w, &r->c[i]);
        fid_config_measures(&w, o, r, &r->c[i]);
        results_row_end(&w);
    }
    return close_out(f, dir, "fidelity.csv", err);
}

static int write_positions(const fid_results *r, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &FID_SCHEMA_POSITIONS, err);
    if (!f) return err->code;
    for (int i = 0; i < r->n; i++) {
        const fid_config *c = &r->c[i];
        for (int64_t j = 0; j < c->n_positions; j++) {
            results_row w = results_row_begin(f, &FID_SCHEMA_POSITIONS);
            fid_config_key(&w, c), results_row_int(&w, c->chunk);
            results_row_int(&w, r->T - c->n_positions + j), results_row_real(&w, c->kl[j]);
            results_row_int(&w, c->agree[j]);
            results_row_end(&w);
        }
    }
    return close_out(f, dir, "positions.csv", err);
}

/* The pooled row first (scope "all", no budget or chunk), then one per budget and chunk (scope "budget"). */
static int write_summary(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &FID_SCHEMA_SUMMARY, err);
    if (!f) return err->code;
    for (int g = -1; g < o->n_chunks * o->n_budgets; g++) {
        const int64_t budget = g < 0 ? 0 : o->budgets[g % o->n_budgets], chunk = g < 0 ? 0 : o->chunks[g / o->n_budgets];
        fid_rank k;
        fid_rank_stats(r, budget, chunk, &k);
        results_row w = results_row_begin(f, &FID_SCHEMA_SUMMARY);
        results_row_text(&w, g < 0 ? "all" : "budget");
        if (g < 0) results_row_none(&w);
        else results_row_int(&w, budget);
        results_row_int(&w, k.n_configs), results_row_real(&w, k.rho_err), results_row_real(&w, k.rho_recall);
        results_row_int(&w, k.pairs), results_row_int(&w, k.misordered), results_row_int(&w, r->T);
        results_row_int(&w, r->prompt_len);
        if (g < 0) results_row_none(&w);
        else results_row_int(&w, chunk);
        results_row_real(&w, r->ppl_full);
        results_row_end(&w);
    }
    return close_out(f, dir, "summary.csv", err);
}

static int write_misordered(const fid_results *r, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &FID_SCHEMA_MISORDERED, err);
    if (!f) return err->code;
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < r->n; j++) {
            const fid_config *a = &r->c[i], *b = &r->c[j];
            if (!fid_misordered(a, b)) continue;
            results_row w = results_row_begin(f, &FID_SCHEMA_MISORDERED);
            config_names(&w, a, true), config_names(&w, b, true);
            results_row_int(&w, a->budget), results_row_int(&w, a->chunk);
            results_row_real(&w, a->out_rel_err_mean), results_row_real(&w, b->out_rel_err_mean);
            results_row_real(&w, a->kl_mean), results_row_real(&w, b->kl_mean);
            results_row_end(&w);
        }
    return close_out(f, dir, "misordered.csv", err);
}

int fid_write_outputs(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err)
{
    int rc = write_configs(o, r, dir, err);
    if (!rc) rc = write_positions(r, dir, err);
    if (!rc) rc = write_summary(o, r, dir, err);
    if (!rc) rc = write_misordered(r, dir, err);
    if (!rc && o->prov) rc = prov_write_json(o->prov, dir, err);
    if (!rc) rc = fid_write_figure(o, r, dir, err);
    if (!rc) rc = fid_write_report(o, r, dir, err);
    return rc;
}
