/* pca: the two principal axes of one (layer, kv head)'s keys, for the
 * kept-vs-evicted scatter of figure 3 (docs/analyze.md#pcacsv-pca_keptcsv-pca_varcsv).
 *
 * Covariance C = Xcᵀ Xc / (T − 1) of the centred keys Xc (T = 1: divided by 1),
 * in double (BLAS dsyrk); its top two eigenvectors by LAPACKE_dsyevr. Sign
 * rule: each axis is flipped so that its entry of largest magnitude is
 * positive (the first such entry when several tie), so equal inputs give
 * equal pictures whatever the solver's sign choice. Projections are of the
 * centred keys: pc_a(j) = (k_j − mean) · v_a.
 */
#ifndef KV_PCA_H
#define KV_PCA_H

#include <stdint.h>

typedef struct {
    double var[2];     /* the two largest eigenvalues of C, largest first (0 when D < 2 for the second) */
    double var_total;  /* trace of C: the total variance */
} pca_summary;

/* Doubles of scratch pca_keys needs: centred keys, covariance, two axes, the mean. */
int64_t pca_scratch(int64_t T, int64_t D);

/* keys [T][D] → summary and pc [T][2] (projections on axis 1 and 2).
 * axes (may be NULL): [2][D] the unit axes after the sign rule.
 * Returns 0, or the LAPACKE error code when the eigensolver fails. */
int pca_keys(const float *keys, int64_t T, int64_t D, double *scratch, pca_summary *out, double *pc,
             double *axes);

/* Flips v [D] so that its largest-|component| entry (the first of equals) is positive. */
void pca_fix_sign(double *v, int64_t D);

#endif
