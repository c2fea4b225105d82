/* analyze_study: `kvtrace analyze` over a study (docs/analyze.md#a-study-several-traces-or-several-chunk-sizes).
 * The traces are named as sim takes them (study/); the results directory
 * holds their runs, each with @trace and @chunk. Every (trace, chunk) gets
 * the analysis of one trace, in OUT/traces/ID/chunkB/, through analyze.c;
 * their numbers are kept and OUT/study_spearman.csv and OUT/study_logdet.csv
 * give each one's mean over traces (each trace weighing 1) with the 95%
 * percentile bootstrap interval of sim's summary.csv (study/bootstrap.c, the
 * resamples shared by every statistic). sim's CSVs are copied to OUT. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "analysis/analyze_ctx.h"
#include "analysis/fidelity_join.h"
#include "analysis/paired.h"
#include "core/csv.h"
#include "core/outfile.h"
#include "results/results_dir.h"
#include "results/results_row.h"
#include "results/results_schema.h"
#include "study/study.h"

typedef struct {
    const analyze_opts *o;
    study_set set;         /* the traces (the caller's, a copy of the struct: not freed here) */
    int64_t *chunks;       /* [n_chunks] the results' chunks, in order of first appearance */
    int n_chunks;
    bool by_id;            /* the results' runs carry the traces' ids (else: one trace, runs without @trace) */
    analyze_ctx *a;        /* [n traces][n_chunks] each analysis, kept for the means */
    int32_t *idx;          /* the bootstrap's resamples */
    const char *outdir;
} study_ctx;

/* The chunks of the results, and a check that its traces are the study's. */
static int scan_results(study_ctx *s, kv_err *err)
{
    const char *dir = s->o->results;
    results_set rs;
    const results_select attrs = {.attrs_only = true};
    int rc = results_read_select(dir, 0, 0, 0, &attrs, &rs, err);
    if (rc) return rc;
    s->chunks = kv_calloc((size_t)rs.n_runs + 1, sizeof *s->chunks, "chunks", err);
    rc = s->chunks ? KV_OK : err->code;
    s->by_id = !(s->set.n == 1 && rs.n_runs > 0 && !rs.runs[0].trace[0]);
    for (int r = 0; !rc && r < rs.n_runs; r++) {
        int c = 0;
        while (c < s->n_chunks && s->chunks[c] != rs.runs[r].chunk) c++;
        if (c == s->n_chunks) s->chunks[s->n_chunks++] = rs.runs[r].chunk;
        int t = 0;
        while (s->by_id && t < s->set.n && strcmp(s->set.t[t].id, rs.runs[r].trace) != 0) t++;
        if (t == s->set.n)
            rc = kv_fail(err, KV_EINPUT, "%s: /runs/%s is of trace '%s', which is not among the %d trace(s) given",
                         rs.path, rs.runs[r].name, rs.runs[r].trace, s->set.n);
    }
    for (int t = 0; !rc && s->by_id && t < s->set.n; t++) {
        int r = 0;
        while (r < rs.n_runs && strcmp(s->set.t[t].id, rs.runs[r].trace) != 0) r++;
        if (r == rs.n_runs)
            rc = kv_fail(err, KV_EINPUT, "%s: no run of trace '%s' (%s): were these results simulated on another "
                         "study?", rs.path, s->set.t[t].id, s->set.t[t].path);
    }
    if (!rc && rs.n_runs == 0) rc = kv_fail(err, KV_EINPUT, "%s: no runs", rs.path);
    results_free(&rs);
    return rc;
}

/* Trace t's runs at chunk c must be trace 0's, in the same order: the means
 * pair them by position. */
static int check_same_runs(const study_ctx *s, int t, int c, kv_err *err)
{
    const analyze_ctx *a = &s->a[t * s->n_chunks + c], *z = &s->a[c];
    bool same = a->rs.n_runs == z->rs.n_runs && a->L == z->L && a->H == z->H && a->K == z->K;
    for (int r = 0; same && r < a->rs.n_runs; r++) {
        const results_run *x = &a->rs.runs[r], *y = &z->rs.runs[r];
        same = x->budget == y->budget && strcmp(x->config, y->config) == 0 && strcmp(x->allocator, y->allocator) == 0;
    }
    if (same) return KV_OK;
    return kv_fail(err, KV_EINPUT, "%s: the runs of trace '%s' at chunk %lld are not those of trace '%s' (or the "
                   "traces' shapes differ): a study's means need the same configurations on every trace",
                   a->rs.path, s->set.t[t].id, (long long)s->chunks[c], s->set.t[0].id);
}

/* Every (trace, chunk) analysis, into OUTDIR/traces/ID/chunkB. */
static int analyze_all(study_ctx *s, analyze_opts *sub, kv_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/traces", s->outdir);
    int rc = mkdir(path, 0777) == 0 ? KV_OK : kv_fail(err, KV_EFAIL, "%s: cannot create: %s", path, strerror(errno));
    for (int t = 0; !rc && t < s->set.n; t++) {
        snprintf(path, sizeof path, "%s/traces/%s", s->outdir, s->set.t[t].id);
        if (mkdir(path, 0777) != 0) rc = kv_fail(err, KV_EFAIL, "%s: cannot create: %s", path, strerror(errno));
        if (!rc && !s->o->quiet)
            fprintf(stderr, "kvtrace: analyze: trace %d/%d: %s\n", t + 1, s->set.n, s->set.t[t].id);
        for (int c = 0; !rc && c < s->n_chunks; c++) {
            analyze_ctx *a = &s->a[t * s->n_chunks + c];
            sub[c].trace = s->set.t[t].path;
            sub[c].sel_trace = s->by_id ? s->set.t[t].id : NULL;
            a->o = &sub[c], a->no_warnings = c > 0;
            snprintf(path, sizeof path, "%s/traces/%s/chunk%lld", s->outdir, s->set.t[t].id, (long long)s->chunks[c]);
            rc = analyze_into(a, path, err);
            if (!rc && a->tr) rc = study_check_tokens(&s->set, t, trace_get_meta(a->tr)->n_tokens, err);
            if (!rc) rc = check_same_runs(s, t, c, err);
            if (a->tr) trace_close(a->tr), a->tr = NULL;   /* the numbers stay, the file need not */
        }
    }
    return rc;
}

/* mean, n_traces, ci_lo, ci_hi of values[t] = get(analysis of trace t). */
static void mean_ci(const study_ctx *s, int c, double (*get)(const analyze_ctx *, size_t), size_t at, double *x,
                    double out[3])
{
    for (int t = 0; t < s->set.n; t++) x[t] = get(&s->a[t * s->n_chunks + c], at);
    study_mean_ci(x, s->set.n, s->idx, &out[0], &out[1], &out[2]);
}

static double get_rho_pair(const analyze_ctx *a, size_t i) { return a->rho_pair[i]; }
static double get_rho_anchor(const analyze_ctx *a, size_t i) { return a->rho_anchor[i]; }
static double get_logdet_full(const analyze_ctx *a, size_t i) { return a->logdet_full[i]; }
static double get_logdet_run(const analyze_ctx *a, size_t i) { return a->logdet_runs[i]; }

/* study_spearman.csv: ρ per (layer, query head), the mean over traces (it does not depend on the chunk). */
static int write_spearman(const study_ctx *s, double *x, kv_err *err)
{
    FILE *f = results_schema_create(s->outdir, &RESULTS_SCHEMA_STUDY_SPEARMAN, err);
    if (!f) return err->code;
    const analyze_ctx *z = &s->a[0];
    bool colsum = true;
    for (int t = 0; t < s->set.n; t++) colsum = colsum && s->a[t * s->n_chunks].has_colsum;
    for (int64_t i = 0; colsum && i < z->L * z->H; i++) {
        double p[3], q[3];
        mean_ci(s, 0, get_rho_pair, (size_t)i, x, p);
        mean_ci(s, 0, get_rho_anchor, (size_t)i, x, q);
        results_row w = results_row_begin(f, &RESULTS_SCHEMA_STUDY_SPEARMAN);
        results_row_int(&w, i / z->H), results_row_int(&w, i % z->H), results_row_int(&w, i % z->H / (z->H / z->K));
        results_row_real(&w, p[0]), results_row_real(&w, q[0]), results_row_int(&w, s->set.n);
        results_row_real(&w, p[1]), results_row_real(&w, p[2]), results_row_real(&w, q[1]), results_row_real(&w, q[2]);
        results_row_end(&w);
    }
    return csv_close(f, "study_spearman.csv", err);
}

/* study_logdet.csv's cells after the run's: layer, kv_head, the mean, n_traces, the interval; the row's end. */
static void logdet_cells(results_row *w, const study_ctx *s, int64_t layer, int64_t kv_head, const double m[3])
{
    results_row_int(w, layer), results_row_int(w, kv_head), results_row_real(w, m[0]);
    results_row_int(w, s->set.n), results_row_real(w, m[1]), results_row_real(w, m[2]);
    results_row_end(w);
}

/* study_logdet.csv: the full cache's log-det per (layer, kv head) (budget and
 * chunk empty: T differs between traces), then each run's per chunk. */
static int write_logdet(const study_ctx *s, double *x, kv_err *err)
{
    FILE *f = results_schema_create(s->outdir, &RESULTS_SCHEMA_STUDY_LOGDET, err);
    if (!f) return err->code;
    const analyze_ctx *z = &s->a[0];
    const int64_t LK = z->L * z->K;
    double m[3];
    for (int64_t i = 0; i < LK; i++) {
        mean_ci(s, 0, get_logdet_full, (size_t)i, x, m);
        results_row w = results_row_begin(f, &RESULTS_SCHEMA_STUDY_LOGDET);
        results_row_text(&w, "full_cache"), results_row_text(&w, "full_cache"), results_row_text(&w, "");
        results_row_none(&w), results_row_text(&w, RESULTS_ALLOC_NONE), results_row_fraction(&w, NAN);
        results_row_none(&w);
        logdet_cells(&w, s, i / z->K, i % z->K, m);
    }
    for (int c = 0; c < s->n_chunks; c++) {
        const analyze_ctx *zc = &s->a[c];
        for (int r = 0; r < zc->rs.n_runs; r++) {
            const results_run *run = &zc->rs.runs[r];
            for (int64_t i = 0; i < LK; i++) {
                mean_ci(s, c, get_logdet_run, (size_t)r * (size_t)LK + (size_t)i, x, m);
                results_row w = results_row_begin(f, &RESULTS_SCHEMA_STUDY_LOGDET);
                aout_run_cells(&w, run);
                results_row_int(&w, s->chunks[c]);
                logdet_cells(&w, s, i / z->K, i % z->K, m);
            }
        }
    }
    return csv_close(f, "study_logdet.csv", err);
}

/* sim's spans.csv and spans_summary.csv (when the traces have spans), before
 * they are copied: their schemas, and the runs of every chunk's analysis. */
static int check_spans(const study_ctx *s, kv_err *err)
{
    results_runs runs = {0};
    int rc = KV_OK;
    for (int c = 0; !rc && c < s->n_chunks; c++)
        for (int r = 0; !rc && r < s->a[c].rs.n_runs; r++) {
            const results_run *run = &s->a[c].rs.runs[r];
            if (results_runs_add(&runs, run->config, run->allocator, run->budget, err) < 0) rc = KV_EFAIL;
        }
    const results_dims dims = {.L = s->a[0].L, .H = s->a[0].H, .K = s->a[0].K, .T = s->a[0].T};
    if (!rc) rc = results_check_spans(s->o->results, &dims, &runs, err);
    results_runs_free(&runs);
    return rc;
}

/* The means, sim's CSVs copied, provenance.json. */
static int write_study(study_ctx *s, kv_err *err)
{
    double *x = kv_calloc((size_t)s->set.n, sizeof *x, "study", err);
    s->idx = x ? study_resamples(s->set.n, err) : NULL;
    int rc = s->idx ? KV_OK : err->code;
    if (!rc) rc = write_spearman(s, x, err);
    if (!rc) rc = write_logdet(s, x, err);
    if (!rc) rc = check_spans(s, err);
    static const char *const COPIES[] = {RESULTS_FILE_SUMMARY, RESULTS_FILE_SUMMARY_BY_TRACE, RESULTS_FILE_TIMING,
                                         RESULTS_FILE_CSV, RESULTS_FILE_SPANS, RESULTS_FILE_SPANS_SUMMARY};
    for (int i = 0; !rc && i < 6; i++) {
        bool copied;
        rc = results_copy_file(s->o->results, COPIES[i], s->outdir, &copied, err);
    }
    /* meta.csv: the longest trace's, so that plot's ranges (positions < T) hold for every trace's rows */
    int longest = 0;
    for (int t = 1; t < s->set.n; t++)
        if (s->a[t * s->n_chunks].T > s->a[longest * s->n_chunks].T) longest = t;
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/traces/%s/chunk%lld", s->outdir, s->set.t[longest].id, (long long)s->chunks[0]);
    bool copied;
    if (!rc) rc = results_copy_file(dir, "meta.csv", s->outdir, &copied, err);
    /* budgets.csv: the first trace's (whose budgets summary.csv's rows carry: a fraction of T gives each trace
     * its own N), for figure 8; every trace's stays in its traces/ID/chunkB/ */
    snprintf(dir, sizeof dir, "%s/traces/%s/chunk%lld", s->outdir, s->set.t[0].id, (long long)s->chunks[0]);
    if (!rc) rc = results_copy_file(dir, "budgets.csv", s->outdir, &copied, err);
    if (!rc && s->o->prov) rc = prov_write_json(s->o->prov, s->outdir, err);
    free(x);
    return rc;
}

/* Before any output: every trace's sha256 against the index (hashed into the record by the command line). */
static int check_hashes(const study_ctx *s, kv_err *err)
{
    int rc = KV_OK;
    for (int i = 0; !rc && i < s->set.n; i++)
        for (int j = 0; !rc && s->o->prov && j < s->o->prov->n_inputs; j++)
            if (strcmp(s->o->prov->inputs[j].role, "trace") == 0 &&
                strcmp(s->o->prov->inputs[j].path, s->set.t[i].path) == 0)
                rc = study_check_sha256(&s->set, i, s->o->prov->inputs[j].sha256, err);
    return rc;
}

int analyze_study_run(const analyze_opts *o, const study_set *set, kv_err *err)
{
    study_ctx s = {.o = o, .set = *set};
    if (!o->results) return kv_fail(err, KV_EUSAGE, "analyze: several traces need --results DIR (a sim run over them)");
    if (o->n_results > 1)
        return kv_fail(err, KV_EUSAGE, "analyze: a study's analysis takes one --results directory (repeated "
                       "--results are merged for one trace only)");
    int rc = check_hashes(&s, err);
    if (!rc) rc = scan_results(&s, err);
    const char *inputs[3] = {o->results, o->fidelity, s.set.index};
    if (!rc) rc = outfile_check_inputs(o->output, inputs, s.set.index ? 3 : 2, err);
    for (int t = 0; !rc && t < s.set.n; t++) {
        const char *one[1] = {s.set.t[t].path};
        rc = outfile_check_inputs(o->output, one, 1, err);
    }
    analyze_opts *sub = rc ? NULL : kv_calloc((size_t)s.n_chunks, sizeof *sub, "analyze", err);
    s.a = sub ? kv_calloc((size_t)(s.set.n * s.n_chunks), sizeof *s.a, "analyze", err) : NULL;
    if (!rc && !s.a) rc = err->code;
    for (int c = 0; !rc && c < s.n_chunks; c++) {
        sub[c] = *o;
        sub[c].prov = NULL, sub[c].quiet = true, sub[c].sel_chunk = s.chunks[c];
        sub[c].output = NULL;
    }
    kv_outfile out;
    bool started = false;
    if (!rc) rc = outdir_begin(&out, o->output, o->force, err), started = rc == KV_OK;
    if (!rc) s.outdir = out.tmp_path, rc = analyze_all(&s, sub, err);
    if (!rc) rc = write_study(&s, err);
    if (!rc && o->baseline) rc = analyze_paired(o->results, o->baseline, s.outdir, err);
    if (!rc && o->fidelity) rc = analyze_fidelity_join(o->results, o->fidelity, s.outdir, o->quiet, err);
    if (!rc) rc = outdir_commit(&out, err);
    else if (started) outdir_abort(&out);
    if (!rc && !o->quiet)
        printf("analyze: %d trace(s) x %d chunk(s), %d run(s) each -> %s\n", s.set.n, s.n_chunks, s.a[0].rs.n_runs,
               o->output);
    for (int i = 0; s.a && i < s.set.n * s.n_chunks; i++) analyze_ctx_free(&s.a[i]);
    free(s.a), free(sub), free(s.chunks), free(s.idx);
    return rc;
}
