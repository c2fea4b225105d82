/* sim: replay eviction under many (policy x budget) configurations over one
 * trace (docs/sim.md; the outputs: docs/outputs.md). Each layer is loaded once
 * (all HDF5 I/O on this thread), its full-cache reference computed once, then
 * the configurations run as independent tasks on threads, each writing its own
 * result slot: the outputs are byte-identical whatever the thread count
 * (timing.csv aside). A policy that shares work between budgets
 * (policy_iface.share_create) replays a stream's budgets as one task, in lock step. */
#ifndef KV_SIM_H
#define KV_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "policies/policy.h"
#include "provenance/provenance.h"
#include "sim/replay.h"
#include "study/study.h"

typedef struct {
    const char *trace;             /* the trace, when study is NULL (its prompt id: its file name's stem) */
    const study_set *study;        /* NULL, or the traces of a study (sim t1.h5 t2.h5, DIR, index.jsonl) */
    bool mixed_models;             /* a study may hold traces of different models */
    const char *output;            /* directory */
    const prov_record *prov;       /* for provenance.json and results.h5 (may be NULL) */
    policy_config *policies;       /* [n_policies] */
    int n_policies;
    alloc_config *allocators;      /* [n_allocators]; NULL and 0: uniform only (today's replay) */
    int n_allocators;
    int64_t *budgets;              /* [n_budgets] N; sim_run fills those given as fractions of T */
    double *budget_fractions;      /* NULL, or [n_budgets]: f in (0, 1] for "f·100%", NaN for an N given */
    int n_budgets;
    const char *head_scores;       /* NULL, or --head-scores FILE (headkv, duo) */
    double max_memory_gib;         /* 0: the default (SIM_MAX_MEMORY_GIB); the lock-step replay's limit */
    bool step_counts;              /* results.h5 records candidates and kept rows at every step */
    int64_t chunk, decode_chunk, eval_stride;
    const int64_t *chunks;         /* NULL and 0: `chunk` alone; else [n_chunks] prefill chunks swept (--chunks) */
    int n_chunks;
    int threads;                   /* 0: one per CPU */
    bool force, quiet;             /* quiet: no table on stdout, no progress */
    bool progress;                 /* progress lines even when quiet (fidelity's own sim step) */
    bool work_folder;              /* each trace's results kept in OUTPUT.work/ as it ends (docs/mpi.md) */
    bool resume;                   /* --resume: replay only the traces without a result in OUTPUT.work/ */
    bool rank_times;               /* --rank-times: each rank's wall and MPI time on stderr */
} sim_opts;

/* The default limit on the estimated memory of a lock-step (model-wide
 * allocator: cake, global) replay, GiB (docs/sim.md). */
#define SIM_MAX_MEMORY_GIB 16.0

/* The configurations, in the order they run and are written: policy-major,
 * then allocator, then prefill chunk, then budget
 * (c = ((p·A + a)·n_chunks + k)·n_budgets + b; n_chunks = 1 without --chunks). */
int sim_n_chunks(const sim_opts *o);
const policy_config *sim_cfg_policy(const sim_opts *o, int c);
const alloc_config *sim_cfg_alloc(const sim_opts *o, int c);
int64_t sim_cfg_chunk(const sim_opts *o, int c);
int64_t sim_cfg_budget(const sim_opts *o, int c);

/* Runs every configuration over every trace and writes the results
 * directory o->output (one directory for the study, docs/study.md).
 * summary: NULL, or room for n_policies x n_allocators x chunks x n_budgets entries
 * (in configuration order), filled on success with the first trace's each configuration's
 * phase=all statistics averaged over layers and query heads (n summed): the
 * numbers of its summary.csv row, in full precision. */
int sim_run(const sim_opts *o, sim_stats *summary, kv_err *err);

/* `kvtrace sim` */
int sim_main(int argc, char **argv);

/* One trace of a study against its index line and the study's first trace (sim_study.c): T as the
 * index's `tokens` says, and the same model and shape unless mixed_models (KV_EINPUT, one line). */
int sim_study_trace_check(const study_set *s, int i, const trace_meta *m, const trace_meta *first, bool mixed_models,
                          kv_err *err);

#endif
