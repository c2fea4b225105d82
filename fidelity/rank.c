/* The rank statistics of `kvtrace fidelity` (see rank.h). */
#include "fidelity/rank.h"

#include <stdlib.h>
#include <string.h>

#include "fidelity/kl.h"

bool fid_ranked(const fid_config *c)
{
    return !c->pc->iface->never_evicts;
}

/* Is (a, b) a pair offline replay orders wrongly? Both evict, same budget,
 * offline strictly prefers a (lower out_rel_err) while online KL is strictly
 * higher for a. */
bool fid_misordered(const fid_config *a, const fid_config *b)
{
    return fid_ranked(a) && fid_ranked(b) && a->budget == b->budget && a->out_rel_err_mean < b->out_rel_err_mean &&
           a->kl_mean > b->kl_mean;
}

void fid_rank_stats(const fid_results *r, int64_t budget, fid_rank *out)
{
    memset(out, 0, sizeof *out);
    double *x = malloc(sizeof(double) * (size_t)(3 * (r->n > 0 ? r->n : 1)));
    KV_ASSERT(x != NULL);
    double *y = x + r->n, *z = y + r->n;
    int64_t n = 0;
    for (int i = 0; i < r->n; i++) {
        const fid_config *c = &r->c[i];
        if (!fid_ranked(c) || (budget > 0 && c->budget != budget)) continue;
        x[n] = c->out_rel_err_mean, y[n] = c->kl_mean, z[n] = 1.0 - c->attn_recall_mean, n++;
        for (int j = 0; j < r->n; j++) {
            const fid_config *d = &r->c[j];
            if (j == i || !fid_ranked(d) || d->budget != c->budget) continue;
            out->pairs += j > i && c->out_rel_err_mean != d->out_rel_err_mean;
            out->misordered += fid_misordered(c, d);
        }
    }
    out->n_configs = n;
    out->rho_err = fid_spearman(x, y, n);
    out->rho_recall = fid_spearman(z, y, n);
    free(x);
}
