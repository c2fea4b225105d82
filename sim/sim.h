/* sim: replay eviction under many (policy x budget) configurations over one
 * trace (SPEC §4-§6, §8). Each layer is loaded once (all HDF5 I/O on this
 * thread), its full-cache reference computed once, then the configurations
 * run as independent tasks on threads, each writing its own result slot: the
 * outputs are byte-identical whatever the thread count (timing.csv aside). */
#ifndef KV_SIM_H
#define KV_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "policies/policy.h"
#include "provenance/provenance.h"
#include "sim/replay.h"

typedef struct {
    const char *trace;
    const char *output;            /* directory */
    const prov_record *prov;       /* for provenance.json and results.h5 (may be NULL) */
    policy_config *policies;       /* [n_policies] */
    int n_policies;
    int64_t *budgets;              /* [n_budgets] */
    int n_budgets;
    int64_t chunk, decode_chunk, eval_stride;
    int threads;                   /* 0: one per CPU */
    bool force, quiet;             /* quiet: no table on stdout, no progress */
    bool progress;                 /* progress lines even when quiet (fidelity's own sim step) */
} sim_opts;

/* Runs every configuration and writes the results directory o->output.
 * summary: NULL, or room for n_policies x n_budgets entries (policy-major,
 * as the configurations run), filled on success with each configuration's
 * phase=all statistics averaged over layers and query heads (n summed): the
 * numbers of its summary.csv row, in full precision. */
int sim_run(const sim_opts *o, sim_stats *summary, kv_err *err);

/* `kvtrace sim` */
int sim_main(int argc, char **argv);

#endif
