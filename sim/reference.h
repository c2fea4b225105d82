/* reference: the full-cache attention every configuration is measured
 * against, computed once per layer and shared by all of them (docs/sim.md#metrics):
 * per query head h and position i, the output o_full(i) = Σ_{j<=i} a_ij v_j
 * and the softmax normaliser (row max m_i, log-sum-exp lse_i) so that any
 * subset's attention mass a^full over it can be summed later. Queries are
 * processed in blocks of rows, the G query heads of a kv head stacked: one
 * sgemm per block against the visible keys into an O(G·block·T) scratch,
 * never a T x T matrix. */
#ifndef KV_SIM_REFERENCE_H
#define KV_SIM_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "trace/trace.h"

typedef struct {
    int64_t T, D, H, K;
    float *out;     /* [H][T][D] o_full */
    double *lse;    /* [H][T] log Σ_{j<=i} exp(s_ij), s = q.k/sqrt(D) in float */
} sim_reference;

/* q [H][T][D], k and v [K][T][D] of one layer; kv heads (with their query
 * heads) split over `threads`, each with a G*block*T scratch. Returns -1 when out of memory. */
int sim_reference_compute(sim_reference *r, const float *q, const float *k, const float *v, int64_t T,
                          int64_t D, int64_t H, int64_t K, int threads);

/* 1 when an output or normaliser is inf or NaN (finite keys, queries or
 * values whose float32 scores or sums overflow): the first such query head
 * and position in *head, *pos; else 0. */
int sim_reference_nonfinite(const sim_reference *r, int64_t *head, int64_t *pos);

/* Whether sim takes layer references from the trace: it has /attention/out
 * and /attention/lse (full-mode traces of capture and synth) and the
 * environment does not say KVTRACE_SIM_REFERENCE=recompute. */
#define SIM_REFERENCE_ENV "KVTRACE_SIM_REFERENCE"
bool sim_reference_recorded(const trace *tr);

/* Layer l's recorded reference (/attention/out, /attention/lse as float32)
 * into r, allocated here: shapes were checked on open, values are checked
 * finite as read (KV_EINPUT naming the file, dataset, head and position). */
int sim_reference_read(sim_reference *r, trace *tr, int64_t l, kv_err *err);

void sim_reference_free(sim_reference *r);

/* Positions per block (at most), and the stacked rows (G heads x block) one
 * sgemm aims for: the grouped query heads share their kv head's keys. */
enum { SIM_REF_BLOCK = 64, SIM_REF_ROWS = 256 };

#endif
