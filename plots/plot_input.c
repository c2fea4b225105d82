#include "plot_input.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_table.h"

static const char *const META_KEYS[] = {"trace", "model", "creator", "L", "H", "K", "D", "T", "prompt_tokens",
                                        "capture_mode", "capture_chunk", "storage_dtype", "detail_layer",
                                        "detail_q_head", "detail_kv_head", "kvtrace_version"};
enum { N_META_KEYS = sizeof META_KEYS / sizeof META_KEYS[0] };
static const int64_t BIG = (int64_t)1 << 40;

const char *plot_meta_get(const plot_meta *m, const char *key)
{
    for (size_t r = 0; r < m->csv.n_rows; r++)
        if (strcmp(csv_cell(&m->csv, r, 0), key) == 0) return csv_cell(&m->csv, r, 1);
    return NULL;
}

/* The row of `key` (it exists: checked before). */
static size_t meta_row(const plot_meta *m, const char *key)
{
    size_t r = 0;
    while (strcmp(csv_cell(&m->csv, r, 0), key) != 0) r++;
    return r;
}

static int meta_int(plot_meta *m, const char *key, int64_t lo, int64_t hi, int64_t *out, kv_err *err)
{
    return csv_int(&m->csv, meta_row(m, key), 1, lo, hi, out, err);
}

static int load_meta(plot_data *d, kv_err *err)
{
    plot_meta *m = &d->meta;
    int rc = plot_table_open(d, PF_META, &m->csv, err);
    if (rc) return rc;
    if (!d->present[PF_META])
        return kv_fail(err, KV_EINPUT, "%s/meta.csv: missing (is '%s' a directory written by kvtrace analyze?)",
                       d->dir, d->dir);
    for (size_t r = 0; r < m->csv.n_rows; r++)
        for (size_t q = 0; q < r; q++)
            if (strcmp(csv_cell(&m->csv, r, 0), csv_cell(&m->csv, q, 0)) == 0)
                return csv_fail(&m->csv, r, err, "key '%.60s' appears twice", csv_cell(&m->csv, r, 0));
    for (int k = 0; k < N_META_KEYS; k++)
        if (!plot_meta_get(m, META_KEYS[k]))
            return kv_fail(err, KV_EINPUT, "%s: key '%s' is missing", m->csv.path, META_KEYS[k]);
    int64_t v;
    if ((rc = meta_int(m, "L", 1, 4096, &m->L, err)) || (rc = meta_int(m, "H", 1, 4096, &m->H, err)) ||
        (rc = meta_int(m, "K", 1, m->H, &m->K, err)) || (rc = meta_int(m, "D", 1, 65536, &m->D, err)) ||
        (rc = meta_int(m, "T", 1, (int64_t)1 << 31, &m->T, err)) ||
        (rc = meta_int(m, "prompt_tokens", 0, m->T, &v, err)) ||
        (rc = meta_int(m, "capture_chunk", 0, BIG, &v, err)) ||
        (rc = meta_int(m, "detail_layer", 0, m->L - 1, &m->detail_layer, err)) ||
        (rc = meta_int(m, "detail_q_head", 0, m->H - 1, &m->detail_head, err)) ||
        (rc = meta_int(m, "detail_kv_head", 0, m->K - 1, &v, err)))
        return rc;
    if (m->H % m->K != 0)
        return csv_fail(&m->csv, meta_row(m, "K"), err, "H = %lld is not a multiple of K = %lld",
                        (long long)m->H, (long long)m->K);
    if (v != m->detail_head / (m->H / m->K))
        return csv_fail(&m->csv, meta_row(m, "detail_kv_head"), err, "detail_kv_head %lld is not the kv head of "
                        "detail_q_head %lld (q_head / (H/K) = %lld)", (long long)v, (long long)m->detail_head,
                        (long long)(m->detail_head / (m->H / m->K)));
    return KV_OK;
}

/* sim's CSVs, and analyze's that name runs, hold allocator and budget_fraction
 * after budget (column 3): the columns after them move by A
 * (results/results_schema.c checked them all). */
enum { A = 2 };

/* A study's summary.csv (n_traces and the intervals after the means): read; else one trace, no interval. */
static int summary_study(const csv_table *c, size_t r, plot_summary *s, kv_err *err)
{
    s->n_traces = 1;
    s->err_lo = s->err_hi = s->recall_lo = s->recall_hi = NAN;
    if (c->n_cols <= A + 14 || strcmp(c->header[A + 14], "n_traces") != 0) return KV_OK;
    int rc = csv_int(c, r, A + 14, 1, BIG, &s->n_traces, err);
    if (!rc) rc = csv_double(c, r, A + 15, true, &s->err_lo, err);
    if (!rc) rc = csv_double(c, r, A + 16, true, &s->err_hi, err);
    if (!rc) rc = csv_double(c, r, A + 19, true, &s->recall_lo, err);
    if (!rc) rc = csv_double(c, r, A + 20, true, &s->recall_hi, err);
    return rc;
}

static int load_summary(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_SUMMARY, &c, err);
    if (!rc && c.n_rows) d->summary = kv_calloc(c.n_rows, sizeof *d->summary, c.path, err), rc = d->summary ? 0 : 1;
    d->n_summary_rows = c.n_rows;
    const int same_col = rc ? -1 : csv_column(&c, "same_as");   /* by name: files of earlier versions lack it */
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        plot_summary s = {0};
        if (same_col >= 0) snprintf(s.same_as, sizeof s.same_as, "%s", csv_cell(&c, r, same_col));
        int64_t v;
        double x;
        const char *phase = csv_cell(&c, r, A + 7);
        if ((rc = plot_table_series(d, &c, r, 0, &s.series, err)) ||
            (rc = csv_int(&c, r, 3, 1, BIG, &s.budget, err)))
            break;
        for (int col = A + 4; !rc && col <= A + 6; col++) rc = csv_int(&c, r, col, 0, BIG, &v, err);
        if (!rc && strcmp(phase, "all") && strcmp(phase, "prefill") && strcmp(phase, "decode"))
            rc = csv_fail(&c, r, err, "phase is '%.40s', expected prefill, decode or all", phase);
        if (rc || (rc = csv_int(&c, r, A + 8, 0, INT64_MAX, &v, err)) ||
            (rc = csv_double(&c, r, A + 9, true, &s.err_mean, err)) ||
            (rc = csv_double(&c, r, A + 10, true, &x, err)) ||
            (rc = csv_double(&c, r, A + 11, true, &s.recall_mean, err)) ||
            (rc = csv_double(&c, r, A + 12, true, &x, err)) ||
            (rc = csv_double(&c, r, A + 13, true, &s.logdet_mean, err)) ||
            (rc = csv_int(&c, r, A + 4, 1, BIG, &s.chunk, err)) || (rc = summary_study(&c, r, &s, err)))
            break;
        /* a run without a measured query (N >= T) has nothing to draw: NaN measures (docs/sim.md#metrics) */
        if (strcmp(phase, "all") == 0 && !isnan(s.err_mean) && !isnan(s.recall_mean)) d->summary[d->n_summary++] = s;
    }
    csv_free(&c);
    return rc;
}

static int load_timing(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_TIMING, &c, err);
    if (!rc && c.n_rows) d->timing = kv_calloc(c.n_rows, sizeof *d->timing, c.path, err), rc = d->timing ? 0 : 1;
    /* a --chunks run or a study: the first row's chunk and trace (figure 6 draws one sim run's times) */
    const bool traced = c.n_cols > A + 8 && strcmp(c.header[A + 8], "trace") == 0;
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        if (strcmp(csv_cell(&c, r, A + 4), csv_cell(&c, 0, A + 4)) != 0 ||
            (traced && strcmp(csv_cell(&c, r, A + 8), csv_cell(&c, 0, A + 8)) != 0))
            continue;
        plot_timing *t = &d->timing[d->n_timing];
        int64_t v;
        if ((rc = plot_table_series(d, &c, r, 0, &t->series, err)) ||
            (rc = csv_int(&c, r, 3, 1, BIG, &t->budget, err)) || (rc = csv_int(&c, r, A + 4, 0, BIG, &v, err)) ||
            (rc = csv_int(&c, r, A + 5, 0, INT64_MAX, &t->calls, err)) ||
            (rc = csv_int(&c, r, A + 6, 0, INT64_MAX, &v, err)) ||
            (rc = csv_double(&c, r, A + 7, false, &t->ns, err)))
            break;
        if (t->ns < 0) rc = csv_fail(&c, r, err, "score_ns_per_candidate is negative");
        d->n_timing++;
    }
    csv_free(&c);
    return rc;
}

static int load_logdet(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_LOGDET, &c, err);
    if (!rc && c.n_rows) d->logdet = kv_calloc(c.n_rows, sizeof *d->logdet, c.path, err), rc = d->logdet ? 0 : 1;
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        plot_logdet *l = &d->logdet[r];
        if ((rc = plot_table_series(d, &c, r, 0, &l->series, err)) ||
            (rc = csv_int(&c, r, 3, 1, BIG, &l->budget, err)) ||
            (rc = csv_int(&c, r, A + 4, 0, d->meta.L - 1, &l->layer, err)) ||
            (rc = csv_int(&c, r, A + 5, 0, d->meta.K - 1, &l->kv_head, err)) ||
            (rc = csv_double(&c, r, A + 6, false, &l->logdet, err)))
            break;
        d->n_logdet++;
    }
    csv_free(&c);
    return rc;
}

static int load_spearman(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_SPEARMAN, &c, err);
    if (!rc && c.n_rows > (size_t)(d->meta.L * d->meta.H))
        rc = kv_fail(err, KV_EINPUT, "%s: %zu rows, more than L x H = %lld", c.path, c.n_rows,
                     (long long)(d->meta.L * d->meta.H));
    if (!rc && c.n_rows) d->rho = kv_calloc(c.n_rows, sizeof *d->rho, c.path, err), rc = d->rho ? 0 : 1;
    unsigned char *seen = rc ? NULL : kv_calloc((size_t)(d->meta.L * d->meta.H), 1, c.path, err);
    if (!rc && !seen) rc = KV_EFAIL;
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        plot_rho *p = &d->rho[r];
        int64_t kv;
        if ((rc = csv_int(&c, r, 0, 0, d->meta.L - 1, &p->layer, err)) ||
            (rc = csv_int(&c, r, 1, 0, d->meta.H - 1, &p->head, err)) ||
            (rc = csv_int(&c, r, 2, 0, d->meta.K - 1, &kv, err)) ||
            (rc = csv_double(&c, r, 3, true, &p->rho_pairwise, err)) ||
            (rc = csv_double(&c, r, 4, true, &p->rho_anchor, err)))
            break;
        if (kv != p->head / (d->meta.H / d->meta.K))
            rc = csv_fail(&c, r, err, "kv_head %lld is not the kv head of q_head %lld (q_head / (H/K) = %lld)",
                          (long long)kv, (long long)p->head, (long long)(p->head / (d->meta.H / d->meta.K)));
        else if (seen[p->layer * d->meta.H + p->head]++)
            rc = csv_fail(&c, r, err, "(layer %lld, q_head %lld) appears twice", (long long)p->layer,
                          (long long)p->head);
        else if (fabs(p->rho_pairwise) > 1 + 1e-6 || fabs(p->rho_anchor) > 1 + 1e-6)
            rc = csv_fail(&c, r, err, "a correlation outside [-1, 1]");
        d->n_rho++;
    }
    free(seen);
    csv_free(&c);
    return rc;
}

static int load_detail(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_DETAIL, &c, err);
    int64_t n = d->meta.T < 64 ? d->meta.T : 64;
    if (!rc && c.n_rows && c.n_rows != (size_t)(n * n))
        rc = kv_fail(err, KV_EINPUT, "%s: %zu rows, expected %lld x %lld (T = %lld)", c.path, c.n_rows,
                     (long long)n, (long long)n, (long long)d->meta.T);
    plot_detail *m = &d->detail;
    if (!rc && c.n_rows) {
        m->cos = kv_calloc((size_t)(n * n), sizeof *m->cos, c.path, err);
        m->attn = kv_calloc((size_t)(n * n), sizeof *m->attn, c.path, err);
        if (!m->cos || !m->attn) rc = KV_EFAIL;
        for (int64_t i = 0; !rc && i < n * n; i++) m->cos[i] = NAN; /* marks cells not seen yet */
    }
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        int64_t i, j;
        double cs, a;
        if ((rc = csv_int(&c, r, 0, 0, n - 1, &i, err)) || (rc = csv_int(&c, r, 1, 0, n - 1, &j, err)) ||
            (rc = csv_double(&c, r, 2, false, &cs, err)) || (rc = csv_double(&c, r, 3, false, &a, err)))
            break;
        if (!isnan(m->cos[i * n + j]))
            rc = csv_fail(&c, r, err, "(row %lld, col %lld) appears twice", (long long)i, (long long)j);
        else if (cs < -1 - 1e-4 || cs > 1 + 1e-4 || a < 0 || a > 1 + 1e-4)
            rc = csv_fail(&c, r, err, "cos must be in [-1, 1] and attn in [0, 1]");
        m->cos[i * n + j] = cs;
        m->attn[i * n + j] = a;
    }
    if (!rc && c.n_rows) m->n = n;
    csv_free(&c);
    return rc;
}

/* budgets.csv: the rows each (run, layer, kv head) kept at the end (figure 8). */
static int load_budgets(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_BUDGETS, &c, err);
    if (!rc && c.n_rows) d->budgets = kv_calloc(c.n_rows, sizeof *d->budgets, c.path, err), rc = d->budgets ? 0 : 1;
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        plot_budget *b = &d->budgets[r];
        if ((rc = plot_table_series(d, &c, r, 0, &b->series, err)) ||
            (rc = csv_int(&c, r, 3, 1, BIG, &b->budget, err)) ||
            (rc = csv_int(&c, r, A + 4, 0, d->meta.L - 1, &b->layer, err)) ||
            (rc = csv_int(&c, r, A + 5, 0, d->meta.K - 1, &b->kv_head, err)) ||
            (rc = csv_int(&c, r, A + 6, 0, d->meta.T, &b->head_budget, err)))
            break;
        d->n_budgets++;
    }
    csv_free(&c);
    return rc;
}

/* A file no figure draws (head_importance.csv): checked like the others, so
 * a damaged analysis directory is refused as a whole. */
static int check_only(plot_data *d, int file, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, file, &c, err);
    csv_free(&c);
    return rc;
}

int plot_input_load(plot_data *d, const char *dir, kv_err *err)
{
    memset(d, 0, sizeof *d);
    d->dir = dir;
    /* summary first: the series take their variant numbers in its order */
    int rc = load_meta(d, err);
    if (!rc) rc = load_summary(d, err);
    if (!rc) rc = load_timing(d, err);
    if (!rc) rc = load_logdet(d, err);
    if (!rc) rc = plot_input_layers(d, err);
    if (!rc) rc = plot_input_pca(d, err);
    if (!rc) rc = load_spearman(d, err);
    if (!rc) rc = load_detail(d, err);
    if (!rc) rc = load_budgets(d, err);
    if (!rc) rc = check_only(d, PF_HEAD_IMPORTANCE, err);
    if (!rc) rc = check_only(d, PF_SPANS, err);
    if (!rc) rc = plot_input_spans(d, err);
    if (rc) {
        plot_input_free(d);
        return rc;
    }
    plot_series_label(&d->series);
    return KV_OK;
}

void plot_input_free(plot_data *d)
{
    csv_free(&d->meta.csv);
    results_runs_free(&d->runs_ref);
    plot_series_free(&d->series);
    free(d->rho);
    free(d->logdet);
    free(d->summary);
    free(d->timing);
    free(d->layers);
    free(d->budgets);
    free(d->spans);
    free(d->runs);
    free(d->pca.pc1);
    free(d->pca.pc2);
    free(d->pca.kept);
    free(d->detail.cos);
    free(d->detail.attn);
    const char *dir = d->dir;
    memset(d, 0, sizeof *d);
    d->dir = dir;
}
