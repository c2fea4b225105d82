/* kl: what fidelity measures at one position from two next-token
 * distributions given as logits (docs/fidelity.md#what-is-measured-and-the-choices-made):
 * KL(p_full || p_evict), whether
 * their greedy tokens agree, and the log-probability each gives the token
 * that follows. One row at a time (streaming: no run's logits are kept). */
#ifndef KV_FIDELITY_KL_H
#define KV_FIDELITY_KL_H

#include <stdint.h>

typedef struct {
    double kl;              /* KL(p || q) in nats, >= 0 */
    int32_t argmax_p, argmax_q; /* greedy tokens (ties: the lowest id, as capture's greedy) */
    double logp_p, logp_q;  /* log p(next), log q(next); 0 when next < 0 */
} fid_row;

/* p = softmax(lp[V]), q = softmax(lq[V]), all in double:
 * KL = Σ_i p_i (log p_i − log q_i) with log-softmax computed stably; terms
 * with p_i = 0 add 0. next: the token that follows (-1: none). */
void fid_row_compare(const float *lp, const float *lq, int64_t V, int32_t next, fid_row *out);

/* The greedy token of logits[V] (ties: the lowest id). */
int32_t fid_argmax(const float *logits, int64_t V);

/* p95 (linear interpolation between order statistics, as sim's) of x[0..n);
 * x is reordered. 0 when n = 0. */
double fid_p95(double *x, int64_t n);

/* Spearman ρ (Pearson correlation of average ranks) of a[n] and b[n]; NaN
 * when either is constant or n < 2. */
double fid_spearman(const double *a, const double *b, int64_t n);

#endif
