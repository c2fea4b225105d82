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
#include "results/results_dir.h"

/* Closes DIR/NAME, naming it whole in a write error. */
static int close_out(FILE *f, const char *dir, const char *name, kv_err *err)
{
    char what[4400];
    snprintf(what, sizeof what, "%s/%s", dir, name);
    return csv_close(f, what, err);
}

/* "config,policy,params" of a configuration (config: results_config_label). */
static void config_names(FILE *f, const fid_config *c)
{
    char config[600];
    results_config_label(c->pc->iface->name, c->pc->canonical, config, sizeof config);
    csv_field(f, config, false);
    fputc(',', f);
    csv_field(f, c->pc->iface->name, false);
    fputc(',', f);
    csv_field(f, c->pc->canonical, false);
}

/* "config,policy,params,budget,allocator": a configuration's key, as sim's results.csv starts its rows. */
void fid_config_key(FILE *f, const fid_config *c)
{
    config_names(f, c);
    fprintf(f, ",%lld,", (long long)c->budget);
    csv_field(f, c->alloc, false);
}

static int write_configs(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err)
{
    FILE *f = csv_create(dir, "fidelity.csv", "config,policy,params,budget,allocator,chunk,n_positions,kl_mean,kl_p95,"
                         "kl_max,greedy_agree,ppl_full,ppl_evict,out_rel_err_mean,out_rel_err_p95,attn_recall_mean,"
                         "cache_peak_rows,rows_peak", err);
    if (!f) return err->code;
    for (int i = 0; i < r->n; i++) {
        const fid_config *c = &r->c[i];
        fid_config_key(f, c);
        fprintf(f, ",%lld,%lld,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%lld,%lld\n", (long long)o->seq.chunk,
                (long long)c->n_positions, c->kl_mean, c->kl_p95, c->kl_max, c->greedy_agree, r->ppl_full,
                c->ppl_evict, c->out_rel_err_mean, c->out_rel_err_p95, c->attn_recall_mean, (long long)c->cache_peak,
                (long long)c->rows_peak);
    }
    return close_out(f, dir, "fidelity.csv", err);
}

static int write_positions(const fid_results *r, const char *dir, kv_err *err)
{
    FILE *f = csv_create(dir, "positions.csv", "config,policy,params,budget,allocator,position,kl,greedy_agree", err);
    if (!f) return err->code;
    for (int i = 0; i < r->n; i++) {
        const fid_config *c = &r->c[i];
        for (int64_t j = 0; j < c->n_positions; j++) {
            fid_config_key(f, c);
            fprintf(f, ",%lld,%.9g,%d\n", (long long)(r->T - c->n_positions + j), c->kl[j], c->agree[j]);
        }
    }
    return close_out(f, dir, "positions.csv", err);
}

static int write_summary(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err)
{
    FILE *f = csv_create(dir, "summary.csv", "budget,n_configs,rho_out_rel_err_kl,rho_attn_loss_kl,n_pairs,"
                         "n_misordered,n_tokens,prompt_len,chunk,ppl_full", err);
    if (!f) return err->code;
    for (int b = -1; b < o->n_budgets; b++) {
        fid_rank k;
        fid_rank_stats(r, b < 0 ? 0 : o->budgets[b], &k);
        if (b < 0) fputs("all", f);
        else fprintf(f, "%lld", (long long)o->budgets[b]);
        fprintf(f, ",%lld,%.6g,%.6g,%lld,%lld,%lld,%lld,%lld,%.9g\n", (long long)k.n_configs, k.rho_err,
                k.rho_recall, (long long)k.pairs, (long long)k.misordered, (long long)r->T, (long long)r->prompt_len,
                (long long)o->seq.chunk, r->ppl_full);
    }
    return close_out(f, dir, "summary.csv", err);
}

static int write_misordered(const fid_results *r, const char *dir, kv_err *err)
{
    FILE *f = csv_create(dir, "misordered.csv", "config_a,policy_a,params_a,allocator_a,config_b,policy_b,params_b,"
                         "allocator_b,budget,out_rel_err_a,out_rel_err_b,kl_mean_a,kl_mean_b", err);
    if (!f) return err->code;
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < r->n; j++) {
            const fid_config *a = &r->c[i], *b = &r->c[j];
            if (!fid_misordered(a, b)) continue;
            config_names(f, a), fputc(',', f), csv_field(f, a->alloc, false), fputc(',', f);
            config_names(f, b), fputc(',', f), csv_field(f, b->alloc, false);
            fprintf(f, ",%lld,%.9g,%.9g,%.9g,%.9g\n", (long long)a->budget, a->out_rel_err_mean, b->out_rel_err_mean, a->kl_mean, b->kl_mean);
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
