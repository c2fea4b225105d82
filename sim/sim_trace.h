/* sim's per-trace steps (sim/sim.c), shared with the run over a study (sim/sim_study.c: the
 * split across ranks, the work folder, the outputs). */
#ifndef KV_SIM_TRACE_H
#define KV_SIM_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/results.h"
#include "sim/sim.h"
#include "study/study.h"

typedef struct sim_plan sim_plan;   /* sim/sim.c: the run's options as one trace sees them */

/* One trace of the run: its plan (its own budgets in N and labels) and its
 * results, kept until every trace is done and the directory is written. */
typedef struct {
    sim_plan *p;
    sim_results res;
    bool has_res;
    char stage[STUDY_ID_MAX + 16];   /* the progress stage: "ID: layers" in a study */
} trace_run;

/* One trace's plan and its results' room (opts->trace, opened and closed here): every rank
 * plans every trace, so that rank 0 reads a trace replayed elsewhere into the same shapes. */
int sim_trace_prepare(const sim_opts *opts, trace_run *t, kv_err *err);

/* One trace's replay in parts (sim_study.c: its work units): sim_trace_begin opens opts->trace
 * (planned by sim_trace_prepare) and its progress; sim_trace_layer replays layer l (read once,
 * its reference computed once) for the configurations c with want[c] (all: want NULL) whose
 * allocator is per layer; sim_trace_lockstep the model-wide ones (every layer held at once);
 * sim_trace_end closes it (also after a failure, and when begin failed with *rp set). */
typedef struct sim_replayer sim_replayer;
int sim_trace_begin(const sim_opts *opts, const char *id, bool study, trace_run *t, sim_replayer **rp, kv_err *err);
int sim_trace_layer(sim_replayer *rp, int64_t l, const uint8_t *want, kv_err *err);
int sim_trace_lockstep(sim_replayer *rp, const uint8_t *want, kv_err *err);
void sim_trace_end(sim_replayer *rp);

/* The options of t's plan (budgets in N, labels). */
const sim_opts *sim_trace_opts(const trace_run *t);

void sim_trace_free(trace_run *t);

#endif
