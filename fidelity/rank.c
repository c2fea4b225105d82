/* The rank statistics of `kvtrace fidelity` (see rank.h). */
#include "fidelity/rank.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fidelity/kl.h"
#include "plan/plan.h"

bool fid_same_series(const fid_config *a, const fid_config *b)
{
    return a->pc->iface == b->pc->iface && strcmp(a->pc->canonical, b->pc->canonical) == 0 &&
           strcmp(a->alloc, b->alloc) == 0;
}

bool fid_ranked(const fid_config *c)
{
    return plan_evicts(c->pc) && !isnan(c->out_rel_err_mean);   /* NaN: sim measured no query */
}

/* Is (a, b) a pair offline replay orders wrongly? Both evict, same budget and chunk,
 * offline strictly prefers a (lower out_rel_err) while online KL is strictly
 * higher for a. */
bool fid_misordered(const fid_config *a, const fid_config *b)
{
    return fid_ranked(a) && fid_ranked(b) && a->budget == b->budget && a->chunk == b->chunk &&
           a->out_rel_err_mean < b->out_rel_err_mean &&
           a->kl_mean > b->kl_mean;
}

void fid_rank_stats(const fid_results *r, int64_t budget, int64_t chunk, fid_rank *out)
{
    memset(out, 0, sizeof *out);
    double *x = malloc(sizeof(double) * (size_t)(3 * (r->n > 0 ? r->n : 1)));
    KV_ASSERT(x != NULL);
    double *y = x + r->n, *z = y + r->n;
    int64_t n = 0;
    for (int i = 0; i < r->n; i++) {
        const fid_config *c = &r->c[i];
        if (!fid_ranked(c) || (budget > 0 && (c->budget != budget || c->chunk != chunk))) continue;
        x[n] = c->out_rel_err_mean, y[n] = c->kl_mean, z[n] = 1.0 - c->attn_recall_mean, n++;
        for (int j = 0; j < r->n; j++) {
            const fid_config *d = &r->c[j];
            if (j == i || !fid_ranked(d) || d->budget != c->budget || d->chunk != c->chunk) continue;
            out->pairs += j > i && c->out_rel_err_mean != d->out_rel_err_mean;
            out->misordered += fid_misordered(c, d);
        }
    }
    out->n_configs = n;
    out->rho_err = fid_spearman(x, y, n);
    out->rho_recall = fid_spearman(z, y, n);
    free(x);
}

void fid_headline_compute(const fid_results *r, fid_headline *h)
{
    memset(h, 0, sizeof *h);
    const size_t cap = (size_t)(r->n > 0 ? r->n : 1);
    h->budget = malloc(cap * sizeof *h->budget);
    h->chunk = malloc(cap * sizeof *h->chunk);
    h->within = malloc(cap * sizeof *h->within);
    KV_ASSERT(h->budget && h->chunk && h->within);
    for (int i = 0; i < r->n; i++) {   /* every (budget, chunk) an evicting configuration ran at (n/a where none is ranked) */
        const fid_config *c = &r->c[i];
        if (!plan_evicts(c->pc)) continue;
        int b = 0;
        while (b < h->n && !(h->budget[b] == c->budget && h->chunk[b] == c->chunk)) b++;
        if (b == h->n) h->budget[h->n] = c->budget, h->chunk[h->n++] = c->chunk;
        if (c->chunk != r->c[0].chunk) h->several_chunks = true;
    }
    double sum_err = 0, sum_recall = 0;
    int n_recall = 0;
    for (int b = 0; b < h->n; b++) {
        fid_rank *k = &h->within[b];
        fid_rank_stats(r, h->budget[b], h->chunk[b], k);
        h->pairs += k->pairs, h->misordered += k->misordered;
        if (!isnan(k->rho_err)) sum_err += k->rho_err, h->n_defined++;
        if (!isnan(k->rho_recall)) sum_recall += k->rho_recall, n_recall++;
    }
    h->rho_err = h->n_defined ? sum_err / h->n_defined : NAN;
    h->rho_recall = n_recall ? sum_recall / n_recall : NAN;
    fid_rank_stats(r, 0, 0, &h->pooled);
}

void fid_headline_free(fid_headline *h)
{
    free(h->budget);
    free(h->chunk);
    free(h->within);
    memset(h, 0, sizeof *h);
}

const char *fid_group_text(const fid_headline *h, int b, char *buf, int cap)
{
    if (h->several_chunks) snprintf(buf, (size_t)cap, "N = %lld, B = %lld", (long long)h->budget[b], (long long)h->chunk[b]);
    else snprintf(buf, (size_t)cap, "N = %lld", (long long)h->budget[b]);
    return buf;
}

const char *fid_rho_text(double rho, char *buf, int cap)
{
    if (isnan(rho)) snprintf(buf, (size_t)cap, "n/a");
    else snprintf(buf, (size_t)cap, "%.3f", rho);
    return buf;
}
