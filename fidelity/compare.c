/* The offline side of `kvtrace fidelity`: sim's summary.csv (phase=all) for
 * every configuration, read with plots' one CSV reader. */
#include <stdlib.h>
#include <string.h>

#include "fidelity/fidelity.h"
#include "core/csv.h"

static const char *const COLS[] = {"policy", "params", "budget", "chunk", "decode_chunk", "eval_stride", "phase",
                                   "n_queries", "out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean"};
enum { C_POLICY, C_PARAMS, C_BUDGET, C_PHASE = 6, C_ERR = 8, C_P95, C_RECALL, N_COLS };

/* The configuration row i matches, or NULL. */
static fid_config *match(fid_results *r, const csv_table *csv, size_t row, int64_t budget)
{
    for (int i = 0; i < r->n; i++) {
        fid_config *c = &r->c[i];
        if (c->budget == budget && strcmp(csv_cell(csv, row, C_POLICY), c->pc->iface->name) == 0 &&
            strcmp(csv_cell(csv, row, C_PARAMS), c->pc->canonical) == 0)
            return c;
    }
    return NULL;
}

int fid_read_sim(const char *sim_dir, fid_results *r, kv_err *err)
{
    csv_table csv;
    bool present = false;
    int rc = csv_read(&csv, sim_dir, "summary.csv", &present, err);
    if (rc) return rc;
    if (!present) return kv_fail(err, KV_EFAIL, "%s/summary.csv: sim wrote no summary", sim_dir);
    rc = csv_expect(&csv, COLS, N_COLS, true, err);
    bool *seen = rc ? NULL : calloc((size_t)(r->n > 0 ? r->n : 1), sizeof *seen);
    if (!rc && !seen) rc = kv_fail(err, KV_EFAIL, "fidelity: out of memory");
    for (size_t row = 0; !rc && row < csv.n_rows; row++) {
        int64_t budget;
        if (strcmp(csv_cell(&csv, row, C_PHASE), "all") != 0) continue;
        if ((rc = csv_int(&csv, row, C_BUDGET, 1, INT64_MAX, &budget, err))) break;
        fid_config *c = match(r, &csv, row, budget);
        if (!c) continue;
        seen[c - r->c] = true;
        rc = csv_double(&csv, row, C_ERR, false, &c->out_rel_err_mean, err);
        if (!rc) rc = csv_double(&csv, row, C_P95, false, &c->out_rel_err_p95, err);
        if (!rc) rc = csv_double(&csv, row, C_RECALL, false, &c->attn_recall_mean, err);
    }
    for (int i = 0; !rc && i < r->n; i++)
        if (!seen[i])
            rc = kv_fail(err, KV_EFAIL, "%s/summary.csv: no phase=all row for %s:%s at budget %lld", sim_dir,
                         r->c[i].pc->iface->name, r->c[i].pc->canonical, (long long)r->c[i].budget);
    free(seen);
    csv_free(&csv);
    return rc;
}

void fid_results_free(fid_results *r)
{
    for (int i = 0; r->c && i < r->n; i++) free(r->c[i].kl), free(r->c[i].agree);
    free(r->c);
    memset(r, 0, sizeof *r);
}
