/* rank: how well offline replay ranks the configurations against the
 * model (docs/fidelity.md#what-is-measured-and-the-choices-made): Spearman ρ between sim's error and the online KL, and
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

/* The same policy, params and allocator (one series of the figure; budgets aside). */
bool fid_same_series(const fid_config *a, const fid_config *b);

/* Configurations in ρ and in the pairs: those that evict (not `full`). */
bool fid_ranked(const fid_config *c);

/* a is preferred offline (lower out_rel_err) but has a higher online KL, at the same budget and chunk. */
bool fid_misordered(const fid_config *a, const fid_config *b);

/* ρ and pair counts over the configurations of (budget, chunk) (budget 0: all of them, pooled). */
void fid_rank_stats(const fid_results *r, int64_t budget, int64_t chunk, fid_rank *out);

/* The headline: ρ within each budget (and chunk, with several: a group is one budget at one chunk).
 * Pooled over budgets, ρ
 * is inflated by the budget effect (a larger N lowers both the offline error
 * and the online KL, so the budget alone ranks most pairs of configurations
 * across budgets); within one budget only the policies are compared, which is
 * the question a user asks. */
typedef struct {
    int n;                    /* (budget, chunk) groups with a configuration that evicts, in order of appearance */
    int64_t *budget, *chunk;  /* [n] */
    bool several_chunks;      /* the groups' chunks differ (their labels then name the chunk) */
    fid_rank *within;         /* [n]: each group's ρ and pairs */
    int n_defined;            /* budgets whose ρ(out_rel_err, KL) is a number (>= 2 distinct configurations) */
    double rho_err, rho_recall;  /* means of the defined within-budget ρ (NaN: none) */
    int64_t pairs, misordered;   /* summed over the budgets */
    fid_rank pooled;          /* every budget together (inflated, shown second and labelled so) */
} fid_headline;

void fid_headline_compute(const fid_results *r, fid_headline *h);
void fid_headline_free(fid_headline *h);

/* Group b as a label: "N = 32", or "N = 32, B = 16" with several chunks. */
const char *fid_group_text(const fid_headline *h, int b, char *buf, int cap);

/* "0.976", or "n/a" for NaN (a budget with fewer than two configurations). */
const char *fid_rho_text(double rho, char *buf, int cap);

#endif
