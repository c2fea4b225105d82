/* analyze: the driver. Opens the trace (and the results directory), then per
 * layer: reads its keys and column sums on this thread, runs one work item per
 * kv head on threads (Spearman x once per kv head and ρ for each of its query
 * heads, log-det of the full cache and of every run's final cache, PCA), and
 * appends the layer's rows to pca.csv. The small per-(layer, head) results go
 * to the other CSVs at the end, then the detail matrices. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "analysis/analyze_ctx.h"
#include "analysis/fidelity_join.h"
#include "analysis/paired.h"
#include "analysis/logdet.h"
#include "analysis/spearman.h"
#include "core/csv.h"
#include "core/outfile.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "results/results_dir.h"
#include "results/results_schema.h"

/* One thread's scratch: O(T·D). */
typedef struct {
    double *pca;                 /* pca_scratch doubles */
    double *x_pair, *x_anchor;   /* [T] */
    double *y, *ranks;           /* [T], [2T] */
    int64_t *idx;                /* [T] */
    float *gather;               /* [T][D]: one run's kept keys */
    double *ld;                  /* [D][D] log-det scratch */
    double *mu;                  /* [D] */
    float *imp;                  /* head_importance_scratch floats */
} thread_scratch;

static void scratch_free(thread_scratch *s)
{
    free(s->pca), free(s->x_pair), free(s->x_anchor), free(s->y), free(s->ranks);
    free(s->idx), free(s->gather), free(s->ld), free(s->mu), free(s->imp);
}

static int scratch_alloc(thread_scratch *s, int64_t T, int64_t D, kv_err *err)
{
    memset(s, 0, sizeof *s);
    const char *w = "analyze scratch";
    if (!(s->pca = kv_calloc((size_t)pca_scratch(T, D), sizeof(double), w, err)) ||
        !(s->x_pair = kv_calloc((size_t)T, sizeof(double), w, err)) ||
        !(s->x_anchor = kv_calloc((size_t)T, sizeof(double), w, err)) ||
        !(s->y = kv_calloc((size_t)T, sizeof(double), w, err)) ||
        !(s->ranks = kv_calloc((size_t)(2 * T), sizeof(double), w, err)) ||
        !(s->idx = kv_calloc((size_t)T, sizeof(int64_t), w, err)) ||
        !(s->gather = kv_calloc((size_t)(T * D), sizeof(float), w, err)) ||
        !(s->ld = kv_calloc((size_t)(D * D), sizeof(double), w, err)) ||
        !(s->mu = kv_calloc((size_t)D, sizeof(double), w, err)) ||
        !(s->imp = kv_calloc((size_t)head_importance_scratch(T), sizeof(float), w, err))) {
        scratch_free(s);
        return err->code;
    }
    return KV_OK;
}

typedef struct {
    analyze_ctx *c;
    int64_t l;
    float *keys;           /* [K][T][D] */
    float *colsum;         /* [H][T], or NULL */
    float *queries;        /* [H][T][D], or NULL */
    float *lse, *rmax;     /* [H][T] /attention/lse and /attention/max, or NULL */
    double *pc;            /* [K][T][2] */
    thread_scratch *s;     /* [threads] */
    int *rc;               /* [K] */
    kv_err *errs;          /* [K] */
} layer_job;

/* ρ_pairwise and ρ_anchor of every query head of kv head g. */
static void item_spearman(const layer_job *job, int64_t g, thread_scratch *s)
{
    analyze_ctx *c = job->c;
    const int64_t T = c->T, D = c->D, G = c->H / c->K;
    const float *keys = job->keys + g * T * D;
    spearman_x_pairwise(keys, T, D, s->mu, s->x_pair);
    spearman_x_anchor(keys, T, D, false, s->mu, s->x_anchor);
    for (int64_t h = g * G; h < (g + 1) * G; h++) {
        spearman_y(job->colsum + h * T, T, s->y);
        c->rho_pair[job->l * c->H + h] = spearman_rho(s->x_pair, s->y, T, s->ranks, s->idx);
        c->rho_anchor[job->l * c->H + h] = spearman_rho(s->x_anchor, s->y, T, s->ranks, s->idx);
    }
}

/* Log-det of the full cache and of each run's final cache of kv head g. */
static void item_logdet(const layer_job *job, int64_t g, thread_scratch *s)
{
    analyze_ctx *c = job->c;
    const int64_t T = c->T, D = c->D, LK = c->L * c->K, at = job->l * c->K + g;
    const float *keys = job->keys + g * T * D;
    c->logdet_full[at] = logdet_keys(keys, T, D, s->ld);
    for (int r = 0; r < c->rs.n_runs; r++) {
        const results_run *run = &c->rs.runs[r];
        const int32_t *row = run->retained + at * run->width;
        const int64_t n = run->n_kept[at];
        for (int64_t i = 0; i < n; i++) memcpy(s->gather + i * D, keys + (int64_t)row[i] * D, sizeof(float) * (size_t)D);
        c->logdet_runs[(size_t)r * (size_t)LK + (size_t)at] = logdet_keys(s->gather, n, D, s->ld);
    }
}

static void run_item(void *ctx, int item, int thread)
{
    layer_job *job = ctx;
    analyze_ctx *c = job->c;
    thread_scratch *s = &job->s[thread];
    const int64_t g = item, T = c->T, D = c->D;
    if (c->has_colsum) item_spearman(job, g, s);
    item_logdet(job, g, s);
    const int64_t G = c->H / c->K;
    head_importance *imp = &c->importance[job->l * c->K + g];
    if (c->has_row_stats)
        head_importance_kv_recorded(job->queries + g * G * T * D, G, job->keys + g * T * D, job->lse + g * G * T,
                                    job->rmax + g * G * T, T, D, c->o->sinks, c->o->recent, s->imp, imp);
    else if (c->has_queries)
        head_importance_kv(job->queries + g * G * T * D, G, job->keys + g * T * D, T, D, c->o->sinks, c->o->recent,
                           s->imp, imp);
    int info = pca_keys(job->keys + g * T * D, T, D, s->pca, &c->pca[job->l * c->K + g], job->pc + g * T * 2, NULL);
    if (info)
        job->rc[g] = kv_fail(&job->errs[g], KV_EFAIL, "analyze: PCA eigensolver failed for layer %lld kv head %lld "
                             "(LAPACKE_dsyevr info %d)", (long long)job->l, (long long)g, info);
}

/* Reads layer l (this thread), runs its kv heads on threads, appends pca.csv rows. */
static int run_layer(layer_job *job, int threads, FILE *pca_csv, kv_err *err)
{
    analyze_ctx *c = job->c;
    const int64_t T = c->T, D = c->D, l = job->l;
    float *keys = job->keys, *colsum = job->colsum, *queries = job->queries;
    int rc = KV_OK;
    for (int64_t g = 0; !rc && g < c->K; g++) rc = trace_read_head(c->tr, TRACE_KEYS, l, g, keys + g * T * D, err);
    for (int64_t h = 0; !rc && colsum && h < c->H; h++) rc = trace_read_head(c->tr, TRACE_COLSUM, l, h, colsum + h * T, err);
    for (int64_t h = 0; !rc && queries && h < c->H; h++)
        rc = trace_read_head(c->tr, TRACE_QUERIES, l, h, queries + h * T * D, err);
    for (int64_t h = 0; !rc && job->lse && h < c->H; h++) {
        rc = trace_read_head(c->tr, TRACE_ATTN_LSE, l, h, job->lse + h * T, err);
        if (!rc) rc = trace_read_head(c->tr, TRACE_ATTN_MAX, l, h, job->rmax + h * T, err);
    }
    if (rc) return rc;
    memset(job->rc, 0, sizeof(int) * (size_t)c->K);
    kv_parallel_for((int)c->K, threads, run_item, job);
    for (int64_t g = 0; g < c->K; g++) /* the first failure in item order: deterministic */
        if (job->rc[g]) return kv_fail(err, job->rc[g], "%s", job->errs[g].msg);
    aout_pca_layer(c, pca_csv, l, job->pc);
    return KV_OK;
}

static int alloc_results(analyze_ctx *c, kv_err *err)
{
    const size_t LH = (size_t)(c->L * c->H), LK = (size_t)(c->L * c->K);
    const char *w = "analysis results";
    if (!(c->rho_pair = kv_calloc(LH, sizeof(double), w, err)) ||
        !(c->rho_anchor = kv_calloc(LH, sizeof(double), w, err)) ||
        !(c->logdet_full = kv_calloc(LK, sizeof(double), w, err)) ||
        !(c->logdet_runs = kv_calloc(LK * (size_t)(c->rs.n_runs + 1), sizeof(double), w, err)) ||
        !(c->pca = kv_calloc(LK, sizeof(pca_summary), w, err)) ||
        !(c->importance = kv_calloc(LK, sizeof(head_importance), w, err)))
        return err->code;
    for (size_t i = 0; i < LH; i++) c->rho_pair[i] = c->rho_anchor[i] = NAN;
    return KV_OK;
}

/* Every layer through run_layer, with the per-thread scratch and layer buffers. */
static int run_layers(analyze_ctx *c, int threads, FILE *pca_csv, kv_err *err)
{
    const int64_t T = c->T, D = c->D, K = c->K;
    thread_scratch *s = kv_calloc((size_t)threads, sizeof *s, "analyze scratch", err);
    layer_job job = {.c = c, .s = s};
    float *keys = kv_calloc((size_t)(K * T * D), sizeof(float), "keys", err);
    float *colsum = c->has_colsum ? kv_calloc((size_t)(c->H * T), sizeof(float), "colsum", err) : NULL;
    float *queries = c->has_queries ? kv_calloc((size_t)(c->H * T * D), sizeof(float), "queries", err) : NULL;
    if (c->has_row_stats) {
        job.lse = kv_calloc((size_t)(c->H * T), sizeof(float), "log-sum-exps", err);
        job.rmax = kv_calloc((size_t)(c->H * T), sizeof(float), "row maxima", err);
    }
    job.pc = kv_calloc((size_t)(K * T * 2), sizeof(double), "pca projections", err);
    job.rc = kv_calloc((size_t)K, sizeof(int), "analyze", err);
    job.errs = kv_calloc((size_t)K, sizeof(kv_err), "analyze", err);
    int rc = s && keys && (colsum || !c->has_colsum) && (queries || !c->has_queries) &&
                     ((job.lse && job.rmax) || !c->has_row_stats) && job.pc && job.rc && job.errs
                 ? KV_OK : err->code;
    int ready = 0;
    while (!rc && ready < threads) rc = scratch_alloc(&s[ready++], T, D, err);
    job.keys = keys, job.colsum = colsum, job.queries = queries;
    kv_progress prog;
    progress_start(&prog, "analyze", c->L, c->o->quiet);
    progress_stage(&prog, "layers");
    for (int64_t l = 0; !rc && l < c->L; l++) {
        job.l = l;
        rc = run_layer(&job, threads, pca_csv, err);
        progress_update(&prog, l + 1);
    }
    progress_end(&prog);
    for (int i = 0; i < ready; i++) scratch_free(&s[i]);
    free(s), free(keys), free(colsum), free(queries), free(job.lse), free(job.rmax), free(job.pc), free(job.rc);
    free(job.errs);
    return rc;
}

/* A run simulated on another trace has other keys: its recorded log-det of the kept keys is not the
 * one this trace's keys give (the same computation, 1e-6 relative: far above any rounding between
 * machines), and nothing analyze would write about it would be true. */
static int check_logdet_match(const analyze_ctx *c, kv_err *err)
{
    const int64_t LK = c->L * c->K;
    for (int r = 0; r < c->rs.n_runs; r++)
        for (int64_t i = 0; i < LK; i++) {
            const double a = c->rs.runs[r].final_logdet[i], b = c->logdet_runs[(size_t)r * (size_t)LK + (size_t)i];
            if (!(fabs(a - b) <= 1e-6 * (1.0 + fabs(b))) && !(isnan(a) && isnan(b)))
                return kv_fail(err, KV_EINPUT, "%s: /runs/%s/final_logdet[%lld, %lld] = %.9g but the keys of %s give "
                               "%.9g: these results were simulated on another trace (or it changed since)",
                               c->rs.path, c->rs.runs[r].name, (long long)(i / c->K), (long long)(i % c->K), a,
                               c->o->trace, b);
        }
    return KV_OK;
}

/* One results directory: results.h5, then the CSVs analyze copies, checked
 * against their schemas and results.h5's runs before anything is computed or copied. */
static int read_one(analyze_ctx *c, const char *dir, results_set *rs, kv_err *err)
{
    const results_select sel = {.trace = c->o->sel_trace, .chunk = c->o->sel_chunk};
    int rc = results_read_select(dir, c->L, c->K, c->T, &sel, rs, err);
    if (rc) return rc;
    if (c->o->sel_trace || c->o->sel_chunk) return KV_OK; /* a study's: its CSVs hold other traces' rows too */
    results_runs runs = {0};   /* a run is (config, allocator, budget) in every file */
    for (int r = 0; !rc && r < rs->n_runs; r++)
        if (results_runs_add(&runs, rs->runs[r].config, rs->runs[r].allocator, rs->runs[r].budget, err) < 0)
            rc = KV_EFAIL;
    const results_dims dims = {.L = c->L, .H = c->H, .K = c->K, .T = c->T};
    if (!rc) rc = results_check_csvs(dir, &dims, &runs, err);
    results_runs_free(&runs);
    if (rc) results_free(rs);
    return rc;
}

/* Whether the later directory `more` can join the runs read so far: the same
 * trace (results.h5's trace_sha256), and no run of it already there. */
static int check_mergeable(const analyze_ctx *c, int d, const results_set *more, kv_err *err)
{
    const char *const *dirs = c->o->results_dirs;
    char a[65], b[65];
    results_trace_sha256(dirs[0], a);
    results_trace_sha256(dirs[d], b);
    if (a[0] && b[0] && strcmp(a, b) != 0)
        return kv_fail(err, KV_EINPUT, "--results %s was simulated on another trace (sha256 %.12s...) than --results "
                       "%s (%.12s...): cannot merge them", dirs[d], b, dirs[0], a);
    for (int r = 0; r < more->n_runs; r++)
        for (int q = 0; q < c->rs.n_runs; q++) {
            const results_run *x = &more->runs[r], *y = &c->rs.runs[q];
            if (x->budget == y->budget && strcmp(x->config, y->config) == 0 && strcmp(x->allocator, y->allocator) == 0)
                return kv_fail(err, KV_EINPUT, "--results %s and an earlier --results both hold run %s (allocator %s, "
                               "budget %lld): repeated --results are merged only when their configurations are "
                               "disjoint", dirs[d], x->config, x->allocator, (long long)x->budget);
        }
    return KV_OK;
}

/* Every --results, merged into c->rs in the order given. */
static int read_results(analyze_ctx *c, kv_err *err)
{
    const int n = c->o->n_results > 0 ? c->o->n_results : 1;
    const char *const one[] = {c->o->results};
    const char *const *dirs = c->o->n_results > 0 ? c->o->results_dirs : one;
    int rc = read_one(c, dirs[0], &c->rs, err);
    for (int d = 1; !rc && d < n; d++) {
        results_set more;
        if ((rc = read_one(c, dirs[d], &more, err))) break;
        rc = check_mergeable(c, d, &more, err);
        results_run *all = rc ? NULL : realloc(c->rs.runs, sizeof *all * (size_t)(c->rs.n_runs + more.n_runs));
        if (!rc && !all) rc = kv_fail(err, KV_EFAIL, "analyze: out of memory for the runs");
        if (rc) {
            results_free(&more);
            break;
        }
        memcpy(all + c->rs.n_runs, more.runs, sizeof *all * (size_t)more.n_runs);
        c->rs.runs = all, c->rs.n_runs += more.n_runs;
        free(more.runs);   /* its runs' arrays now belong to c->rs */
    }
    return rc;
}

/* Trace checks and the detail head; before any output exists. */
static int check_inputs(analyze_ctx *c, kv_err *err)
{
    const analyze_opts *o = c->o;
    const trace_meta *m = trace_get_meta(c->tr);
    c->L = m->n_layers, c->H = m->n_heads, c->K = m->n_kv_heads, c->D = m->head_dim, c->T = m->n_tokens;
    c->has_colsum = trace_has(c->tr, TRACE_COLSUM);
    c->has_queries = trace_has(c->tr, TRACE_QUERIES);
    /* the recorded statistics are of the unrounded queries and keys: with float16 /queries and /keys
     * their scores would not match the stored rows' (2^-11 relative), so those take the exact pass */
    c->has_row_stats = c->has_queries && m->storage == TRACE_F32 && trace_has(c->tr, TRACE_ATTN_LSE) &&
                       trace_has(c->tr, TRACE_ATTN_MAX);
    if (c->D > 4096 || c->T > ((int64_t)1 << 28) || c->T * c->D > ((int64_t)1 << 31))
        return kv_fail(err, KV_EINPUT, "%s: T = %lld, D = %lld is beyond what analyze handles", o->trace,
                       (long long)c->T, (long long)c->D);
    if (o->detail_layer >= c->L || o->detail_head >= c->H)
        return kv_fail(err, KV_EUSAGE, "analyze: --detail %lld,%lld is outside the trace's %lld layers and %lld "
                       "query heads (see 'kvtrace analyze --help')", (long long)o->detail_layer,
                       (long long)o->detail_head, (long long)c->L, (long long)c->H);
    return o->results ? read_results(c, err) : KV_OK;
}

static void warn_missing(const analyze_ctx *c)
{
    if (!c->has_colsum)
        fprintf(stderr, "kvtrace: warning: %s: no /attention/colsum, so no Spearman rho: spearman.csv has only its "
                "header (capture with --attention colsum)\n", c->o->trace);
    if (!c->has_queries)
        fprintf(stderr, "kvtrace: warning: %s: no /queries, so detail.csv's attn column is nan and "
                "head_importance.csv has only its header (capture with --record keys,values,queries)\n", c->o->trace);
}

/* Everything after the per-layer pass: the small CSVs, detail, the sim copies. */
static int write_tail(analyze_ctx *c, kv_err *err)
{
    if (c->o->detail_layer >= 0) c->detail_layer = c->o->detail_layer, c->detail_head = c->o->detail_head;
    else detail_choose(c, &c->detail_layer, &c->detail_head);
    int rc = aout_meta(c, err);
    if (!rc) rc = aout_spearman(c, err);
    if (!rc) rc = aout_logdet(c, err);
    if (!rc) rc = aout_pca_var(c, err);
    if (!rc) rc = aout_pca_kept(c, err);
    if (!rc) rc = aout_budgets(c, err);
    if (!rc) rc = aout_head_importance(c, err);
    if (!rc) rc = detail_write(c, err);
    bool copied;
    if (c->o->sel_trace || c->o->sel_chunk) return rc;   /* a study's trace: the copies are the study's */
    static const char *const COPIES[] = {RESULTS_FILE_SUMMARY, RESULTS_FILE_TIMING, RESULTS_FILE_CSV,
                                         RESULTS_FILE_SPANS, RESULTS_FILE_SPANS_SUMMARY};   /* spans: when present */
    for (int i = 0; i < 5; i++) {
        if (!rc && c->o->results && c->o->n_results <= 1)
            rc = results_copy_file(c->o->results, COPIES[i], c->outdir, &copied, err);
        else if (!rc && c->o->n_results > 1)   /* merged runs: the rows of each, in the order given */
            rc = results_concat_file(c->o->results_dirs, c->o->n_results, COPIES[i], c->outdir, err);
    }
    return rc;
}

/* The analysis proper into `dir`, once the inputs are read and checked. */
static int analyze_body(analyze_ctx *c, const char *dir, kv_err *err)
{
    const int threads = kv_threads(c->o->threads);
    int rc = alloc_results(c, err);
    if (!rc) {
        if (!c->no_warnings) warn_missing(c);
        kv_blas_single_threaded(); /* items run in parallel; BLAS inside each stays serial and deterministic */
        c->outdir = dir;
        FILE *pca_csv = aout_pca_begin(c, err);
        rc = pca_csv ? run_layers(c, threads, pca_csv, err) : err->code;
        if (pca_csv && csv_close(pca_csv, "pca.csv", err) && !rc) rc = err->code;
    }
    if (!rc) rc = check_logdet_match(c, err);
    if (!rc) rc = write_tail(c, err);
    return rc;
}

void analyze_ctx_free(analyze_ctx *c)
{
    results_free(&c->rs);
    free(c->rho_pair), free(c->rho_anchor), free(c->logdet_full), free(c->logdet_runs), free(c->pca);
    free(c->importance);
    trace_close(c->tr);
    c->rho_pair = c->rho_anchor = c->logdet_full = c->logdet_runs = NULL, c->pca = NULL, c->importance = NULL;
    c->tr = NULL;
}

int analyze_into(analyze_ctx *c, const char *dir, kv_err *err)
{
    int rc = mkdir(dir, 0777) == 0 ? KV_OK : kv_fail(err, KV_EFAIL, "%s: cannot create: %s", dir, strerror(errno));
    if (!rc) rc = trace_open(c->o->trace, &c->tr, err);
    if (!rc) rc = check_inputs(c, err);
    return rc ? rc : analyze_body(c, dir, err);
}

int analyze_run(const analyze_opts *o, kv_err *err)
{
    analyze_ctx c = {.o = o};
    const double started = kv_now_seconds();
    const char *inputs[67] = {o->trace, o->results, o->fidelity};
    int n_inputs = 3;
    for (int i = 1; i < o->n_results && n_inputs < 67; i++) inputs[n_inputs++] = o->results_dirs[i];
    int rc = outfile_check_inputs(o->output, inputs, n_inputs, err);
    if (!rc) rc = trace_open(o->trace, &c.tr, err);
    if (!rc) rc = check_inputs(&c, err);
    kv_outfile out;
    bool dir_started = false;
    if (!rc) rc = outdir_begin(&out, o->output, o->force, err), dir_started = rc == KV_OK;
    if (!rc) rc = analyze_body(&c, out.tmp_path, err);
    if (!rc && o->baseline) rc = analyze_paired(o->results, o->baseline, out.tmp_path, err);
    if (!rc && o->fidelity) rc = analyze_fidelity_join(o->results, o->fidelity, out.tmp_path, o->quiet, err);
    if (!rc) rc = outdir_commit(&out, err);
    else if (dir_started) outdir_abort(&out);
    if (!rc && !o->quiet)
        printf("analyze: %lld layers x %lld kv heads, T = %lld, %d run(s) -> %s (%.2f s)\n", (long long)c.L,
               (long long)c.K, (long long)c.T, c.rs.n_runs, o->output, kv_now_seconds() - started);
    analyze_ctx_free(&c);
    return rc;
}

int analyze_results_is_study(const char *dir, bool *study, kv_err *err)
{
    results_set rs;
    const results_select sel = {.attrs_only = true};
    *study = false;
    int rc = results_read_select(dir, 0, 0, 0, &sel, &rs, err);
    for (int r = 1; !rc && r < rs.n_runs; r++)
        if (rs.runs[r].chunk != rs.runs[0].chunk || strcmp(rs.runs[r].trace, rs.runs[0].trace) != 0) *study = true;
    if (!rc) results_free(&rs);
    return rc;
}
