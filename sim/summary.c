/* summary: a run's summaries over layers and heads (sim_results_summarize),
 * per trace in summary_by_trace.csv (one trace's summary.csv of before, with
 * a trace column) and over traces in summary.csv: each statistic's mean over
 * the traces (each weighs 1) with its 95% percentile bootstrap interval
 * (study/bootstrap.c), and n_traces (docs/study.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "results/results_dir.h"
#include "results/results_schema.h"
#include "sim/results.h"
#include "study/study.h"

static const char *const PHASE_NAMES[N_PHASES] = {"prefill", "decode", "all"};

enum { N_METRICS = 5 };   /* out_rel_err_mean, out_rel_err_p95, attn_recall_mean, attn_recall_min, final_logdet_mean */

/* Configuration c's phase p of one trace: n_queries and the five statistics. */
static int64_t metrics_of(const sim_results *r, int c, int p, double m[N_METRICS])
{
    sim_stats s;
    double ld;
    sim_results_summarize(r, c, p, &s, &ld);
    m[0] = s.err_mean, m[1] = s.err_p95, m[2] = s.recall_mean, m[3] = s.recall_min, m[4] = ld;
    return s.n;
}

int sim_summary_check(const sim_trace_out *t, int n, kv_err *err)
{
    char a[1400], b[1400];
    for (int i = 1; i < n; i++) {
        if (t[i].r->n_cfg != t[0].r->n_cfg)
            return kv_fail(err, KV_EFAIL, "sim: %s has %d configurations, %s %d", t[i].path, t[i].r->n_cfg,
                           t[0].path, t[0].r->n_cfg);
        for (int c = 0; c < t[0].r->n_cfg; c++) {
            sim_cfg_prefix(t[0].o, c, a, sizeof a);
            sim_cfg_prefix(t[i].o, c, b, sizeof b);
            if (strcmp(a, b) != 0)   /* a trace without /wo relabels wo=model (docs/sim.md) */
                return kv_fail(err, KV_EINPUT, "%s: configuration '%.400s' is '%.400s' on this trace; a study needs "
                               "the same configurations on every trace (capture them alike, e.g. all with --record wo)",
                               t[i].path, a, b);
        }
    }
    return KV_OK;
}

static int write_by_trace(const sim_trace_out *t, int n, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &RESULTS_SCHEMA_SUMMARY_BY_TRACE, err);
    if (!f) return err->code;
    sim_cfg_cols k, sk;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < t[i].r->n_cfg; c++) {
            sim_cfg_cols_of(t[i].o, c, &k);
            const char *same = sim_same_as_label(&t[i], 1, c, &sk);
            for (int p = 0; p < N_PHASES; p++) {
                double m[N_METRICS];
                const int64_t q = metrics_of(t[i].r, c, p, m);
                results_row w = results_row_begin(f, &RESULTS_SCHEMA_SUMMARY_BY_TRACE);
                sim_row_run(&w, t[i].o, &k, true);
                results_row_text(&w, PHASE_NAMES[p]), results_row_int(&w, q);
                for (int x = 0; x < N_METRICS; x++) results_row_real(&w, m[x]);
                results_row_text(&w, t[i].id), results_row_text(&w, same), results_row_text(&w, k.run);
                results_row_end(&w);
            }
        }
    return csv_close(f, RESULTS_FILE_SUMMARY_BY_TRACE, err);
}

/* Configuration c's phase p over the traces: n_queries summed, each statistic's mean and interval. */
static int64_t over_traces(const sim_trace_out *t, int n, int c, int p, const int32_t *idx, double *x,
                           double mean[N_METRICS], double lo[N_METRICS], double hi[N_METRICS])
{
    int64_t q = 0;
    double m[N_METRICS];
    for (int k = 0; k < N_METRICS; k++) {
        for (int i = 0; i < n; i++) {
            const int64_t qi = metrics_of(t[i].r, c, p, m);
            if (k == 0) q += qi;
            x[i] = m[k];
        }
        /* the phase's measures skip the traces where it had no queries; log-det is per trace */
        if (k < N_METRICS - 1) study_mean_ci_measured(x, n, idx, &mean[k], &lo[k], &hi[k]);
        else study_mean_ci(x, n, idx, &mean[k], &lo[k], &hi[k]);
    }
    return q;
}

static int write_over_traces(const sim_trace_out *t, int n, const char *dir, kv_err *err)
{
    int32_t *idx = study_resamples(n, err);
    double *x = idx ? kv_calloc((size_t)n, sizeof *x, "summary", err) : NULL;
    FILE *f = x ? results_schema_create(dir, &RESULTS_SCHEMA_SUMMARY, err) : NULL;
    if (!f) {
        free(idx), free(x);
        return err->code;
    }
    sim_cfg_cols k, sk;
    for (int c = 0; c < t[0].r->n_cfg; c++) {
        sim_cfg_cols_of(t[0].o, c, &k);
        const char *same = sim_same_as_label(t, n, c, &sk);
        for (int p = 0; p < N_PHASES; p++) {
            double mean[N_METRICS], lo[N_METRICS], hi[N_METRICS];
            const int64_t q = over_traces(t, n, c, p, idx, x, mean, lo, hi);
            results_row w = results_row_begin(f, &RESULTS_SCHEMA_SUMMARY);
            sim_row_run(&w, t[0].o, &k, true);
            results_row_text(&w, PHASE_NAMES[p]), results_row_int(&w, q);
            for (int m = 0; m < N_METRICS; m++) results_row_real(&w, mean[m]);
            results_row_int(&w, n);
            for (int m = 0; m < N_METRICS; m++) results_row_real(&w, lo[m]), results_row_real(&w, hi[m]);
            results_row_text(&w, same), results_row_text(&w, k.run);
            results_row_end(&w);
        }
    }
    free(idx), free(x);
    return csv_close(f, RESULTS_FILE_SUMMARY, err);
}

int sim_summary_write(const sim_trace_out *t, int n, const char *dir, kv_err *err)
{
    int rc = write_over_traces(t, n, dir, err);
    return rc ? rc : write_by_trace(t, n, dir, err);
}

void sim_summary_print(const sim_trace_out *t, int n)
{
    const sim_opts *o = t[0].o;
    kv_err err = {0};
    int32_t *idx = study_resamples(n, &err);
    double *x = idx ? malloc(sizeof *x * (size_t)n) : NULL;
    if (!x) {
        free(idx);
        return;
    }
    printf("%-12s %-34s %-24s %7s %7s %26s %26s\n", "policy", "params", "allocator", "chunk", "budget",
           "err_mean [95% CI]", "recall_mean [95% CI]");
    for (int c = 0; c < t[0].r->n_cfg; c++) {
        const policy_config *pc = sim_cfg_policy(o, c);
        double mean[N_METRICS], lo[N_METRICS], hi[N_METRICS];
        char alloc[300];
        alloc_label(sim_cfg_alloc(o, c), alloc, sizeof alloc);
        over_traces(t, n, c, PHASE_ALL, idx, x, mean, lo, hi);
        printf("%-12s %-34s %-24s %7lld %7lld %8.4g [%7.4g, %7.4g] %8.4f [%7.4f, %7.4f]\n", pc->iface->name,
               pc->canonical, alloc, (long long)sim_cfg_chunk(o, c), (long long)sim_cfg_budget(o, c), mean[0], lo[0],
               hi[0], mean[2], lo[2], hi[2]);
    }
    double wall = 0.0;
    for (int i = 0; i < n; i++) wall += t[i].r->wall_s;
    printf("%d traces; means over traces (each weighs 1), 95%% percentile bootstrap intervals over traces; "
           "time: %.3f s wall\n", n, wall);
    free(idx), free(x);
}
