/* sim over a study (docs/mpi.md): its work units (trace × allocator × layer) split across
 * ranks when mpirun started the process, each unit's results kept in the work folder as its
 * replay ends (--resume), rank 0 merging them and alone writing the outputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/outfile.h"
#include "core/progress.h"
#include "trace/trace.h"
#include "sim/results.h"
#include "sim/sim.h"
#include "core/kv_mpi.h"
#include "sim/sim_trace.h"
#include "sim/sim_work.h"
#include "study/study.h"

/* This process in the run: its rank, the time it spent in MPI calls, the work folder, the
 * units it replayed. */
typedef struct {
    int rank, size, n_units, own_units;
    double mpi_s;
    sim_work w;
} sim_world;

/* Every rank's rc agreed (a collective call): a failure anywhere is every rank's, named on rank 0. */
static int agree(sim_world *wd, int rc, kv_err *err)
{
    return kv_mpi_agree_err(rc, wd->rank, wd->size, err, &wd->mpi_s);
}

/* Rank 0 after the replays: every unit replayed elsewhere read from the work folder. */
static int merge(trace_run *runs, const sim_unit *units, int nu, const int *owner, sim_world *wd, kv_err *err)
{
    uint8_t *want = wd->rank == 0 ? kv_calloc((size_t)runs[0].res.n_cfg, 1, "sim", err) : NULL;
    int rc = wd->rank == 0 && !want ? err->code : KV_OK;
    for (int u = 0; !rc && want && u < nu; u++) {
        if (owner[u] <= 0) continue;
        trace_run *t = &runs[units[u].trace];
        sim_unit_want(&units[u], t->res.n_cfg, want);
        rc = sim_work_get(&wd->w, u, &units[u], want, &t->res, err);
    }
    free(want);
    return rc;
}

/* A trace's timing sums and times, set aside while a unit's replay adds its own (each unit's
 * file holds its own part; rank 0 adds them up as one process does). */
typedef struct {
    int64_t *calls, *candidates;
    double *score_ns, times[5];
} timing;

static double *times_of(sim_results *r, int i)
{
    double *t[5] = {&r->load_s, &r->reference_s, &r->replay_s, &r->metrics_s, &r->wall_s};
    return t[i];
}

/* Swaps r's timing with tm's (zeros before a unit): r then counts the unit alone. */
static void timing_swap(timing *tm, sim_results *r)
{
    int64_t *c = r->calls, *d = r->candidates;
    double *e = r->score_ns;
    r->calls = tm->calls, r->candidates = tm->candidates, r->score_ns = tm->score_ns;
    tm->calls = c, tm->candidates = d, tm->score_ns = e;
    for (int i = 0; i < 5; i++) {
        const double x = *times_of(r, i);
        *times_of(r, i) = tm->times[i], tm->times[i] = x;
    }
}

/* After the units are written: r's timing is the set-aside one plus the units'; tm zeros again. */
static void timing_restore(timing *tm, sim_results *r)
{
    timing_swap(tm, r);
    for (size_t i = 0; i < (size_t)r->n_cfg * (size_t)r->K; i++) {
        r->calls[i] += tm->calls[i], r->candidates[i] += tm->candidates[i], r->score_ns[i] += tm->score_ns[i];
        tm->calls[i] = tm->candidates[i] = 0, tm->score_ns[i] = 0;
    }
    for (int i = 0; i < 5; i++) *times_of(r, i) += tm->times[i], tm->times[i] = 0;
}

/* The replays of one trace's units that this rank owns, as one process replays a trace: each
 * layer read and referenced once for all its own per-layer units, then the model-wide units in
 * one lock-step pass; each unit's result written to the folder as soon as its pass ends. */
typedef struct {
    const sim_opts *opts;
    const study_set *s;
    trace_run *runs;
    const sim_unit *units;
    const int *owner;
    const uint8_t *done;
    int u0, u1;        /* the trace's units [u0, u1) */
    sim_world *wd;
} trace_job;

/* Runs pass (layer l, or the lock step: l < 0) over the own units of the job matching it. */
static int run_pass(const trace_job *j, sim_replayer *rp, int64_t l, uint8_t *want, uint8_t *one, timing *tm,
                    kv_err *err)
{
    trace_run *t = &j->runs[j->units[j->u0].trace];
    const int C = t->res.n_cfg;
    bool any = false;
    memset(want, 0, (size_t)C);
    for (int u = j->u0; u < j->u1; u++) {
        const sim_unit *x = &j->units[u];
        if (j->owner[u] != j->wd->rank || (l < 0 ? !x->lockstep : x->lockstep || x->l0 != l)) continue;
        sim_unit_want(x, C, one);
        for (int c = 0; c < C; c++) want[c] |= one[c];
        any = true;
    }
    if (!any) return KV_OK;
    timing_swap(tm, &t->res);
    int rc = l < 0 ? sim_trace_lockstep(rp, want, err) : sim_trace_layer(rp, l, want, err);
    double pass[5];   /* the pass's times: its first unit's file holds them */
    for (int i = 0; i < 5; i++) pass[i] = *times_of(&t->res, i);
    for (int u = j->u0, first = 1; !rc && u < j->u1; u++) {
        const sim_unit *x = &j->units[u];
        if (j->owner[u] != j->wd->rank || (l < 0 ? !x->lockstep : x->lockstep || x->l0 != l)) continue;
        j->wd->own_units++;
        if (!j->opts->work_folder) continue;
        sim_unit_want(x, C, one);
        for (int i = 0; i < 5; i++) *times_of(&t->res, i) = first ? pass[i] : 0;
        rc = sim_work_put(&j->wd->w, u, x, one, j->wd->rank, &t->res, err), first = 0;
        if (!rc) sim_work_fault(j->wd->rank, j->wd->own_units);
    }
    for (int i = 0; i < 5; i++) *times_of(&t->res, i) = pass[i];
    timing_restore(tm, &t->res);
    return rc;
}

static int replay_trace(const trace_job *j, kv_err *err)
{
    const int i = j->units[j->u0].trace;
    trace_run *t = &j->runs[i];
    const size_t C = (size_t)t->res.n_cfg, CK = C * (size_t)t->res.K;
    uint8_t *want = kv_calloc(2 * C, 1, "sim", err);
    timing tm = {kv_calloc(CK, sizeof(int64_t), "sim", err), kv_calloc(CK, sizeof(int64_t), "sim", err),
                 kv_calloc(CK, sizeof(double), "sim", err), {0}};
    int rc = want && tm.calls && tm.candidates && tm.score_ns ? KV_OK : err->code;
    sim_opts one = *j->opts;
    one.trace = j->s->t[i].path, one.quiet = j->opts->quiet || j->wd->rank != 0;
    sim_replayer *rp = NULL;
    if (!rc) rc = sim_trace_begin(&one, j->s->t[i].id, j->s->n > 1, t, &rp, err);
    for (int64_t l = 0; !rc && l < t->res.L; l++) rc = run_pass(j, rp, l, want, want + C, &tm, err);
    if (!rc) rc = run_pass(j, rp, -1, want, want + C, &tm, err);
    sim_trace_end(rp);
    free(want), free(tm.calls), free(tm.candidates), free(tm.score_ns);
    return rc;
}

/* Replays the units this rank owns (split by estimated cost, those with a result in the work
 * folder left out), trace by trace; a trace none of whose units it owns is not opened. */
static int replay_own(const sim_opts *opts, const study_set *s, trace_run *runs, const sim_unit *units, int nu,
                      const uint8_t *done, int *owner, sim_world *wd, kv_err *err)
{
    int64_t *cost = kv_calloc((size_t)nu + 1, sizeof *cost, "sim", err);
    if (!cost) return err->code;
    for (int u = 0; u < nu; u++) cost[u] = done[u] ? -1 : units[u].cost;
    kv_mpi_owners(cost, nu, opts->work_folder ? wd->size : 1, owner);   /* no folder: rank 0 alone */
    free(cost);
    sim_work_fault(wd->rank, -1);
    int rc = KV_OK;
    for (int u0 = 0, u1; !rc && u0 < nu; u0 = u1) {
        bool mine = false;
        for (u1 = u0; u1 < nu && units[u1].trace == units[u0].trace; u1++) mine |= owner[u1] == wd->rank;
        const trace_job j = {opts, s, runs, units, owner, done, u0, u1, wd};
        if (mine) rc = replay_trace(&j, err);
    }
    return rc;
}

/* Every rank plans every trace (metadata only) and makes the same units; rank 0 opens the work
 * folder (under --resume: which units are done); the units left are replayed across ranks;
 * rank 0 merges the results. */
static int run_traces(const sim_opts *opts, const study_set *s, trace_run *runs, sim_world *wd, int rc, kv_err *err)
{
    const int n = s ? s->n : 0;
    for (int i = 0; !rc && i < n; i++) {
        sim_opts one = *opts;
        one.trace = s->t[i].path;
        rc = sim_trace_prepare(&one, &runs[i], err);
    }
    sim_unit *units = NULL;
    int nu = 0;
    if (!rc) rc = sim_units_make(s, runs, &units, &nu, err);
    int *owner = rc ? NULL : kv_calloc((size_t)nu + 1, sizeof *owner, "sim", err);
    uint8_t *done = owner ? kv_calloc((size_t)nu + 1, 1, "sim", err) : NULL;
    if (!rc && !done) rc = err->code;
    wd->n_units = nu;
    rc = agree(wd, rc, err);   /* planned everywhere, or nobody replays */
    if (!rc) {   /* after each agree a failure is every rank's: the later steps are skipped alike */
        if (wd->rank == 0 && opts->work_folder) rc = sim_work_open(&wd->w, opts, s, runs, units, nu, done, err);
        rc = agree(wd, rc, err);
    }
    if (!rc) {
        if (kv_mpi_bcast(done, (size_t)nu, &wd->mpi_s) != 0) rc = kv_fail(err, KV_EFAIL, "sim: MPI_Bcast failed");
        int found = 0;
        for (int u = 0; !rc && u < nu; u++) found += done[u];
        if (!rc && opts->resume && wd->rank == 0)
            fprintf(stderr, "sim: --resume: %d of %d units have their results in %s; replaying %d\n", found, nu,
                    wd->w.dir, nu - found);
        if (!rc) rc = replay_own(opts, s, runs, units, nu, done, owner, wd, err);
        rc = agree(wd, rc, err);
    }
    if (!rc) rc = merge(runs, units, nu, owner, wd, err);
    free(owner), free(done), free(units);
    return rc;
}

int sim_study_trace_check(const study_set *s, int i, const trace_meta *m, const trace_meta *first, bool mixed_models,
                          kv_err *err)
{
    int rc = study_check_tokens(s, i, m->n_tokens, err);
    if (rc) return rc;
    const bool same = strcmp(m->model_name, first->model_name) == 0 && m->n_layers == first->n_layers &&
                      m->n_heads == first->n_heads && m->n_kv_heads == first->n_kv_heads &&
                      m->head_dim == first->head_dim;
    if (same || mixed_models) return KV_OK;
    return kv_fail(err, KV_EINPUT, "%s: a trace of model '%s' (L=%lld, H=%lld, K=%lld, D=%lld), but %s is of '%s' "
                   "(L=%lld, H=%lld, K=%lld, D=%lld); a study compares one model's traces (--mixed-models allows "
                   "it)", s->t[i].path, m->model_name, (long long)m->n_layers, (long long)m->n_heads,
                   (long long)m->n_kv_heads, (long long)m->head_dim, s->t[0].path, first->model_name,
                   (long long)first->n_layers, (long long)first->n_heads, (long long)first->n_kv_heads,
                   (long long)first->head_dim);
}

/* Before any work: every trace opens, its sha256 (hashed into the record by
 * the command line, when it has one) is the index's, and all are of one
 * model unless --mixed-models; budgets given as fractions of T need traces
 * of one length (their N would differ between traces). */
static int check_study(const sim_opts *o, const study_set *s, kv_err *err)
{
    trace_meta first = {0};
    int rc = KV_OK;
    for (int i = 0; !rc && i < s->n; i++) {
        const prov_input *in = NULL;
        for (int j = 0; o->prov && j < o->prov->n_inputs; j++)
            if (strcmp(o->prov->inputs[j].role, "trace") == 0 && strcmp(o->prov->inputs[j].path, s->t[i].path) == 0)
                in = &o->prov->inputs[j];
        if (in) rc = study_check_sha256(s, i, in->sha256, err);
        trace *tr = NULL;
        if (!rc) rc = trace_open(s->t[i].path, &tr, err);
        if (rc) break;
        const trace_meta *m = trace_get_meta(tr);
        if (i == 0) first = *m;
        rc = sim_study_trace_check(s, i, m, &first, o->mixed_models, err);
        for (int b = 0; !rc && o->budget_fractions && b < o->n_budgets; b++)
            if (!isnan(o->budget_fractions[b]) && m->n_tokens != first.n_tokens)
                rc = cli_usage(err, "sim", "--budgets %g%%: %s has T = %lld but %s T = %lld; a budget given as a "
                               "fraction of T is not one N over traces of different lengths (give N)",
                               o->budget_fractions[b] * 100, s->t[i].path, (long long)m->n_tokens, s->t[0].path,
                               (long long)first.n_tokens);
        trace_close(tr);
    }
    return rc;
}

/* Rank 0's outputs: the results directory, begun in out, committed (or aborted) here. */
static int write_outputs(const sim_opts *opts, const study_set *s, trace_run *runs, kv_outfile *out, kv_err *err)
{
    const int n = s->n;
    sim_trace_out *outs = kv_calloc((size_t)n, sizeof *outs, "sim", err);
    int rc = outs ? KV_OK : err->code;
    for (int i = 0; !rc && i < n; i++)
        outs[i] = (sim_trace_out){.id = s->t[i].id, .path = s->t[i].path, .o = sim_trace_opts(&runs[i]), .r = &runs[i].res};
    if (!rc) rc = sim_summary_check(outs, n, err);
    if (!rc) rc = sim_results_write(outs, n, out->tmp_path, err);
    if (!rc) rc = sim_summary_write(outs, n, out->tmp_path, err);
    if (!rc) rc = sim_spans_write(outs, n, out->tmp_path, err);
    if (!rc && !opts->quiet && n > 1) sim_summary_print(outs, n);
    if (!rc) rc = outdir_commit(out, err);
    else outdir_abort(out);
    free(outs);
    return rc;
}

/* Each rank's wall time and time in MPI calls (--rank-times), one line per rank on stderr. */
static void rank_times(const sim_world *wd, double wall)
{
    fprintf(stderr, "sim: rank %d of %d: %d of %d units, wall %.3f s, in MPI calls %.3f s (%.1f%%)\n", wd->rank,
            wd->size, wd->own_units, wd->n_units, wall, wd->mpi_s, wall > 0 ? 100 * wd->mpi_s / wall : 0.0);
}

int sim_run(const sim_opts *opts, sim_stats *summary, kv_err *err)
{
    const double started = kv_now_seconds();
    study_set own = {0};
    const study_set *s = opts->study;
    int rc = KV_OK;
    if (!s) {
        char *word = (char *)opts->trace;
        if (!(rc = study_set_resolve("sim", &word, 1, &own, err))) s = &own;
    }
    const int n = s ? s->n : 0;
    const char **inputs = rc ? NULL : kv_calloc((size_t)n + 1, sizeof *inputs, "sim", err);
    trace_run *runs = inputs ? kv_calloc((size_t)n, sizeof *runs, "sim", err) : NULL;
    if (!rc && !runs) rc = err->code;
    for (int i = 0; !rc && i < n; i++) inputs[i] = s->t[i].path;
    if (!rc && opts->head_scores) inputs[n] = opts->head_scores;
    if (!rc) rc = outfile_check_inputs(opts->output, inputs, opts->head_scores ? n + 1 : n, err);
    if (!rc) rc = check_study(opts, s, err);
    sim_world wd = {0};
    kv_mpi_world(&wd.rank, &wd.size);
    sim_opts run = *opts;   /* the work folder: always under mpirun (the merge reads it), else with --resume */
    run.work_folder = opts->work_folder && (wd.size > 1 || opts->resume);
    if (!rc) rc = sim_work_name(&wd.w, opts, err);
    if (!rc && wd.rank == 0 && run.work_folder) rc = sim_work_lock(&wd.w, err);   /* one writer per work folder */
    kv_outfile out;
    bool dir_started = false;   /* an existing DIR refused before any work */
    if (!rc && wd.rank == 0) rc = outdir_begin(&out, opts->output, opts->force, err), dir_started = rc == KV_OK;
    if (dir_started && run.work_folder) outdir_abort(&out), dir_started = false;   /* begun once the results are in */
    rc = run_traces(&run, s, runs, &wd, rc, err);   /* every rank takes part, even after a failure of its own */
    if (!rc && wd.rank == 0 && !dir_started) rc = outdir_begin(&out, opts->output, opts->force, err), dir_started = !rc;
    if (!rc && wd.rank == 0) rc = write_outputs(&run, s, runs, &out, err);   /* commits, or aborts on a failure */
    else if (dir_started) outdir_abort(&out);
    if (!rc && wd.rank == 0 && run.work_folder) sim_work_remove(&wd.w);
    if (wd.rank == 0) sim_work_unlock(&wd.w);   /* held or not, the run is over (a failed one's folder stays for --resume) */
    for (int c = 0; !rc && wd.rank == 0 && summary && c < runs[0].res.n_cfg; c++) { /* the first trace's (fidelity) */
        double logdet_mean;
        sim_results_summarize(&runs[0].res, c, PHASE_ALL, &summary[c], &logdet_mean);
    }
    if (opts->rank_times) rank_times(&wd, kv_now_seconds() - started);
    for (int i = 0; runs && i < n; i++) sim_trace_free(&runs[i]);
    free(runs), free(inputs);
    study_set_free(&own);
    return rc;
}
