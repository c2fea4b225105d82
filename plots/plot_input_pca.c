/* The PCA inputs of figure 3: pca.csv (every key's projection; only the
 * detail layer's kv head is kept in memory), pca_kept.csv (the kept
 * positions of each run, one row each: the runs are its distinct (config,
 * budget) in order of first appearance; only the detail head's flags are
 * kept) and pca_var.csv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_input.h"
#include "plot_table.h"

static const int64_t BIG = (int64_t)1 << 40;

/* The run of (series, budget), added if new; `last` is tried first (a run's rows are usually together). */
static int run_of(plot_data *d, int series, int64_t budget, size_t *cap, size_t *last, kv_err *err)
{
    if (*last < d->n_runs && d->runs[*last].series == series && d->runs[*last].budget == budget) return KV_OK;
    for (size_t r = 0; r < d->n_runs; r++)
        if (d->runs[r].series == series && d->runs[r].budget == budget) {
            *last = r;
            return KV_OK;
        }
    if (d->n_runs == *cap) {
        size_t n = *cap ? 2 * *cap : 16;
        plot_pca_run *runs = realloc(d->runs, n * sizeof *runs);
        if (!runs) return kv_fail(err, KV_EFAIL, "plot: out of memory for %zu runs", n);
        d->runs = runs, *cap = n;
    }
    d->runs[d->n_runs] = (plot_pca_run){.series = series, .budget = budget};
    *last = d->n_runs++;
    return KV_OK;
}

/* Pass 1: every row checked, its run found (run[r]); position of the detail head's rows, else -1. */
static int kept_rows(plot_data *d, const csv_table *c, size_t *run, int64_t *pos, kv_err *err)
{
    const plot_meta *m = &d->meta;
    size_t cap = 0, last = 0;
    int rc = KV_OK;
    for (size_t r = 0; !rc && r < c->n_rows; r++) {
        int series;
        int64_t budget, l, k, t;
        if ((rc = plot_table_series(d, c, r, 0, &series, err)) || (rc = csv_int(c, r, 3, 1, BIG, &budget, err)) ||
            (rc = csv_int(c, r, 6, 0, m->L - 1, &l, err)) || (rc = csv_int(c, r, 7, 0, m->K - 1, &k, err)) ||
            (rc = csv_int(c, r, 8, 0, m->T - 1, &t, err)) || (rc = run_of(d, series, budget, &cap, &last, err)))
            break;
        run[r] = last;
        pos[r] = l == d->pca.layer && k == d->pca.kv_head ? t : -1;
    }
    return rc;
}

static int load_kept(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_PCA_KEPT, &c, err);
    size_t *run = NULL;
    int64_t *pos = NULL;
    if (!rc && c.n_rows) {
        run = kv_calloc(c.n_rows, sizeof *run, c.path, err);
        pos = kv_calloc(c.n_rows, sizeof *pos, c.path, err);
        rc = run && pos ? kept_rows(d, &c, run, pos, err) : KV_EFAIL;
    }
    plot_pca *p = &d->pca;
    if (!rc && d->n_runs && !(p->kept = kv_calloc(d->n_runs * (size_t)d->meta.T, 1, c.path, err))) rc = KV_EFAIL;
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        if (pos[r] < 0) continue;
        unsigned char *flag = &p->kept[run[r] * (size_t)d->meta.T + (size_t)pos[r]];
        if ((*flag)++)
            rc = csv_fail(&c, r, err, "position %lld of (layer %lld, kv_head %lld) is listed twice for this run",
                          (long long)pos[r], (long long)p->layer, (long long)p->kv_head);
    }
    free(run), free(pos);
    csv_free(&c);
    return rc;
}

/* One row: indices in range, not seen before, numbers. */
static int pca_row(plot_data *d, const csv_table *c, size_t r, unsigned char *seen, kv_err *err)
{
    const plot_meta *m = &d->meta;
    plot_pca *p = &d->pca;
    int64_t l, k, t;
    double x, y;
    int rc;
    if ((rc = csv_int(c, r, 0, 0, m->L - 1, &l, err)) || (rc = csv_int(c, r, 1, 0, m->K - 1, &k, err)) ||
        (rc = csv_int(c, r, 2, 0, m->T - 1, &t, err)) || (rc = csv_double(c, r, 3, false, &x, err)) ||
        (rc = csv_double(c, r, 4, false, &y, err)))
        return rc;
    size_t at = (size_t)((l * m->K + k) * m->T + t);
    if (seen[at]++)
        return csv_fail(c, r, err, "(layer %lld, kv_head %lld, position %lld) appears twice", (long long)l,
                        (long long)k, (long long)t);
    if (l == p->layer && k == p->kv_head) p->pc1[t] = x, p->pc2[t] = y;
    return KV_OK;
}

static int load_pca(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_PCA, &c, err);
    size_t want = (size_t)(d->meta.L * d->meta.K * d->meta.T);
    if (!rc && c.n_rows && c.n_rows != want)
        rc = kv_fail(err, KV_EINPUT, "%s: %zu rows, expected L x K x T = %zu", c.path, c.n_rows, want);
    unsigned char *seen = NULL;
    plot_pca *p = &d->pca;
    if (!rc && c.n_rows) {
        seen = kv_calloc(want, 1, c.path, err);
        p->pc1 = kv_calloc((size_t)p->n, sizeof *p->pc1, c.path, err);
        p->pc2 = kv_calloc((size_t)p->n, sizeof *p->pc2, c.path, err);
        if (!seen || !p->pc1 || !p->pc2) rc = KV_EFAIL;
    }
    for (size_t r = 0; !rc && r < c.n_rows; r++) rc = pca_row(d, &c, r, seen, err);
    if (!rc && c.n_rows) d->has_pca = true;
    free(seen);
    csv_free(&c);
    return rc;
}

static int load_var(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_PCA_VAR, &c, err);
    plot_pca *p = &d->pca;
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        int64_t l, k;
        double v[3];
        if ((rc = csv_int(&c, r, 0, 0, d->meta.L - 1, &l, err)) ||
            (rc = csv_int(&c, r, 1, 0, d->meta.K - 1, &k, err)))
            break;
        for (int i = 0; !rc && i < 3; i++) rc = csv_double(&c, r, 2 + i, false, &v[i], err);
        if (!rc && (v[0] < 0 || v[1] < 0 || v[2] < v[0] + v[1] - 1e-6 * (v[2] > 0 ? v[2] : 1)))
            rc = csv_fail(&c, r, err, "variances must be >= 0 and var_total >= var_pc1 + var_pc2");
        if (!rc && l == p->layer && k == p->kv_head)
            p->has_var = true, p->var_pc1 = v[0], p->var_pc2 = v[1], p->var_total = v[2];
    }
    csv_free(&c);
    return rc;
}

int plot_input_pca(plot_data *d, kv_err *err)
{
    /* the detail layer's kv head, for every PCA file */
    d->pca.n = d->meta.T;
    d->pca.layer = d->meta.detail_layer;
    d->pca.kv_head = d->meta.detail_head / (d->meta.H / d->meta.K);
    int rc = load_pca(d, err);
    if (!rc) rc = load_kept(d, err);
    if (!rc) rc = load_var(d, err);
    return rc;
}
