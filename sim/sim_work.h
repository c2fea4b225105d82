/* sim_work: the run's work folder OUTPUT.work/ (docs/mpi.md): the command's plan, and each
 * work unit's results written atomically as it ends, so that --resume replays only the
 * units without one; rank 0 reads the others' results from it and removes it once the
 * outputs are committed. */
#ifndef KV_SIM_WORK_H
#define KV_SIM_WORK_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "sim/sim_trace.h"

typedef struct {
    char dir[4200];    /* OUTPUT.work (OUTPUT without its trailing '/') */
    bool locked;       /* this process holds OUTPUT.work.lock (sim_work_lock) */
} sim_work;

/* The folder's path for o->output (every rank). */
int sim_work_name(sim_work *w, const sim_opts *o, kv_err *err);

/* A work unit (docs/mpi.md): trace `trace`'s configuration `c` (a policy, allocator `a`, chunk
 * and budget) over layers [l0, l0 + nl): one layer for a per-layer allocator, every layer for a
 * model-wide one (cake, global); its estimated cost (the balancing). */
typedef struct {
    int trace, a, c;
    bool lockstep;     /* a model-wide allocator's: replayed in the lock-step pass (even when L = 1) */
    int64_t l0, nl, cost;
} sim_unit;

/* The study's units in a fixed order (per trace, per configuration, per layer): the same on every
 * rank and for any number of ranks (--resume may use another). *units malloc'ed. */
int sim_units_make(const study_set *s, const trace_run *runs, sim_unit **units, int *n, kv_err *err);

/* want[c] = 1 for u's configuration, 0 for the others. */
void sim_unit_want(const sim_unit *u, int n_cfg, uint8_t *want);

/* Rank 0, before any replay: creates the folder and its plan.txt (the command's traces with
 * their sha256, every configuration, the options), or under --resume checks that an existing
 * one's plan is this command's (KV_EUSAGE naming the first line that differs) and reads every
 * whole unit's result in it into its trace's results, done[u] = 1. A folder left without
 * --resume is refused (KV_EUSAGE) unless o->force, which starts it anew. */
int sim_work_open(const sim_work *w, const sim_opts *o, const study_set *s, trace_run *runs, const sim_unit *units,
                  int n_units, uint8_t *done, kv_err *err);

/* Unit u's slots of r (want: sim_unit_want), written to units/uNNNNNNN.bin.tmp.RANK, then
 * renamed into place. Its timing sums and times are what r holds (sim_study.c zeroes them
 * before the unit's replay). */
int sim_work_put(const sim_work *w, int u, const sim_unit *x, const uint8_t *want, int rank, const sim_results *r,
                 kv_err *err);

/* Unit u's result from the folder into r (planned: the same shapes): its slots copied, its
 * timing sums and times added. Nonzero when the file is missing or not whole (r untouched). */
int sim_work_get(const sim_work *w, int u, const sim_unit *x, const uint8_t *want, sim_results *r, kv_err *err);

/* The folder and everything in it (after the outputs are committed). */
void sim_work_remove(const sim_work *w);

/* One writer per work folder (docs/mpi.md): OUTPUT.work.lock, made exclusively, names the process
 * (pid and host) that owns the folder for the run. A second run while that process lives is refused
 * (KV_EUSAGE, one line naming it; --force does not take a live run's folder); a lock whose process is
 * gone (killed) is taken over. sim_work_unlock removes it when this process holds it. */
int sim_work_lock(sim_work *w, kv_err *err);
void sim_work_unlock(sim_work *w);

/* Test-only faults, from KVTRACE_TEST_FAULT (tests/scripts/test_mpi.py): "R:K:kill" kills
 * rank R by SIGKILL once it has written K units' results; "R:oom:MB" limits rank R's address space
 * to what it uses plus MB MiB before its first replay (units_done = -1 then). */
void sim_work_fault(int rank, int units_done);

#endif
