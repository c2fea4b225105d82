/* spearman: how well key distinctiveness ranks the attention a key receives
 * (the KeyDiff paper's measurement), per (layer, query head)
 * (docs/analyze.md#spearmancsv--layerq_headkv_headrho_pairwiserho_anchor):
 *
 *   x_j = −mean_{m≠j} cos(k_j, k_m)      (rho_pairwise; keys of the head's kv head)
 *   x_j = −cos(k_j, μ)                   (rho_anchor; μ the mean of the raw keys)
 *   y_j = colsum_j / (T − j)             (mean weight per query that can see j)
 *   ρ   = Pearson correlation of the average ranks of x and y (ties share ranks).
 *
 * x depends only on the kv head, so callers compute it once per kv head and
 * correlate it with each of its query heads' y. A key of zero norm has cosine
 * 0 with everything. ρ is NaN when x or y is constant (or T < 2).
 */
#ifndef KV_SPEARMAN_H
#define KV_SPEARMAN_H

#include <stdbool.h>
#include <stdint.h>

/* keys [T][D] → x [T] = −mean_{m≠j} cos(k_j, k_m) (0 when T = 1) in O(T·D)
 * through Σ_{m≠j} k̂_j·k̂_m = k̂_j·Σ_m k̂_m − k̂_j·k̂_j, all in double (never
 * the T×T cosines: the unit and script tests keep that as the check).
 * sum: D doubles of scratch. */
void spearman_x_pairwise(const float *keys, int64_t T, int64_t D, double *sum, double *x);

/* keys [T][D] → x [T] = −cos(k_j, μ); μ the mean of the raw keys, or with
 * `normalised` the mean of k_j/‖k_j‖ (whose ranking equals the pairwise one).
 * mu: D doubles of scratch. All in double. */
void spearman_x_anchor(const float *keys, int64_t T, int64_t D, bool normalised, double *mu, double *x);

/* colsum [T] → y [T] = colsum_j / (T − j). */
void spearman_y(const float *colsum, int64_t T, double *y);

/* Average ranks (1-based) of v [n] into rank [n]; idx: n scratch indices. */
void spearman_ranks(const double *v, int64_t n, double *rank, int64_t *idx);


/* ρ of x [n] and y [n]; scratch: 2n doubles and n indices. */
double spearman_rho(const double *x, const double *y, int64_t n, double *scratch, int64_t *idx);

#endif
