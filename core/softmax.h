/* softmax: the row operations every attention computation here shares
 * (capture's attention kernel, exact column sums, later the replay engine),
 * written with explicit lanes so that the compiler vectorises them. */
#ifndef KV_SOFTMAX_H
#define KV_SOFTMAX_H

#include <stdint.h>

/* max of s[0..n), n >= 1 */
float softmax_row_max(const float *s, int64_t n);

/* s[j] = exp(s[j] - mx) in place (kv_expf); returns the sum, taken in double
 * in 8 lanes combined in a fixed order (deterministic). */
double softmax_row_exp(float *s, int64_t n, float mx);

/* s[0..len) becomes its softmax (normalised in float), s[len..cols) zero
 * (the masked part of a causal row). Returns log Σ_j exp(s_j), the row's
 * log-sum-exp, in double; *mx (NULL: not wanted) gets the row's largest s_j. */
double softmax_row(float *s, int64_t len, int64_t cols, float *mx);

/* acc[j] += scale * x[j] for j < n, in double (column sums of weights). */
void softmax_accumulate(double *acc, const float *x, double scale, int64_t n);

#endif
