/* The PCA inputs of figure 3: pca_runs.csv (which run each kept column is),
 * pca.csv (projections and kept flags for every layer, kv head, position;
 * only the detail layer's kv head is kept in memory) and pca_var.csv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_input.h"
#include "plot_table.h"

static const int64_t BIG = (int64_t)1 << 40;

static int load_runs(plot_data *d, kv_err *err)
{
    static const char *const COLS[] = {"column", "policy", "params", "budget"};
    csv_table c;
    int rc = plot_table_open(d, PF_PCA_RUNS, COLS, 4, false, &c, err);
    if (!rc && c.n_rows) d->runs = kv_calloc(c.n_rows, sizeof *d->runs, c.path, err), rc = d->runs ? 0 : 1;
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        char want[32];
        snprintf(want, sizeof want, "run%zu", r + 1);
        if (strcmp(csv_cell(&c, r, 0), want) != 0)
            rc = csv_fail(&c, r, err, "column is '%.40s', expected '%s'", csv_cell(&c, r, 0), want);
        if (rc || (rc = plot_table_series(d, &c, r, 1, &d->runs[r].series, err)) ||
            (rc = csv_int(&c, r, 3, 1, BIG, &d->runs[r].budget, err)))
            break;
        d->n_runs++;
    }
    csv_free(&c);
    return rc;
}

/* pca.csv's header after the five fixed columns: exactly run1..runN of pca_runs.csv. */
static int check_run_columns(const plot_data *d, const csv_table *c, kv_err *err)
{
    if ((size_t)(c->n_cols - 5) != d->n_runs)
        return kv_fail(err, KV_EINPUT, "%s:1: %d run columns, but %s/pca_runs.csv %s %zu runs", c->path,
                       c->n_cols - 5, d->dir, d->present[PF_PCA_RUNS] ? "lists" : "is missing:", d->n_runs);
    for (int k = 5; k < c->n_cols; k++) {
        char want[32];
        snprintf(want, sizeof want, "run%d", k - 4);
        if (strcmp(c->header[k], want) != 0)
            return kv_fail(err, KV_EINPUT, "%s:1: column %d is '%.40s', expected '%s'", c->path, k + 1,
                           c->header[k], want);
    }
    return KV_OK;
}

static int alloc_pca(plot_data *d, const csv_table *c, kv_err *err)
{
    plot_pca *p = &d->pca;
    p->n = d->meta.T;
    p->layer = d->meta.detail_layer;
    p->kv_head = d->meta.detail_head / (d->meta.H / d->meta.K);
    p->pc1 = kv_calloc((size_t)p->n, sizeof *p->pc1, c->path, err);
    p->pc2 = kv_calloc((size_t)p->n, sizeof *p->pc2, c->path, err);
    p->kept = kv_calloc((d->n_runs ? d->n_runs : 1) * (size_t)p->n, 1, c->path, err);
    return p->pc1 && p->pc2 && p->kept ? KV_OK : KV_EFAIL;
}

/* One row: indices in range, not seen before, numbers, kept flags 0/1. */
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
    bool mine = l == p->layer && k == p->kv_head;
    if (mine) p->pc1[t] = x, p->pc2[t] = y;
    for (int col = 5; col < c->n_cols; col++) {
        const char *s = csv_cell(c, r, col);
        if (strcmp(s, "0") != 0 && strcmp(s, "1") != 0)
            return csv_fail(c, r, err, "%s is '%.40s', expected 0 or 1", c->header[col], s);
        if (mine) p->kept[(size_t)(col - 5) * (size_t)p->n + (size_t)t] = s[0] == '1';
    }
    return KV_OK;
}

static int load_pca(plot_data *d, kv_err *err)
{
    static const char *const COLS[] = {"layer", "kv_head", "position", "pc1", "pc2"};
    csv_table c;
    int rc = plot_table_open(d, PF_PCA, COLS, 5, true, &c, err);
    if (!rc && d->present[PF_PCA]) rc = check_run_columns(d, &c, err);
    size_t want = (size_t)(d->meta.L * d->meta.K * d->meta.T);
    if (!rc && c.n_rows && c.n_rows != want)
        rc = kv_fail(err, KV_EINPUT, "%s: %zu rows, expected L x K x T = %zu", c.path, c.n_rows, want);
    unsigned char *seen = NULL;
    if (!rc && c.n_rows) {
        seen = kv_calloc(want, 1, c.path, err);
        rc = seen ? alloc_pca(d, &c, err) : KV_EFAIL;
    }
    for (size_t r = 0; !rc && r < c.n_rows; r++) rc = pca_row(d, &c, r, seen, err);
    if (!rc && c.n_rows) d->has_pca = true;
    free(seen);
    csv_free(&c);
    return rc;
}

static int load_var(plot_data *d, kv_err *err)
{
    static const char *const COLS[] = {"layer", "kv_head", "var_pc1", "var_pc2", "var_total"};
    csv_table c;
    int rc = plot_table_open(d, PF_PCA_VAR, COLS, 5, false, &c, err);
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
    /* the detail layer's kv head, also for pca_var.csv when pca.csv is absent */
    d->pca.layer = d->meta.detail_layer;
    d->pca.kv_head = d->meta.detail_head / (d->meta.H / d->meta.K);
    int rc = load_runs(d, err);
    if (!rc) rc = load_pca(d, err);
    if (!rc) rc = load_var(d, err);
    return rc;
}
