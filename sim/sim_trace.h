/* sim's per-trace steps (sim/sim.c), shared with the run over a study (sim/sim_study.c: the
 * split across ranks, the work folder, the outputs). */
#ifndef KV_SIM_TRACE_H
#define KV_SIM_TRACE_H

#include <stdbool.h>

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

/* Replays every configuration over one trace (opts->trace, planned by sim_trace_prepare) into t. */
int sim_trace_replay(const sim_opts *opts, const char *id, bool study, trace_run *t, kv_err *err);

/* The options of t's plan (budgets in N, labels). */
const sim_opts *sim_trace_opts(const trace_run *t);

void sim_trace_free(trace_run *t);

#endif
