/* `kvtrace fidelity --prompts FILE.jsonl` (docs/fidelity.md, "Many
 * prompts"): the in-model study of every prompt of a study's prompts file
 * (capture/prompts.h reads and tokenizes it, exactly as capture --prompts),
 * the model loaded once; each prompt's whole fidelity output in DIR/ID/, then
 * the per-prompt rows with a `trace` column, the answer's log-probability
 * under each evicting run versus the full run, and the means over prompts
 * with 95% percentile bootstrap intervals (study/study.h, as sim's
 * summary.csv) in DIR. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "capture/capture.h"
#include "capture/prompts.h"
#include "core/csv.h"
#include "core/outfile.h"
#include "fidelity/fidelity.h"
#include "results/fidelity_schema.h"
#include "plots/plot_html.h"
#include "study/study.h"

/* A per-prompt number of configuration i (the summary's metrics). */
typedef double (*fid_metric_fn)(const fid_results *r, int i);

static double m_kl_mean(const fid_results *r, int i) { return r->c[i].kl_mean; }
static double m_kl_p95(const fid_results *r, int i) { return r->c[i].kl_p95; }
static double m_agree(const fid_results *r, int i) { return r->c[i].greedy_agree; }
static double m_ppl_full(const fid_results *r, int i) { (void)i; return r->ppl_full; }
static double m_ppl_evict(const fid_results *r, int i) { return r->c[i].ppl_evict; }
static double m_d_ppl(const fid_results *r, int i) { return r->c[i].ppl_evict - r->ppl_full; }
static double m_err(const fid_results *r, int i) { return r->c[i].out_rel_err_mean; }
static double m_recall(const fid_results *r, int i) { return r->c[i].attn_recall_mean; }
static double m_ans_full(const fid_results *r, int i) { (void)i; return r->answer_logprob_full; }
static double m_ans_evict(const fid_results *r, int i) { return r->c[i].answer_logprob; }
static double m_ans_delta(const fid_results *r, int i) { return r->c[i].answer_logprob - r->answer_logprob_full; }
static double m_match_full(const fid_results *r, int i) { (void)i; return r->exact_match_full; }
static double m_match_evict(const fid_results *r, int i) { return r->c[i].exact_match; }

typedef struct {
    const char *name;
    fid_metric_fn fn;
    bool answer;             /* over the prompts with an answer only */
} fid_metric;

static const fid_metric METRICS[] = {
    {"kl_mean", m_kl_mean, false},       {"kl_p95", m_kl_p95, false},
    {"greedy_agree", m_agree, false},    {"ppl_full", m_ppl_full, false},
    {"ppl_evict", m_ppl_evict, false},   {"d_ppl", m_d_ppl, false},
    {"out_rel_err_mean", m_err, false},  {"attn_recall_mean", m_recall, false},
    {"answer_logprob_full", m_ans_full, true}, {"answer_logprob_evict", m_ans_evict, true},
    {"answer_logprob_delta", m_ans_delta, true}, {"exact_match_full", m_match_full, true},
    {"exact_match_evict", m_match_evict, true},
};
enum { N_METRICS = sizeof METRICS / sizeof METRICS[0] };

typedef struct {
    const prompt_list *l;
    fid_results *r;          /* [l->n] */
    int n_answers;
} fid_study;

/* DIR/fidelity.csv: every prompt's fidelity.csv rows, the prompt id first. */
static int write_rows(const fidelity_opts *o, const fid_study *st, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &FID_SCHEMA_PROMPT_ROWS, err);
    if (!f) return err->code;
    for (int k = 0; k < st->l->n; k++)
        for (int i = 0; i < st->r[k].n; i++) {
            const fid_results *r = &st->r[k];
            const fid_config *c = &r->c[i];
            results_row w = results_row_begin(f, &FID_SCHEMA_PROMPT_ROWS);
            results_row_text(&w, st->l->p[k].id), fid_config_key(&w, c), fid_config_measures(&w, o, r, c);
            results_row_int(&w, r->T), results_row_int(&w, r->prompt_len);
            results_row_end(&w);
        }
    char what[4400];
    snprintf(what, sizeof what, "%s/fidelity.csv", dir);
    return csv_close(f, what, err);
}

/* DIR/answer.csv: per prompt with an answer and configuration, the answer's log-probability. */
static int write_answers(const fid_study *st, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &FID_SCHEMA_ANSWERS, err);
    if (!f) return err->code;
    for (int k = 0; k < st->l->n; k++) {
        const fid_results *r = &st->r[k];
        if (!r->answer_tokens) continue;
        for (int i = 0; i < r->n; i++) {
            results_row w = results_row_begin(f, &FID_SCHEMA_ANSWERS);
            results_row_text(&w, st->l->p[k].id), fid_config_key(&w, &r->c[i]), results_row_int(&w, r->c[i].chunk);
            results_row_int(&w, prompt_answer(&st->l->p[k])->start), results_row_int(&w, r->answer_tokens);
            results_row_real(&w, r->answer_logprob_full), results_row_real(&w, r->c[i].answer_logprob);
            results_row_real(&w, r->c[i].answer_logprob - r->answer_logprob_full);
            results_row_int(&w, r->answer_rank_full), results_row_int(&w, r->c[i].answer_rank);
            results_row_int(&w, r->exact_match_full), results_row_int(&w, r->c[i].exact_match);
            results_row_quoted(&w, r->continuation_full), results_row_quoted(&w, r->c[i].continuation);
            results_row_end(&w);
        }
    }
    char what[4400];
    snprintf(what, sizeof what, "%s/answer.csv", dir);
    return csv_close(f, what, err);
}

/* One metric's mean and interval of configuration i over the prompts (those with an answer for an answer metric). */
static void metric_ci(const fid_study *st, const fid_metric *m, int i, double *x, const int32_t *idx_all,
                      const int32_t *idx_ans, double out[3])
{
    int n = 0;
    for (int k = 0; k < st->l->n; k++)
        if (!m->answer || st->r[k].answer_tokens) x[n++] = m->fn(&st->r[k], i);
    if (n == 0) {
        out[0] = out[1] = out[2] = NAN;
        return;
    }
    if (!idx_all) { /* the mean alone */
        out[0] = 0.0;
        for (int j = 0; j < n; j++) out[0] += x[j];
        out[0] /= n, out[1] = out[2] = NAN;
        return;
    }
    study_mean_ci(x, n, m->answer ? idx_ans : idx_all, &out[0], &out[1], &out[2]);
}

/* DIR/summary.csv: per configuration, each metric's mean over prompts and its 95% bootstrap interval. */
static int write_summary(const fid_study *st, const char *dir, kv_err *err)
{
    const int n = st->l->n;
    int32_t *idx_all = study_resamples(n, err), *idx_ans = idx_all ? study_resamples(st->n_answers, err) : NULL;
    double *x = idx_ans ? kv_calloc((size_t)n, sizeof *x, "summary", err) : NULL;
    FILE *f = x ? results_schema_create(dir, &FID_SCHEMA_PROMPT_SUMMARY, err) : NULL;
    if (!f) {
        free(idx_all), free(idx_ans), free(x);
        return err->code;
    }
    for (int i = 0; i < st->r[0].n; i++) {
        results_row w = results_row_begin(f, &FID_SCHEMA_PROMPT_SUMMARY);
        fid_config_key(&w, &st->r[0].c[i]), results_row_int(&w, st->r[0].c[i].chunk);
        results_row_int(&w, n), results_row_int(&w, st->n_answers);
        for (int j = 0; j < N_METRICS; j++) {
            double v[3];
            metric_ci(st, &METRICS[j], i, x, idx_all, idx_ans, v);
            for (int q = 0; q < 3; q++) results_row_real(&w, v[q]);
        }
        results_row_end(&w);
    }
    free(idx_all), free(idx_ans), free(x);
    char what[4400];
    snprintf(what, sizeof what, "%s/summary.csv", dir);
    return csv_close(f, what, err);
}

/* The prompts with an answer that the full-cache model answers (exact match). */
static int full_matches(const fid_study *st)
{
    int k = 0;
    for (int p = 0; p < st->l->n; p++) k += st->r[p].answer_tokens > 0 && st->r[p].exact_match_full;
    return k;
}

/* Whether the full-cache model fails most prompts with an answer (then the answer measures say
 * little about eviction): the sentence that says so into msg. */
static bool full_fails(const fid_study *st, char *msg, size_t cap)
{
    const int k = full_matches(st);
    if (st->n_answers == 0 || 2 * k >= st->n_answers) return false;
    snprintf(msg, cap, "the full-cache model answers only %d of %d prompts (exact match): the task is beyond "
             "this model, so what eviction does to the answer says little", k, st->n_answers);
    return true;
}

/* The table on stdout: the means over prompts per configuration. */
static void print_study(const fid_study *st)
{
    const fid_results *r0 = &st->r[0];
    printf("%d prompts (%d with an answer); means over prompts\n", st->l->n, st->n_answers);
    printf("%-12s %-24s %6s %5s %11s %7s %9s %14s %7s\n", "policy", "allocator", "N", "B", "kl_mean", "agree",
           "d_ppl", "answer_logp_Δ", "match");
    double *x = malloc(sizeof *x * (size_t)st->l->n);
    if (!x) return;
    for (int i = 0; i < r0->n; i++) {
        double kl[3], ag[3], dp[3], an[3], em[3];
        metric_ci(st, &METRICS[0], i, x, NULL, NULL, kl);
        metric_ci(st, &METRICS[2], i, x, NULL, NULL, ag);
        metric_ci(st, &METRICS[5], i, x, NULL, NULL, dp);
        metric_ci(st, &METRICS[10], i, x, NULL, NULL, an);
        metric_ci(st, &METRICS[12], i, x, NULL, NULL, em);
        printf("%-12s %-24s %6lld %5lld %11.4g %6.1f%% %9.4f %14.4f %6.1f%%\n", r0->c[i].pc->iface->name,
               r0->c[i].alloc, (long long)r0->c[i].budget, (long long)r0->c[i].chunk, kl[0], 100.0 * ag[0], dp[0], an[0], 100.0 * em[0]);
    }
    free(x);
}

/* A mean and its interval as "m [lo, hi]" into the report (blank when there is none). */
static void html_ci(FILE *f, const double v[3])
{
    if (isnan(v[0])) fputs("<td></td>", f);
    else if (isnan(v[1])) fprintf(f, "<td class=\"num\">%.4g</td>", v[0]);
    else fprintf(f, "<td class=\"num\">%.4g [%.4g, %.4g]</td>", v[0], v[1], v[2]);
}

/* DIR/report.html: the means over prompts with their intervals, per configuration. */
static int write_report(const fidelity_opts *o, const fid_study *st, const char *dir, kv_err *err)
{
    static const int SHOWN[] = {0, 2, 5, 6, 9, 10, 12}; /* kl_mean, greedy_agree, d_ppl, out_rel_err, answer evict,
                                                           delta, exact match evict */
    const int n = st->l->n;
    int32_t *idx_all = study_resamples(n, err), *idx_ans = idx_all ? study_resamples(st->n_answers, err) : NULL;
    double *x = idx_ans ? kv_calloc((size_t)n, sizeof *x, "report", err) : NULL;
    char path[4400];
    snprintf(path, sizeof path, "%s/report.html", dir);
    FILE *f = x ? fopen(path, "w") : NULL;
    if (!f) {
        free(idx_all), free(idx_ans), free(x);
        return x ? kv_fail(err, KV_EFAIL, "%s: cannot create", path) : err->code;
    }
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>kvtrace fidelity over prompts"
          "</title>\n<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
          "table{border-collapse:collapse;font-size:.92em}th,td{border:1px solid #ddd;padding:.25em .6em}"
          "th{background:#f4f4f4}td.num{text-align:right}.warn{color:#a00}</style>\n</head>\n<body>\n"
          "<h1>Fidelity over prompts</h1>\n<p>Model <code>", f);
    plot_html_escape(f, o->seq.model);
    fputs("</code>, prompts <code>", f);
    plot_html_escape(f, o->prompts);
    double v[3];
    metric_ci(st, &METRICS[8], 0, x, idx_all, idx_ans, v);
    fprintf(f, "</code>: %d prompts, %d with an answer (full-cache answer log-probability, mean over them: %.4g). "
               "Means over prompts (each weighs 1) with 95%% percentile bootstrap intervals (%d resamples, seed "
               "%u). Each prompt's own report: <code>ID/report.html</code>.</p>\n", n, st->n_answers, v[0],
            STUDY_BOOT_RESAMPLES, STUDY_BOOT_SEED);
    char warning[512];
    if (full_fails(st, warning, sizeof warning)) {
        fputs("<p class=\"warn\"><strong>", f), plot_html_escape(f, warning), fputs("</strong></p>\n", f);
    } else if (st->n_answers) {
        fprintf(f, "<p>The full-cache model answers %d of %d prompts (exact match).</p>\n", full_matches(st),
                st->n_answers);
    }
    fputs("<table><tr><th>policy</th><th>params</th><th>allocator</th><th>N</th><th>B</th><th>KL mean</th><th>greedy agree</th>"
          "<th>&Delta; ppl</th><th>out_rel_err</th><th>answer log p</th><th>&Delta; answer log p</th>"
          "<th>exact match</th></tr>\n", f);
    for (int i = 0; i < st->r[0].n; i++) {
        const fid_config *c = &st->r[0].c[i];
        fputs("<tr><td>", f), plot_html_escape(f, c->pc->iface->name), fputs("</td><td>", f);
        plot_html_escape(f, c->pc->canonical), fputs("</td><td>", f), plot_html_escape(f, c->alloc);
        fprintf(f, "</td><td class=\"num\">%lld</td><td class=\"num\">%lld</td>", (long long)c->budget,
                (long long)c->chunk);
        for (size_t j = 0; j < sizeof SHOWN / sizeof SHOWN[0]; j++) {
            metric_ci(st, &METRICS[SHOWN[j]], i, x, idx_all, idx_ans, v);
            html_ci(f, v);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n<p>Files: fidelity.csv (per prompt and configuration), answer.csv (the answer's "
          "log-probability per prompt and configuration), summary.csv (means and intervals).</p>\n</body>\n</html>\n", f);
    free(idx_all), free(idx_ans), free(x);
    return csv_close(f, path, err);
}

/* Prompt k of the file: its fidelity study into DIR/ID (tmp: the output's temporary directory). */
static int run_prompt(const fidelity_opts *o, const kv_model *m, fid_study *st, int k, const char *tmp, kv_err *err)
{
    const prompt_item *it = &st->l->p[k];
    char dir[4400], shown[4400];
    snprintf(dir, sizeof dir, "%s/%s", tmp, it->id);
    snprintf(shown, sizeof shown, "%s/%s", o->output, it->id);
    if (mkdir(dir, 0777) != 0) return kv_fail(err, KV_EFAIL, "%s: cannot create", dir);
    fidelity_opts one = *o;
    one.loaded = m, one.prompts = NULL, one.output = shown, one.prov = NULL, one.quiet = true;
    one.seq.ids = it->ids, one.seq.n_ids = it->n_ids, one.seq.prompt = prompt_item_source(it);
    if (it->generate >= 0) one.seq.generate = it->generate;
    const trace_span *a = prompt_answer(it);
    one.seq.answer_start = a ? a->start : 0, one.seq.answer_end = a ? a->end : 0;
    if (!o->quiet) fprintf(stderr, "kvtrace: fidelity: prompt %d/%d: %s\n", k + 1, st->l->n, it->id);
    int rc = fidelity_one(&one, dir, &st->r[k], err);
    if (!rc && a) st->n_answers++;
    return rc;
}

static int run_all(const fidelity_opts *o, const kv_model *m, fid_study *st, kv_err *err)
{
    kv_outfile out;
    int rc = outdir_begin(&out, o->output, o->force, err);
    if (rc) return rc;
    for (int k = 0; !rc && k < st->l->n; k++) rc = run_prompt(o, m, st, k, out.tmp_path, err);
    if (!rc) rc = write_rows(o, st, out.tmp_path, err);
    if (!rc) rc = write_answers(st, out.tmp_path, err);
    if (!rc) rc = write_summary(st, out.tmp_path, err);
    if (!rc && o->prov) rc = prov_write_json(o->prov, out.tmp_path, err);
    if (!rc) rc = write_report(o, st, out.tmp_path, err);
    if (!rc) rc = outdir_commit(&out, err);
    else outdir_abort(&out);
    return rc;
}

int fidelity_prompts(const fidelity_opts *o, kv_err *err)
{
    prompt_list l;
    const char *inputs[] = {o->prompts, o->seq.model, o->seq.tokenizer, o->head_scores};
    int rc = fid_check_online(o, err);
    if (!rc) rc = outfile_check_inputs(o->output, inputs, 4, err);
    if (!rc) rc = prompts_read(o->prompts, &l, err);
    if (rc) return rc;
    kv_model model;
    memset(&model, 0, sizeof model);
    fid_study st = {.l = &l};
    rc = model_load(o->seq.model, o->seq.tokenizer, &model, err);
    if (!rc) rc = prompts_tokenize(&l, o->prompts, &model, &o->seq.prompt.chat, err);
    if (!rc && o->prov) rc = capture_provenance(o->prov, o->seq.model, o->seq.tokenizer, &o->seq.prompt, err);
    if (!rc && o->prov) rc = prov_set_text(&o->prov->prompt, "prompts", err);
    if (!rc && o->prov) rc = prov_add_file(o->prov, "prompts", o->prompts, NULL, err);
    if (!rc && !(st.r = kv_calloc((size_t)l.n, sizeof *st.r, "fidelity results", err))) rc = err->code;
    if (!rc) rc = run_all(o, &model, &st, err);
    char warning[512];
    if (!rc && !o->quiet && full_fails(&st, warning, sizeof warning)) fprintf(stderr, "kvtrace: fidelity: note: %s\n", warning);
    if (!rc) print_study(&st);
    for (int k = 0; st.r && k < l.n; k++) fid_results_free(&st.r[k]);
    free(st.r);
    model_free(&model);
    prompts_free(&l);
    return rc;
}
