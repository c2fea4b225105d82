/* sim_alloc: the allocators' inputs and checks before a sim run, and the
 * lock-step replay's memory estimate (sim_alloc.c). */
#ifndef KV_SIM_ALLOC_H
#define KV_SIM_ALLOC_H

#include "core/kv_error.h"
#include "allocators/alloc.h"
#include "sim/sim.h"
#include "trace/trace.h"

enum { SIM_MAX_ALLOCATORS = 256 };

/* The run's own copies of the allocators, with their head scores attached. */
typedef struct {
    alloc_config allocs[SIM_MAX_ALLOCATORS];
    double *scores[SIM_MAX_ALLOCATORS];   /* duo's ranking from the trace's column sums, per allocator */
    double *file;                         /* [L][K] --head-scores, shared */
} sim_alloc_plan;

/* Reads --head-scores (KV_EINPUT naming the file and row) or duo's ranking
 * from the trace, refuses allocator x policy pairs that cannot work
 * (KV_EUSAGE, one line), and points o->allocators at ap's copies. */
int sim_alloc_prepare(sim_alloc_plan *ap, sim_opts *o, trace *tr, kv_err *err);
void sim_alloc_plan_free(sim_alloc_plan *ap);

/* The estimated peak bytes of the lock-step replay of o's model-wide
 * configurations (0 when none; *n_model of them), and the refusal above
 * --max-memory (KV_EUSAGE, with the numbers). */
int sim_lockstep_check(const sim_opts *o, const trace_meta *m, kv_err *err);

/* Before a trace's replay, on stderr: a note when it was captured with eviction inside the
 * model (even under --quiet), and the replay's cost when it is large (unless --quiet). */
void sim_note_evict(const sim_opts *o, const trace_meta *m);
void sim_print_cost(const sim_opts *o, const trace_meta *m, bool recorded);

#endif
