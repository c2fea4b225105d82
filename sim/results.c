/* sim's results in memory, and the results directory written from them:
 * the three CSVs here (their rows are sim's), results.h5 by the results
 * module (results/), which analyze reads them with, and provenance.json
 * (provenance/). */
#include "sim/results.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/csv.h"
#include "expr/expr.h"
#include "results/results_dir.h"
#include "results/results_h5.h"
#include "plan/plan.h"
#include "results/results_schema.h"

static const char *const PHASE_NAMES[N_PHASES] = {"prefill", "decode", "all"};

int sim_n_chunks(const sim_opts *o)
{
    return o->n_chunks > 0 ? o->n_chunks : 1;
}

const policy_config *sim_cfg_policy(const sim_opts *o, int c)
{
    return &o->policies[c / o->n_budgets / sim_n_chunks(o) / o->n_allocators];
}

const alloc_config *sim_cfg_alloc(const sim_opts *o, int c)
{
    return &o->allocators[c / o->n_budgets / sim_n_chunks(o) % o->n_allocators];
}

int64_t sim_cfg_chunk(const sim_opts *o, int c)
{
    return o->n_chunks > 0 ? o->chunks[c / o->n_budgets % o->n_chunks] : o->chunk;
}

int64_t sim_cfg_budget(const sim_opts *o, int c)
{
    return o->budgets[c % o->n_budgets];
}

static double sim_cfg_fraction(const sim_opts *o, int c)
{
    return o->budget_fractions ? o->budget_fractions[c % o->n_budgets] : NAN;
}

/* Every configuration once: results.csv's rows and results.h5's runs are
 * keyed by (config, budget), and a second copy would double them. */
static int check_unique(const sim_opts *o, kv_err *err)
{
    for (int i = 0; i < o->n_policies; i++)
        for (int j = 0; j < i; j++)
            if (o->policies[i].iface == o->policies[j].iface &&
                strcmp(o->policies[i].canonical, o->policies[j].canonical) == 0) {
                char config[512];
                results_config_label(o->policies[i].iface->name, o->policies[i].canonical, config, sizeof config);
                return cli_usage(err, "sim", "--policies names %s twice (with defaults filled); give each "
                                 "configuration once", config);
            }
    for (int i = 0; i < o->n_budgets; i++)
        for (int j = 0; j < i; j++)
            if (o->budgets[i] == o->budgets[j])
                return cli_usage(err, "sim", "--budgets names %lld twice%s", (long long)o->budgets[i],
                                 o->budget_fractions ? " (fractions of T count as their N = floor(f*T))" : "");
    for (int i = 0; i < o->n_chunks; i++)
        for (int j = 0; j < i; j++)
            if (o->chunks[i] == o->chunks[j])
                return cli_usage(err, "sim", "--chunks names %lld twice", (long long)o->chunks[i]);
    return KV_OK;
}

/* The most rows one (layer, kv head) of configuration c can keep (width: plan_results_width). */
static int64_t width_of(const sim_opts *o, int c, int64_t L, int64_t K, int64_t T, int64_t *caps, kv_err *err)
{
    return plan_results_width(sim_cfg_policy(o, c), sim_cfg_alloc(o, c), sim_cfg_budget(o, c), L, K, T, caps, err);
}

int sim_results_alloc(sim_results *r, const sim_opts *o, int64_t L, int64_t H, int64_t K, int64_t T, int64_t n_steps,
                      kv_err *err)
{
    memset(r, 0, sizeof *r);
    if (check_unique(o, err)) return err->code;
    r->L = L, r->H = H, r->K = K, r->T = T, r->n_steps = n_steps;
    r->n_cfg = o->n_policies * o->n_allocators * sim_n_chunks(o) * o->n_budgets;
    const size_t C = (size_t)r->n_cfg, LK = (size_t)(L * K);
    int64_t *caps = NULL;
    if (!(r->stats = kv_calloc(C * (size_t)(L * H * N_PHASES), sizeof *r->stats, "results", err)) ||
        !(r->logdet = kv_calloc(C * (size_t)(L * K), sizeof *r->logdet, "results", err)) ||
        !(r->retained = kv_calloc(C, sizeof *r->retained, "results", err)) ||
        !(r->width = kv_calloc(C, sizeof *r->width, "results", err)) ||
        !(r->calls = kv_calloc(C * (size_t)K, sizeof *r->calls, "timing", err)) ||
        !(r->candidates = kv_calloc(C * (size_t)K, sizeof *r->candidates, "timing", err)) ||
        !(r->score_ns = kv_calloc(C * (size_t)K, sizeof *r->score_ns, "timing", err)) ||
        !(r->head_budget = kv_calloc(C * LK, sizeof *r->head_budget, "results", err)) ||
        !(r->head_mean = kv_calloc(C * LK, sizeof *r->head_mean, "results", err)) ||
        !(r->kept_hash = kv_calloc(C * LK, sizeof *r->kept_hash, "results", err)) ||
        !(caps = kv_calloc((size_t)K, sizeof *caps, "results", err)))
        goto fail;
    if (o->step_counts && (!(r->step_cand = kv_calloc(C * LK * (size_t)n_steps, sizeof(int32_t), "step counts", err)) ||
                           !(r->step_kept = kv_calloc(C * LK * (size_t)n_steps, sizeof(int32_t), "step counts", err))))
        goto fail;
    for (int c = 0; c < r->n_cfg; c++) {
        if ((r->width[c] = width_of(o, c, L, K, T, caps, err)) < 0) goto fail;
        if (!(r->retained[c] = kv_calloc(LK * (size_t)r->width[c], sizeof(int64_t), "results", err))) goto fail;
    }
    free(caps);
    return KV_OK;
fail:
    free(caps);
    sim_results_free(r);
    return err->code;
}

void sim_results_free(sim_results *r)
{
    for (int c = 0; r->retained && c < r->n_cfg; c++) free(r->retained[c]);
    free(r->stats), free(r->logdet), free(r->retained), free(r->width);
    free(r->calls), free(r->candidates), free(r->score_ns);
    free(r->head_budget), free(r->head_mean), free(r->kept_hash), free(r->step_cand), free(r->step_kept);
    free(r->spans), free(r->span_ret), free(r->span_recall);
    memset(r, 0, sizeof *r);
}

void sim_cfg_cols_of(const sim_opts *o, int c, sim_cfg_cols *k)
{
    const policy_config *pc = sim_cfg_policy(o, c);
    results_config_label(pc->iface->name, pc->canonical, k->config, sizeof k->config);
    alloc_label(sim_cfg_alloc(o, c), k->alloc, sizeof k->alloc);
    k->policy = pc->iface->name, k->params = pc->canonical;
    k->budget = sim_cfg_budget(o, c), k->chunk = sim_cfg_chunk(o, c), k->fraction = sim_cfg_fraction(o, c);
    results_run_label(k->config, k->alloc, k->chunk, k->run, sizeof k->run);
}

int sim_same_as(const sim_trace_out *t, int n, int c)
{
    const sim_opts *o = t[0].o;
    for (int d = 0; d < c; d++) {
        bool same = sim_cfg_budget(o, d) == sim_cfg_budget(o, c);
        for (int i = 0; same && i < n; i++) {
            const size_t LK = (size_t)(t[i].r->L * t[i].r->K);
            same = memcmp(t[i].r->kept_hash + (size_t)d * LK, t[i].r->kept_hash + (size_t)c * LK,
                          LK * sizeof *t[i].r->kept_hash) == 0;
        }
        if (same) return d;
    }
    return -1;
}

const char *sim_same_as_label(const sim_trace_out *t, int n, int c, sim_cfg_cols *k)
{
    const int d = sim_same_as(t, n, c);
    if (d < 0) return "";
    sim_cfg_cols_of(t[0].o, d, k);
    return k->run;
}

void sim_row_run(results_row *w, const sim_opts *o, const sim_cfg_cols *k, bool strides)
{
    results_row_text(w, k->config), results_row_text(w, k->policy), results_row_text(w, k->params);
    results_row_int(w, k->budget), results_row_text(w, k->alloc), results_row_fraction(w, k->fraction);
    results_row_int(w, k->chunk);
    if (strides) results_row_int(w, o->decode_chunk), results_row_int(w, o->eval_stride);
}

void sim_cfg_prefix(const sim_opts *o, int c, char *buf, size_t cap)
{
    sim_cfg_cols k;
    sim_cfg_cols_of(o, c, &k);
    char frac[32] = "";
    if (!isnan(k.fraction)) snprintf(frac, sizeof frac, "%.9g", k.fraction);
    snprintf(buf, cap, "%s,%s,%s,%lld,%s,%s,%lld,%lld,%lld", k.config, k.policy, k.params, (long long)k.budget,
             k.alloc, frac, (long long)k.chunk, (long long)o->decode_chunk, (long long)o->eval_stride);
}

static const sim_stats *stat_at(const sim_results *r, int c, int64_t l, int64_t h, int p)
{
    return &r->stats[(((size_t)c * (size_t)r->L + (size_t)l) * (size_t)r->H + (size_t)h) * N_PHASES + (size_t)p];
}

static int write_results_csv(const sim_trace_out *t, int n_traces, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &RESULTS_SCHEMA_RESULTS, err);
    if (!f) return err->code;
    for (int i = 0; i < n_traces; i++) {
        const sim_results *r = t[i].r;
        const int64_t G = r->H / r->K; /* query head h uses kv head h / G (docs/trace.md#conventions) */
        sim_cfg_cols k, sk;
        for (int c = 0; c < r->n_cfg; c++) {
            sim_cfg_cols_of(t[i].o, c, &k);
            const char *same = sim_same_as_label(&t[i], 1, c, &sk);
            for (int64_t l = 0; l < r->L; l++)
                for (int64_t h = 0; h < r->H; h++)
                    for (int p = 0; p < N_PHASES; p++) {
                        const sim_stats *s = stat_at(r, c, l, h, p);
                        const size_t at = ((size_t)c * (size_t)r->L + (size_t)l) * (size_t)r->K + (size_t)(h / G);
                        results_row w = results_row_begin(f, &RESULTS_SCHEMA_RESULTS);
                        sim_row_run(&w, t[i].o, &k, true);
                        results_row_int(&w, l), results_row_int(&w, h), results_row_int(&w, h / G);
                        results_row_text(&w, PHASE_NAMES[p]), results_row_int(&w, s->n);
                        results_row_real(&w, s->err_mean), results_row_real(&w, s->err_p95);
                        results_row_real(&w, s->recall_mean), results_row_real(&w, s->recall_min);
                        results_row_int(&w, r->head_budget[at]), results_row_real(&w, r->head_mean[at]);
                        results_row_text(&w, t[i].id), results_row_text(&w, same), results_row_text(&w, k.run);
                        results_row_end(&w);
                    }
        }
    }
    return csv_close(f, RESULTS_FILE_CSV, err);
}

void sim_results_summarize(const sim_results *r, int c, int p, sim_stats *out, double *logdet_mean)
{
    sim_stats m = {0};
    int64_t measured = 0;   /* the (layer, query head) cells with queries in this phase: the others are NaN */
    for (int64_t l = 0; l < r->L; l++)
        for (int64_t h = 0; h < r->H; h++) measured += stat_at(r, c, l, h, p)->n > 0;
    const double cells = (double)measured;
    for (int64_t l = 0; l < r->L; l++)
        for (int64_t h = 0; h < r->H; h++) {
            const sim_stats *s = stat_at(r, c, l, h, p);
            if (!s->n) continue;
            m.n += s->n;
            m.err_mean += s->err_mean / cells, m.err_p95 += s->err_p95 / cells;
            m.recall_mean += s->recall_mean / cells, m.recall_min += s->recall_min / cells;
        }
    if (!measured) m.err_mean = m.err_p95 = m.recall_mean = m.recall_min = NAN;
    double ld = 0.0;
    for (int64_t i = 0; i < r->L * r->K; i++) ld += r->logdet[(size_t)c * (size_t)(r->L * r->K) + (size_t)i];
    *out = m;
    *logdet_mean = ld / (double)(r->L * r->K);
}

static int write_timing_csv(const sim_trace_out *t, int n_traces, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &RESULTS_SCHEMA_TIMING, err);
    if (!f) return err->code;
    sim_cfg_cols k;
    for (int i = 0; i < n_traces; i++) {
        const sim_results *r = t[i].r;
        for (int c = 0; c < r->n_cfg; c++) {
            sim_cfg_cols_of(t[i].o, c, &k);
            int64_t calls = 0, cands = 0;
            double ns = 0.0;
            for (int64_t g = 0; g < r->K; g++) {
                size_t x = (size_t)c * (size_t)r->K + (size_t)g;
                calls += r->calls[x], cands += r->candidates[x], ns += r->score_ns[x];
            }
            results_row w = results_row_begin(f, &RESULTS_SCHEMA_TIMING);
            sim_row_run(&w, t[i].o, &k, false);
            results_row_int(&w, calls), results_row_int(&w, cands);
            results_row_real(&w, cands ? ns / (double)cands : 0.0), results_row_text(&w, t[i].id);
            results_row_text(&w, k.run);
            results_row_end(&w);
        }
    }
    return csv_close(f, RESULTS_FILE_TIMING, err);
}

/* results.h5: one run per (trace, configuration), trace-major, views of the
 * arrays in memory, each retained cut to the most rows any of its (layer, kv
 * head) kept, each run's @trace its prompt id. */
static int write_results_h5(const sim_trace_out *t, int n_traces, const char *dir, kv_err *err)
{
    int total = 0;
    for (int i = 0; i < n_traces; i++) total += t[i].r->n_cfg;
    results_run_view *runs = kv_calloc((size_t)(total > 0 ? total : 1), sizeof *runs, "results", err);
    char (*alloc)[300] = kv_calloc((size_t)(total > 0 ? total : 1), sizeof *alloc, "results", err);
    if (!runs || !alloc) {
        free(runs), free(alloc);
        return err->code;
    }
    int x = 0;
    for (int i = 0; i < n_traces; i++) {
        const sim_results *r = t[i].r;
        const sim_opts *o = t[i].o;
        const size_t LK = (size_t)(r->L * r->K);
        for (int c = 0; c < r->n_cfg; c++, x++) {
            const policy_config *pc = sim_cfg_policy(o, c);
            int64_t width = 1;
            for (size_t j = 0; j < LK; j++)
                if (r->head_budget[(size_t)c * LK + j] > width) width = r->head_budget[(size_t)c * LK + j];
            alloc_label(sim_cfg_alloc(o, c), alloc[x], sizeof alloc[x]);
            runs[x] = (results_run_view){
                .policy = pc->iface->name, .params = pc->canonical, .definition = expr_definition(pc->iface),
                .allocator = alloc[x], .budget_fraction = sim_cfg_fraction(o, c), .budget = sim_cfg_budget(o, c),
                .chunk = sim_cfg_chunk(o, c), .trace = t[i].id, .L = r->L, .K = r->K, .width = width,
                .stride = r->width[c], .retained = r->retained[c], .final_logdet = r->logdet + (size_t)c * LK,
                .head_budget = r->head_budget + (size_t)c * LK, .head_mean = r->head_mean + (size_t)c * LK,
                .n_steps = r->n_steps,
                .step_cand = r->step_cand ? r->step_cand + (size_t)c * LK * (size_t)r->n_steps : NULL,
                .step_kept = r->step_kept ? r->step_kept + (size_t)c * LK * (size_t)r->n_steps : NULL};
        }
    }
    int rc = results_write(dir, t[0].r->L, t[0].r->K, runs, total, t[0].o->prov, err);
    free(runs), free(alloc);
    return rc;
}

/* The table on stdout of a one-trace run. */
static void print_table(const sim_results *r, const sim_opts *o)
{
    const bool swept = o->n_chunks > 1; /* a chunk column only when --chunks sweeps several */
    printf("%-12s %-34s %-24s %s%7s %12s %12s %12s %12s\n", "policy", "params", "allocator", swept ? "  chunk " : "",
           "budget", "err_mean", "err_p95", "recall_mean", "logdet_mean");
    for (int c = 0; c < r->n_cfg; c++) {
        const policy_config *pc = sim_cfg_policy(o, c);
        sim_stats s;
        double ld;
        char alloc[300], chunk[32] = "";
        alloc_label(sim_cfg_alloc(o, c), alloc, sizeof alloc);
        if (swept) snprintf(chunk, sizeof chunk, "%7lld ", (long long)sim_cfg_chunk(o, c));
        sim_results_summarize(r, c, PHASE_ALL, &s, &ld);
        printf("%-12s %-34s %-24s %s%7lld %12.4g %12.4g %12.4f %12.4g\n", pc->iface->name, pc->canonical, alloc,
               chunk, (long long)sim_cfg_budget(o, c), s.err_mean, s.err_p95, s.recall_mean, ld);
    }
    double score_s = 0.0;
    for (size_t i = 0; i < (size_t)r->n_cfg * (size_t)r->K; i++) score_s += r->score_ns[i] * 1e-9;
    printf("time: %.3f s wall; trace reading %.3f s, full-cache reference %.3f s, replay %.3f s of thread time "
           "(metrics %.3f s, policy scoring %.3f s, cache bookkeeping %.3f s)\n", r->wall_s, r->load_s,
           r->reference_s, r->replay_s, r->metrics_s, score_s, r->replay_s - r->metrics_s - score_s);
}

/* One note on stderr naming the configurations that coincide with an earlier one in every trace (the first
 * few): legal, but a label that says pyramid or adakv over results that are uniform's is a trap. */
static void note_same(const sim_trace_out *t, int n_traces)
{
    int same = 0;
    char first[4][1800];   /* the first four, "RUN N=B = EARLIER" */
    for (int c = 0; c < t[0].r->n_cfg; c++) {
        sim_cfg_cols a, b;
        const char *earlier = sim_same_as_label(t, n_traces, c, &b);
        if (!*earlier) continue;
        sim_cfg_cols_of(t[0].o, c, &a);
        if (same < 4) snprintf(first[same], sizeof first[0], "%s N=%lld = %s", a.run, (long long)a.budget, earlier);
        same++;
    }
    if (!same) return;
    fprintf(stderr, "kvtrace: sim: note: %d configuration%s kept exactly the positions of an earlier one at every "
            "step (results equal row for row; same_as in results.csv and summary.csv):", same, same > 1 ? "s" : "");
    for (int i = 0; i < same && i < 4; i++) fprintf(stderr, "%s %s", i ? ";" : "", first[i]);
    fprintf(stderr, "%s\n", same > 4 ? "; ..." : "");
}

int sim_results_write(const sim_trace_out *t, int n_traces, const char *dir, kv_err *err)
{
    const sim_opts *o = t[0].o;
    int rc = write_results_csv(t, n_traces, dir, err);
    if (!rc) rc = write_timing_csv(t, n_traces, dir, err);
    if (!rc) rc = write_results_h5(t, n_traces, dir, err);
    if (!rc && o->prov) rc = prov_write_json(o->prov, dir, err);
    if (!rc && !o->quiet && n_traces == 1) print_table(t[0].r, o);
    if (!rc && !o->quiet) note_same(t, n_traces);
    return rc;
}
