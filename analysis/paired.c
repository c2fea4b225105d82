/* paired: differences against a baseline, paired over traces (paired.h). */
#include "analysis/paired.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "results/results_dir.h"
#include "results/results_row.h"
#include "results/results_schema.h"
#include "study/study.h"

enum { MAX_METRICS = 2 + 3 * 64, NAME_MAX_LEN = 96 };
static const char *const SPAN_MEASURES[3] = {"retention_mean", "retention_final", "attn_recall"};

/* One configuration of the results: its run label and budget, and the labels it is written with. */
typedef struct {
    char run[830], config[600], allocator[300];
    int64_t budget, chunk;
} cfg;

typedef struct {
    cfg *c;
    int n_cfg, cap_cfg, last;
    char (*trace)[130];
    int n_trace, cap_trace, last_trace;
    char metric[MAX_METRICS][NAME_MAX_LEN];
    int n_metric;
    double *sum;      /* [n_cfg][n_trace][n_metric]: a value, or (spans) a sum over layers and kv heads */
    int32_t *count;   /* the same: how many values were summed */
} table;

static int col_of(const csv_table *t, const char *name, kv_err *err)
{
    const int j = csv_column(t, name);
    if (j < 0) kv_fail(err, KV_EINPUT, "%s: no column %s", t->path, name);
    return j;
}

/* The index of (run, budget), added when new; rows come grouped, so the one after the last is tried first. */
static int cfg_of(table *tb, const char *run, int64_t budget, const char *config, const char *alloc, int64_t chunk,
                  bool add, kv_err *err)
{
    for (int k = 0; k < tb->n_cfg; k++) {
        const int i = (tb->last + 1 + k) % tb->n_cfg;
        if (tb->c[i].budget == budget && strcmp(tb->c[i].run, run) == 0) return tb->last = i;
    }
    if (!add) return -1;
    if (tb->n_cfg == tb->cap_cfg) {
        const int cap = tb->cap_cfg ? 2 * tb->cap_cfg : 64;
        cfg *c = realloc(tb->c, sizeof *c * (size_t)cap);
        if (!c) return kv_fail(err, KV_EFAIL, "paired: out of memory"), -1;
        tb->c = c, tb->cap_cfg = cap;
    }
    cfg *c = &tb->c[tb->n_cfg];
    snprintf(c->run, sizeof c->run, "%s", run), snprintf(c->config, sizeof c->config, "%s", config);
    snprintf(c->allocator, sizeof c->allocator, "%s", alloc);
    c->budget = budget, c->chunk = chunk;
    return tb->last = tb->n_cfg++;
}

static int trace_of(table *tb, const char *id, bool add, kv_err *err)
{
    for (int k = 0; k < tb->n_trace; k++) {
        const int i = (tb->last_trace + k) % tb->n_trace;
        if (strcmp(tb->trace[i], id) == 0) return tb->last_trace = i;
    }
    if (!add) return -1;
    if (tb->n_trace == tb->cap_trace) {
        const int cap = tb->cap_trace ? 2 * tb->cap_trace : 64;
        char (*t)[130] = realloc(tb->trace, sizeof *t * (size_t)cap);
        if (!t) return kv_fail(err, KV_EFAIL, "paired: out of memory"), -1;
        tb->trace = t, tb->cap_trace = cap;
    }
    snprintf(tb->trace[tb->n_trace], sizeof tb->trace[0], "%s", id);
    return tb->last_trace = tb->n_trace++;
}

static int metric_of(table *tb, const char *name, kv_err *err)
{
    for (int i = 0; i < tb->n_metric; i++)
        if (strcmp(tb->metric[i], name) == 0) return i;
    if (tb->n_metric == MAX_METRICS) return kv_fail(err, KV_EINPUT, "paired: more than 64 span names"), -1;
    snprintf(tb->metric[tb->n_metric], NAME_MAX_LEN, "%s", name);
    return tb->n_metric++;
}

/* The metric name of span measure q of a span: "SPAN:MEASURE". */
static void span_metric(char name[NAME_MAX_LEN], const char *span, int q)
{
    snprintf(name, NAME_MAX_LEN, "%.60s:%s", span, SPAN_MEASURES[q]);
}

static size_t at(const table *tb, int c, int t, int m)
{
    return ((size_t)c * (size_t)tb->n_trace + (size_t)t) * MAX_METRICS + (size_t)m;
}

/* The configurations, traces and metric names of summary_by_trace.csv (phase all), then the value arrays. */
static int scan(table *tb, const csv_table *s, const csv_table *sp, kv_err *err)
{
    const int run = col_of(s, "run", err), bud = run < 0 ? -1 : col_of(s, "budget", err),
              cf = bud < 0 ? -1 : col_of(s, "config", err), al = cf < 0 ? -1 : col_of(s, "allocator", err),
              ch = al < 0 ? -1 : col_of(s, "chunk", err), tr = ch < 0 ? -1 : col_of(s, "trace", err);
    if (tr < 0) return err->code;
    for (size_t r = 0; r < s->n_rows; r++) {
        int64_t b, k;
        if (csv_int(s, r, bud, 1, INT64_MAX, &b, err) || csv_int(s, r, ch, 1, INT64_MAX, &k, err)) return err->code;
        if (cfg_of(tb, csv_cell(s, r, run), b, csv_cell(s, r, cf), csv_cell(s, r, al), k, true, err) < 0 ||
            trace_of(tb, csv_cell(s, r, tr), true, err) < 0)
            return err->code;
    }
    if (metric_of(tb, "out_rel_err_mean", err) < 0 || metric_of(tb, "attn_recall_mean", err) < 0) return err->code;
    const int span = sp ? col_of(sp, "span", err) : -1;
    for (size_t r = 0; sp && span >= 0 && r < sp->n_rows; r++)
        for (int q = 0; q < 3; q++) {
            char name[NAME_MAX_LEN];
            span_metric(name, csv_cell(sp, r, span), q);
            if (metric_of(tb, name, err) < 0) return err->code;
        }
    if (sp && span < 0) return err->code;
    const size_t n = (size_t)tb->n_cfg * (size_t)tb->n_trace * MAX_METRICS;
    if (n > ((size_t)1 << 27))
        return kv_fail(err, KV_EUSAGE, "paired: %d configurations x %d traces is too many to pair in memory",
                       tb->n_cfg, tb->n_trace);
    tb->sum = kv_calloc(n ? n : 1, sizeof *tb->sum, "paired", err);
    tb->count = tb->sum ? kv_calloc(n ? n : 1, sizeof *tb->count, "paired", err) : NULL;
    return tb->count ? KV_OK : err->code;
}

/* Adds value v of (run, budget, trace, metric) (a row of either file). */
static int add(table *tb, const csv_table *t, size_t r, int run, int bud, int tr, int m, double v, kv_err *err)
{
    int64_t b;
    if (csv_int(t, r, bud, 1, INT64_MAX, &b, err)) return err->code;
    const int c = cfg_of(tb, csv_cell(t, r, run), b, "", "", 0, false, err);
    const int i = trace_of(tb, csv_cell(t, r, tr), false, err);
    if (c < 0 || i < 0) return csv_fail(t, r, err, "a run or trace that summary_by_trace.csv does not hold");
    tb->sum[at(tb, c, i, m)] += v, tb->count[at(tb, c, i, m)]++;
    return KV_OK;
}

static int fill(table *tb, const csv_table *s, const csv_table *sp, kv_err *err)
{
    const int run = col_of(s, "run", err), bud = col_of(s, "budget", err), tr = col_of(s, "trace", err),
              ph = col_of(s, "phase", err), e = col_of(s, "out_rel_err_mean", err),
              a = col_of(s, "attn_recall_mean", err);
    if (run < 0 || bud < 0 || tr < 0 || ph < 0 || e < 0 || a < 0) return err->code;
    for (size_t r = 0; r < s->n_rows; r++) {
        if (strcmp(csv_cell(s, r, ph), "all") != 0) continue;
        double x, y;
        if (csv_double(s, r, e, true, &x, err) || csv_double(s, r, a, true, &y, err) ||
            add(tb, s, r, run, bud, tr, 0, x, err) || add(tb, s, r, run, bud, tr, 1, y, err))
            return err->code;
    }
    if (!sp) return KV_OK;
    int col[3];
    const int srun = col_of(sp, "run", err), sbud = col_of(sp, "budget", err), str = col_of(sp, "trace", err),
              span = col_of(sp, "span", err);
    for (int q = 0; q < 3; q++) col[q] = col_of(sp, SPAN_MEASURES[q], err);
    if (srun < 0 || sbud < 0 || str < 0 || span < 0 || col[0] < 0 || col[1] < 0 || col[2] < 0) return err->code;
    for (size_t r = 0; r < sp->n_rows; r++)
        for (int q = 0; q < 3; q++) {
            char name[NAME_MAX_LEN];
            span_metric(name, csv_cell(sp, r, span), q);
            double v;
            const int m = metric_of(tb, name, err);
            if (m < 0 || csv_double(sp, r, col[q], true, &v, err) || add(tb, sp, r, srun, sbud, str, m, v, err))
                return err->code;
        }
    return KV_OK;
}

/* The baseline's config label and allocator from "CONFIG[@ALLOCATOR]" (paired.h): the exact label, else the
 * one configuration of a policy of that name. */
static int resolve(const table *tb, const char *spec, char *config, size_t ccap, char *alloc, size_t acap,
                   kv_err *err)
{
    const char *cut = strchr(spec, '@');
    snprintf(config, ccap, "%.*s", (int)(cut ? (size_t)(cut - spec) : strlen(spec)), spec);
    snprintf(alloc, acap, "%s", cut ? cut + 1 : RESULTS_ALLOC_NONE);
    const char *found = NULL;
    bool several = false;
    for (int i = 0; i < tb->n_cfg && !(found && strcmp(found, config) == 0); i++) {
        const char *label = tb->c[i].config;
        const size_t n = strlen(config);
        if (strcmp(label, config) == 0) found = label, several = false;
        else if (strncmp(label, config, n) == 0 && label[n] == ':') {
            several = several || (found && strcmp(found, label) != 0);
            if (!found) found = label;
        }
    }
    if (!found || several)
        return kv_fail(err, KV_EUSAGE, "analyze: --baseline %s: %s (the results hold %s%s)", spec,
                       several ? "a policy with several configurations: give the whole label"
                               : "no such configuration",
                       tb->c[0].config, tb->n_cfg > 1 ? ", ..." : "");
    snprintf(config, ccap, "%s", found);
    for (int i = 0; i < tb->n_cfg; i++)
        if (strcmp(tb->c[i].config, config) == 0 && strcmp(tb->c[i].allocator, alloc) == 0) return KV_OK;
    return kv_fail(err, KV_EUSAGE, "analyze: --baseline %s: %s has no runs under allocator %s", spec, config, alloc);
}

/* The resamples of n traces, drawn once for every row that pairs n of them (study_resamples). */
typedef struct {
    int32_t *idx;
    int n;
} resamples;

static const int32_t *resamples_of(resamples *rs, int n)
{
    if (rs->n != n || !rs->idx) {
        kv_err ignore = {0};
        free(rs->idx);
        rs->idx = study_resamples(n, &ignore), rs->n = n;
    }
    return rs->idx;
}

/* The row of configuration c, metric m, against baseline b, over the traces with both values. */
static void pair_row(FILE *f, const table *tb, int c, int b, int m, double *x, double *y, double *d, resamples *rs)
{
    int n = 0;
    for (int t = 0; t < tb->n_trace; t++) {
        const size_t i = at(tb, c, t, m), j = at(tb, b, t, m);
        if (!tb->count[i] || !tb->count[j]) continue;
        x[n] = tb->sum[i] / tb->count[i], y[n] = tb->sum[j] / tb->count[j];
        if (isnan(x[n]) || isnan(y[n])) continue;   /* nothing measured there (docs/sim.md#metrics) */
        d[n] = x[n] - y[n], n++;
    }
    double mean = NAN, base = NAN, dm = NAN, lo = NAN, hi = NAN;
    const int32_t *idx = n ? resamples_of(rs, n) : NULL;
    if (idx) {   /* the interval is the difference's (paired over traces); the two sides' plain means */
        study_mean_ci(d, n, idx, &dm, &lo, &hi);
        double sx = 0.0, sy = 0.0;
        for (int i = 0; i < n; i++) sx += x[i], sy += y[i];
        mean = sx / n, base = sy / n;
    }
    const cfg *k = &tb->c[c];
    results_row w = results_row_begin(f, &RESULTS_SCHEMA_PAIRED);
    results_row_text(&w, k->run), results_row_text(&w, k->config), results_row_text(&w, k->allocator);
    results_row_int(&w, k->chunk), results_row_int(&w, k->budget), results_row_text(&w, tb->c[b].run);
    results_row_text(&w, tb->metric[m]), results_row_int(&w, n), results_row_real(&w, mean);
    results_row_real(&w, base), results_row_real(&w, dm), results_row_real(&w, lo), results_row_real(&w, hi);
    results_row_end(&w);
}

static int write_pairs(const table *tb, const char *bconfig, const char *balloc, const char *outdir, kv_err *err)
{
    FILE *f = results_schema_create(outdir, &RESULTS_SCHEMA_PAIRED, err);
    double *buf = f ? kv_calloc((size_t)(3 * (tb->n_trace ? tb->n_trace : 1)), sizeof *buf, "paired", err) : NULL;
    if (!buf) {
        if (f) fclose(f);
        return err->code;
    }
    resamples rs = {0};
    for (int c = 0; c < tb->n_cfg; c++) {
        int b = -1;   /* the baseline at this configuration's chunk and budget */
        for (int i = 0; i < tb->n_cfg && b < 0; i++)
            if (strcmp(tb->c[i].config, bconfig) == 0 && strcmp(tb->c[i].allocator, balloc) == 0 &&
                tb->c[i].chunk == tb->c[c].chunk && tb->c[i].budget == tb->c[c].budget)
                b = i;
        if (b < 0 || b == c) continue;
        for (int m = 0; m < tb->n_metric; m++)
            pair_row(f, tb, c, b, m, buf, buf + tb->n_trace, buf + 2 * tb->n_trace, &rs);
    }
    free(buf), free(rs.idx);
    return csv_close(f, RESULTS_SCHEMA_PAIRED.file, err);
}

int analyze_paired(const char *results_dir, const char *baseline, const char *outdir, kv_err *err)
{
    csv_table s = {0}, sp = {0};
    bool present = false, spans = false;
    table tb = {0};
    int rc = csv_read(&s, results_dir, RESULTS_FILE_SUMMARY_BY_TRACE, &present, err);
    if (!rc && !present)
        rc = kv_fail(err, KV_EINPUT, "%s/%s: missing (--baseline pairs its rows)", results_dir,
                     RESULTS_FILE_SUMMARY_BY_TRACE);
    if (!rc) rc = csv_read(&sp, results_dir, RESULTS_FILE_SPANS, &spans, err);
    if (!rc) rc = scan(&tb, &s, spans ? &sp : NULL, err);
    if (!rc && !tb.n_cfg) rc = kv_fail(err, KV_EINPUT, "%s/%s: no rows", results_dir, RESULTS_FILE_SUMMARY_BY_TRACE);
    if (!rc) rc = fill(&tb, &s, spans ? &sp : NULL, err);
    char config[600], alloc[300];
    if (!rc) rc = resolve(&tb, baseline, config, sizeof config, alloc, sizeof alloc, err);
    if (!rc) rc = write_pairs(&tb, config, alloc, outdir, err);
    csv_free(&s), csv_free(&sp);
    free(tb.c), free(tb.trace), free(tb.sum), free(tb.count);
    return rc;
}
