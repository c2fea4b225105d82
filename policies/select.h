/* select: the engine's selection rule
 * (docs/sim.md#the-eviction-step-step-by-step) and the recency helpers the
 * policies share. Plain arrays; nothing here knows any particular policy. */
#ifndef KV_POLICY_SELECT_H
#define KV_POLICY_SELECT_H

#include <stdint.h>

#include "policies/policy.h"

/* Indices of the `budget` kept candidates, written to keep[] in ascending
 * position order; returns how many (min(n, budget)). scratch: n int64s.
 * Scores must never be NaN (policies define every degenerate case, e.g. the
 * cosine with a zero vector is 0); a NaN is treated as -INFINITY. */
int64_t policy_select(const double *scores, const int64_t *pos, int64_t n, int64_t budget,
                      int64_t *keep, int64_t *scratch);

/* idx[0..n) = 0..n-1 sorted best first by policy_select's rule (score
 * descending, NaN as -INFINITY, then later position, then later index):
 * keeping the first k of them is what policy_select keeps for budget k. */
void policy_rank_order(const double *scores, const int64_t *pos, int64_t n, int64_t *idx);

/* ⌊fraction·budget⌋ for the "most recent fraction of N" windows (keydiff
 * window, h2o recent), guarded against 0.29·100 = 28.999…; at most budget. */
int64_t policy_recent_count(double fraction, int64_t budget);

/* Sets scores of the `count` candidates with the latest positions (the last
 * `count` of v, positions being ascending) to +INFINITY. */
void policy_protect_recent(const policy_view *v, int64_t count, double *scores);

#endif
