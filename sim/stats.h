/* stats: the per-head summary (docs/sim.md#metrics) over the evaluated queries
 * of one phase: mean and p95 (linear interpolation between order statistics) of
 * the output error, mean and min of the recall. */
#ifndef KV_SIM_STATS_H
#define KV_SIM_STATS_H

#include <stdint.h>

#include "sim/replay.h"

/* errs, recalls, pos: [n] per evaluated query. errs is reordered in place
 * (callers pass a copy). phase: PHASE_PREFILL (pos < prompt_len), PHASE_DECODE, PHASE_ALL. */
void sim_stats_of(double *errs, const double *recalls, const int64_t *pos, int64_t n, int64_t prompt_len,
                  int phase, sim_stats *s);

/* The k-th smallest of x[0..n) (0-based), with x reordered so that x[0..k)
 * <= x[k] <= x[k+1..n). Quickselect, expected O(n); deterministic. */
double sim_select_kth(double *x, int64_t n, int64_t k);

#endif
