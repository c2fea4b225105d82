/* anchor: keydiff's anchor sum S = Σ_m k̂_m (k̂ = k/‖k‖) kept exact, so that
 * it can be updated step by step with the keys that join and leave the
 * candidates and still equal the sum computed from scratch bit for bit
 * (internal to policies/; docs/policies.md, "keydiff's exact anchor").
 *
 * Each component of k̂ (at most 1 in magnitude) is rounded to a multiple of
 * 2^-ANCHOR_FRAC_BITS (2^-36: within 7.3e-12); a sum of fewer than
 * ANCHOR_MAX_N such values, and every partial sum, is a multiple of 2^-36
 * below 2^17, so exact in double, in any order, added or subtracted. Above
 * ANCHOR_MAX_N candidates callers use the plain double sum instead (keydiff
 * and the expressions' cos_anchor decide by the same n, so they still agree). */
#ifndef KV_POLICY_ANCHOR_H
#define KV_POLICY_ANCHOR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"

enum { ANCHOR_FRAC_BITS = 36 };
#define ANCHOR_MAX_N ((int64_t)1 << 16)

/* sum[D] = Σ_j of rows_j / norms_j rounded, from scratch (a zero row adds
 * nothing); inv: n doubles of scratch (1/norm). */
void anchor_sum(const float *rows, int64_t n, int64_t D, const double *norms, double *inv, double *sum);

/* The same sum kept across steps for one stream: the members (positions
 * ascending, as the engines keep them), each with its norm and rounded row.
 * A zeroed struct starts it empty. anchor_update makes the members the
 * candidates `pos` (subtracting the rows that left, adding those that
 * joined: O(changed·D), plus O(n) on positions), returns their norms in
 * norms[n] and the sum in a->sum; anything unexpected (positions not
 * ascending) rebuilds it from scratch, which gives the same doubles. */
typedef struct {
    int64_t D, n, cap;       /* members; rows in the pool */
    double *sum;             /* [D] */
    int64_t *pos, *npos;     /* [cap] member positions (and the next list) */
    int64_t *row, *nrow;     /* [cap] each member's row of q */
    double *norm, *nnorm;    /* [cap] */
    float *q;                /* [cap][D] each member's key (its split is recomputed when it leaves) */
    int64_t *free_rows;      /* [cap] */
    int64_t n_free;
} anchor_state;

/* keydiff's cosine scores (metric=cos) from a sum of the normalised rows:
 * out[j] = −cos(k_j, sum/n), or with pairwise −(k_j·sum/‖k_j‖ − 1)/(n−1)
 * (0 with one row or a zero row); norms: vm_norm of each row; mu: D doubles
 * of scratch (may be sum itself). One pass over the rows. */
void anchor_cos_scores(const float *rows, int64_t n, int64_t D, const double *norms, const double *sum,
                       bool pairwise, double *mu, double *out);

/* The same from scratch, for the score expressions' cos_anchor* and
 * cos_pairwise: with normed or pairwise (and n < ANCHOR_MAX_N) through the
 * exact sum, so the doubles equal keydiff's; raw (normed false) the mean of
 * the rows as they are. mu: D, w: n doubles of scratch. */
void anchor_cos(const float *rows, int64_t n, int64_t D, const double *norms, bool normed, bool pairwise,
                double *mu, double *w, double *out);

int anchor_update(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, int64_t D, double *norms,
                  kv_err *err);
void anchor_free(anchor_state *a);

#endif
