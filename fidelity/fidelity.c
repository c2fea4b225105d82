/* The fidelity driver (docs/fidelity.md#kvtrace-fidelity): model runs, sim on the full-cache trace,
 * the comparison, all into a temporary directory renamed at the end. */
#include "fidelity/fidelity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"
#include "fidelity/rank.h"
#include "fidelity/report.h"
#include "sim/sim.h"
#include "plan/plan.h"

static int make_configs(const fidelity_opts *o, fid_results *r, kv_err *err)
{
    const int A = o->n_allocators, K = o->n_chunks;
    r->n = o->n_policies * A * K * o->n_budgets;
    if (!(r->c = kv_calloc((size_t)r->n, sizeof *r->c, "configurations", err))) return err->code;
    for (int p = 0; p < o->n_policies; p++)
        for (int a = 0; a < A; a++)
            for (int k = 0; k < K; k++)
                for (int b = 0; b < o->n_budgets; b++) {
                    fid_config *c = &r->c[((p * A + a) * K + k) * o->n_budgets + b];
                    *c = (fid_config){.pc = &o->policies[p], .ac = &o->allocators[a], .budget = o->budgets[b],
                                      .chunk = o->chunks[k]};
                    alloc_label(c->ac, c->alloc, sizeof c->alloc);
                }
    return KV_OK;
}

/* The record of DIR/sim: the fidelity command, its time, and full.h5 (as it
 * will be named once DIR is in place). */
static int sim_provenance(const fidelity_opts *o, const char *trace_path, prov_record *sp, kv_err *err)
{
    int rc = prov_begin(sp, o->prov->argc, o->prov->argv, err);
    if (rc) return rc;
    memcpy(sp->time, o->prov->time, sizeof sp->time);
    memcpy(sp->time_source, o->prov->time_source, sizeof sp->time_source);
    char shown[4200];
    snprintf(shown, sizeof shown, "%s/full.h5", o->output);
    rc = prov_add_file(sp, "trace", trace_path, shown, err);
    if (!rc && o->head_scores) rc = prov_add_file(sp, "head_scores", o->head_scores, NULL, err);
    return rc;
}

/* sim on the full-cache trace into dir (kept in the output), its phase=all
 * summary of each configuration into summary[n_policies x n_allocators x n_chunks x n_budgets]. */
static int run_sim(const fidelity_opts *o, const char *trace_path, const char *dir, sim_stats *summary, kv_err *err)
{
    prov_record sp = {0};
    int rc = o->prov ? sim_provenance(o, trace_path, &sp, err) : KV_OK;
    sim_opts s = {.trace = trace_path, .output = dir, .prov = o->prov ? &sp : NULL, .policies = o->policies,
                  .n_policies = o->n_policies, .allocators = o->allocators, .n_allocators = o->n_allocators,
                  .head_scores = o->head_scores,
                  .budgets = o->budgets, .n_budgets = o->n_budgets,
                  .chunk = o->seq.chunk, .chunks = o->chunks, .n_chunks = o->n_chunks, .decode_chunk = 1, .eval_stride = 1, .threads = o->sim_threads,
                  .quiet = true, .progress = !o->quiet};
    if (!rc) rc = sim_run(&s, summary, err);
    prov_free(&sp);
    return rc;
}

/* The table on stdout: one line per configuration, then ρ and the pair count. */
static void print_summary(const fid_results *r)
{
    printf("%-12s %-34s %-24s %6s %5s %11s %11s %7s %9s %12s %11s\n", "policy", "params", "allocator", "N", "B",
           "kl_mean", "kl_p95", "agree", "d_ppl", "out_rel_err", "attn_recall");
    for (int i = 0; i < r->n; i++) {
        const fid_config *c = &r->c[i];
        printf("%-12s %-34s %-24s %6lld %5lld %11.4g %11.4g %6.1f%% %9.4f %12.4g %11.4f\n", c->pc->iface->name,
               c->pc->canonical, c->alloc, (long long)c->budget, (long long)c->chunk, c->kl_mean, c->kl_p95, 100.0 * c->greedy_agree, c->ppl_evict - r->ppl_full,
               c->out_rel_err_mean, c->attn_recall_mean);
    }
    printf("T = %lld (prompt %lld), full-cache perplexity %.4f\n", (long long)r->T, (long long)r->prompt_len,
           r->ppl_full);
    fid_headline h;
    fid_headline_compute(r, &h);
    char t[32], g[64];
    printf("Spearman rho(out_rel_err, KL) within each budget:");
    for (int b = 0; b < h.n; b++)
        printf("%s %s: %s", b ? "," : "", fid_group_text(&h, b, g, 64), fid_rho_text(h.within[b].rho_err, t, 32));
    printf("; mean %s", fid_rho_text(h.rho_err, t, 32));
    printf(" (with 1 - attn_recall: mean %s)\n", fid_rho_text(h.rho_recall, t, 32));
    printf("%lld of %lld same-budget pairs mis-ordered offline\n", (long long)h.misordered, (long long)h.pairs);
    printf("pooled over budgets (inflated: a larger budget lowers both error and KL): rho = %s over %lld "
           "configurations", fid_rho_text(h.pooled.rho_err, t, 32), (long long)h.pooled.n_configs);
    printf(" (with 1 - attn_recall: %s)\n", fid_rho_text(h.pooled.rho_recall, t, 32));
    fid_headline_free(&h);
}

/* Policies that cannot run inside the model are refused before anything runs. */
int fid_check_online(const fidelity_opts *o, kv_err *err)
{
    int rc = KV_OK;
    for (int p = 0; !rc && p < o->n_policies; p++) rc = plan_check_online(&o->policies[p], "fidelity", "policy", err);
    return rc;
}

int fidelity_one(const fidelity_opts *o, const char *dir, fid_results *r, kv_err *err)
{
    memset(r, 0, sizeof *r);
    int rc = make_configs(o, r, err);
    if (rc) return rc;
    char trace_path[4400], sim_dir[4400];
    snprintf(trace_path, sizeof trace_path, "%s/full.h5", dir);
    snprintf(sim_dir, sizeof sim_dir, "%s/sim", dir);
    sim_stats *summary = kv_calloc((size_t)(r->n > 0 ? r->n : 1), sizeof *summary, "sim summary", err);
    rc = summary ? fid_run_models(o, trace_path, r, err) : err->code;
    if (!rc) rc = run_sim(o, trace_path, sim_dir, summary, err);
    if (!rc) rc = fid_take_sim(summary, r, err);
    free(summary);
    if (!rc) rc = fid_write_outputs(o, r, dir, err);
    return rc;
}

int fidelity_run(const fidelity_opts *o, kv_err *err)
{
    int rc = fid_check_online(o, err);
    if (rc) return rc;
    fid_results r;
    memset(&r, 0, sizeof r);
    kv_outfile out;
    const char *inputs[] = {o->seq.model, o->seq.tokenizer, o->seq.prompt.text_file, o->seq.prompt.tokens_file,
                            o->head_scores};
    rc = outfile_check_inputs(o->output, inputs, 5, err);
    if (!rc) rc = outdir_begin(&out, o->output, o->force, err);
    if (rc) return rc;
    rc = fidelity_one(o, out.tmp_path, &r, err);
    if (!rc) rc = outdir_commit(&out, err);
    else outdir_abort(&out);
    if (!rc) print_summary(&r);
    fid_results_free(&r);
    return rc;
}
