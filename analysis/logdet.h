/* logdet: the log-det volume of a set of keys, one owner for sim's
 * final_logdet (docs/sim.md#metrics) and the analysis's logdet.csv
 * (docs/analyze.md#logdetcsv--configpolicyparamsbudgetallocatorbudget_fractionlayerkv_headlogdet):
 *   log det(K̂ᵀK̂ / n + 1e-6 I),  K̂ the row-normalised keys [n][D], natural log,
 * by Cholesky (LAPACKE_dpotrf) in double. */
#ifndef KV_LOGDET_H
#define KV_LOGDET_H

#include <stdint.h>

/* keys [n][D]; n >= 1. Returns NaN if the factorisation fails (it cannot for
 * this positive definite matrix unless the input holds NaN). scratch: D*D doubles. */
double logdet_keys(const float *keys, int64_t n, int64_t D, double *scratch);

#endif
