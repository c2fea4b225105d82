/* The offline side of `kvtrace fidelity`: sim's phase=all summary of every
 * configuration, handed over in memory by sim_run (the numbers of the
 * summary.csv rows sim writes into DIR/sim, in full precision). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fidelity/fidelity.h"

int fid_take_sim(const sim_stats *summary, fid_results *r, kv_err *err)
{
    /* one entry per configuration in the same order: fidelity_run gives sim
     * its policies, allocators and budgets, and both number configurations
     * policy-major, then allocator, then budget */
    for (int i = 0; i < r->n; i++) {
        fid_config *c = &r->c[i];
        const sim_stats *s = &summary[i];
        /* NaN: no query was measured (N >= T; docs/sim.md#metrics), and the configuration is not ranked */
        if (isinf(s->err_mean) || isinf(s->err_p95) || isinf(s->recall_mean))
            return kv_fail(err, KV_EINPUT, "fidelity: sim's summary of %s:%s (allocator %s) at budget %lld is not "
                           "finite (out_rel_err_mean %g, out_rel_err_p95 %g, attn_recall_mean %g)", c->pc->iface->name,
                           c->pc->canonical, c->alloc, (long long)c->budget, s->err_mean, s->err_p95, s->recall_mean);
        c->out_rel_err_mean = s->err_mean;
        c->out_rel_err_p95 = s->err_p95;
        c->attn_recall_mean = s->recall_mean;
    }
    return KV_OK;
}

void fid_results_free(fid_results *r)
{
    for (int i = 0; r->c && i < r->n; i++) free(r->c[i].kl), free(r->c[i].agree), free(r->c[i].continuation);
    free(r->continuation_full);
    free(r->c);
    memset(r, 0, sizeof *r);
}
