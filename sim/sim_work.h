/* sim_work: the run's work folder OUTPUT.work/ (docs/mpi.md): the command's plan, and each
 * trace's results written atomically as its replay ends, so that --resume replays only the
 * traces without one; rank 0 reads the others' results from it and removes it once the
 * outputs are committed. */
#ifndef KV_SIM_WORK_H
#define KV_SIM_WORK_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "sim/sim_trace.h"

typedef struct {
    char dir[4200];    /* OUTPUT.work (OUTPUT without its trailing '/') */
} sim_work;

/* The folder's path for o->output (every rank). */
int sim_work_name(sim_work *w, const sim_opts *o, kv_err *err);

/* Rank 0, before any replay: creates the folder and its plan.txt (the command's traces with
 * their sha256, every configuration, the options), or under --resume checks that an existing
 * one's plan is this command's (KV_EUSAGE naming the first line that differs) and reads every
 * whole result in it into runs[i].res, done[i] = 1. A folder left without --resume is refused
 * (KV_EUSAGE) unless o->force, which starts it anew. */
int sim_work_open(const sim_work *w, const sim_opts *o, const study_set *s, trace_run *runs, uint8_t *done,
                  kv_err *err);

/* Trace i's results, written to units/tNNNNNN.bin.tmp.RANK, then renamed into place. */
int sim_work_put(const sim_work *w, int i, int rank, const sim_results *r, kv_err *err);

/* Trace i's results from the folder into r (allocated by its plan: the same shapes). */
int sim_work_get(const sim_work *w, int i, sim_results *r, kv_err *err);

/* The folder and everything in it (after the outputs are committed). */
void sim_work_remove(const sim_work *w);

/* Test-only faults, from KVTRACE_TEST_FAULT (tests/scripts/test_mpi.py): "R:K:kill" kills
 * rank R by SIGKILL once it has written K results; "R:oom:MB" limits rank R's address space
 * to what it uses plus MB MiB before its first replay (units_done = -1 then). */
void sim_work_fault(int rank, int units_done);

#endif
