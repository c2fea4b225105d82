/* anchor: keydiff's anchor sum S = Σ_m k̂_m (k̂ = k/‖k‖), exact, so that its step-by-step
 * update equals the sum from scratch bit for bit (docs/policies.md, "keydiff's exact anchor").
 * Each component of k̂ is rounded to a multiple of 2^-36: below ANCHOR_MAX_N rows every partial
 * sum is a multiple of 2^-36 under 2^17, exact in double in any order. At or above it callers
 * use the plain double sum (keydiff and cos_anchor decide by the same n, so they agree). */
#ifndef KV_CORE_ANCHOR_H
#define KV_CORE_ANCHOR_H

#include <stdbool.h>
#include <stdint.h>
#define ANCHOR_MAX_N ((int64_t)1 << 16)

/* sum[D] = Σ_j rounded rows_j / norms_j from scratch (a zero row adds nothing); inv: n doubles. */
void anchor_sum(const float *rows, int64_t n, int64_t D, const double *norms, double *inv, double *sum);

/* The pieces of a step's update (policies/anchor_step.c keeps the members). anchor_join: rows
 * idx[0..cnt) (all when idx is NULL) join: norms[idx[i]] (vm_norm's values), their rounded k̂ added
 * to sum and, with unit, kept at rows urow[i] of unit [..][D]; inv: cnt doubles of scratch.
 * anchor_leave: the kept rows urow[0..cnt) taken off the sum (exactly what joined). */
void anchor_join(const float *rows, const int64_t *idx, int64_t cnt, int64_t D, double *norms, double *unit,
                 const int64_t *urow, double *sum, double *inv);
void anchor_leave(const double *unit, const int64_t *urow, int64_t cnt, int64_t D, double *sum);

/* keydiff's cosine scores from a sum of the normalised rows: out[j] = −cos(k_j, sum/n), or with
 * pairwise −(k_j·sum/‖k_j‖ − 1)/(n−1) (0 with one row or a zero row); mu: D doubles (may be sum). */
void anchor_cos_scores(const float *rows, int64_t n, int64_t D, const double *norms, const double *sum,
                       bool pairwise, double *mu, double *out);

#endif
