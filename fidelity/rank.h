/* rank: how well offline replay ranks the configurations against the
 * model (SPEC §11): Spearman ρ between sim's error and the online KL, and
 * the same-budget pairs offline replay orders the other way round. What
 * summary.csv, misordered.csv, the figure, the report and the table on
 * stdout show. */
#ifndef KV_FIDELITY_RANK_H
#define KV_FIDELITY_RANK_H

#include <stdbool.h>
#include <stdint.h>

#include "fidelity/fidelity.h"

typedef struct {
    int64_t n_configs;       /* configurations that evict (full left out) */
    double rho_err;          /* Spearman ρ(out_rel_err_mean, kl_mean) */
    double rho_recall;       /* Spearman ρ(1 − attn_recall_mean, kl_mean) */
    int64_t pairs;           /* same-budget pairs with distinct offline error */
    int64_t misordered;      /* of them, those whose KL order is the opposite */
} fid_rank;

/* Configurations in ρ and in the pairs: those that evict (not `full`). */
bool fid_ranked(const fid_config *c);

/* a is preferred offline (lower out_rel_err) but has a higher online KL, at the same budget. */
bool fid_misordered(const fid_config *a, const fid_config *b);

/* ρ and pair counts over the configurations of `budget` (0: all budgets). */
void fid_rank_stats(const fid_results *r, int64_t budget, fid_rank *out);

#endif
