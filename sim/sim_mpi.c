#include "sim/sim_mpi.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef KV_HAVE_MPI
#include <mpi.h>

/* Whether a launcher started this process (OpenMPI's mpirun, PMIx or Slurm's srun). */
static int launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

void sim_mpi_world(int *rank, int *size)
{
    int started = 0;
    *rank = 0, *size = 1;
    MPI_Initialized(&started);
    if (!started && !launched()) return;
    if (!started) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
}

void sim_mpi_finalize(void)
{
    int started = 0, done = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&done);
    if (started && !done) MPI_Finalize();
}

int sim_mpi_agree(int rc, int *who)
{
    int started = 0, size = 1;
    *who = 0;
    MPI_Initialized(&started);
    if (started) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) return rc;
    int *all = malloc(sizeof *all * (size_t)size);
    if (!all) return rc ? rc : -1;
    MPI_Allgather(&rc, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    int out = 0;
    for (int r = 0; r < size && !out; r++)
        if (all[r]) out = all[r], *who = r;
    free(all);
    return out;
}

int sim_mpi_to_root(int from, void *buf, size_t bytes)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (from == 0 || (rank != 0 && rank != from)) return 0;
    for (size_t at = 0; at < bytes;) {   /* in pieces of at most INT_MAX bytes */
        const size_t n = bytes - at < (size_t)INT_MAX ? bytes - at : (size_t)INT_MAX;
        int rc = rank == 0 ? MPI_Recv((char *)buf + at, (int)n, MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                           : MPI_Send((char *)buf + at, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return -1;
        at += n;
    }
    return 0;
}

#else

void sim_mpi_world(int *rank, int *size)
{
    *rank = 0, *size = 1;
}

void sim_mpi_finalize(void)
{
}

int sim_mpi_agree(int rc, int *who)
{
    *who = 0;
    return rc;
}

int sim_mpi_to_root(int from, void *buf, size_t bytes)
{
    (void)from, (void)buf, (void)bytes;
    return 0;
}

#endif

void sim_mpi_owners(const int64_t *cost, int n, int size, int *owner)
{
    int64_t load[1024] = {0};   /* at most 1024 ranks balanced; more share by index */
    const int R = size < 1024 ? size : 1024;
    for (int i = 0; i < n; i++) owner[i] = -1;
    for (int done = 0; done < n; done++) {
        int pick = -1;   /* the costliest unassigned unit, the first on a tie */
        for (int i = 0; i < n; i++)
            if (owner[i] < 0 && (pick < 0 || cost[i] > cost[pick])) pick = i;
        int r = 0;
        for (int x = 1; x < R; x++)
            if (load[x] < load[r]) r = x;
        owner[pick] = r, load[r] += cost[pick];
    }
}

int sim_mpi_results_to_root(int from, sim_results *r, kv_err *err)
{
    const size_t C = (size_t)r->n_cfg, LK = (size_t)(r->L * r->K), S = (size_t)r->n_spans;
    struct { void *p; size_t bytes; } part[] = {
        {r->stats, C * (size_t)(r->L * r->H * N_PHASES) * sizeof *r->stats},
        {r->logdet, C * LK * sizeof *r->logdet},
        {r->head_budget, C * LK * sizeof *r->head_budget},
        {r->head_mean, C * LK * sizeof *r->head_mean},
        {r->step_cand, r->step_cand ? C * LK * (size_t)r->n_steps * sizeof(int32_t) : 0},
        {r->step_kept, r->step_kept ? C * LK * (size_t)r->n_steps * sizeof(int32_t) : 0},
        {r->span_ret, r->span_ret ? C * LK * S * sizeof(double) : 0},
        {r->span_recall, r->span_recall ? C * LK * S * sizeof(double) : 0},
        {r->calls, C * (size_t)r->K * sizeof *r->calls},
        {r->candidates, C * (size_t)r->K * sizeof *r->candidates},
        {r->score_ns, C * (size_t)r->K * sizeof *r->score_ns},
        {&r->load_s, sizeof r->load_s}, {&r->reference_s, sizeof r->reference_s},
        {&r->replay_s, sizeof r->replay_s}, {&r->metrics_s, sizeof r->metrics_s}, {&r->wall_s, sizeof r->wall_s},
    };
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof part / sizeof *part; i++)
        if (part[i].bytes) rc = sim_mpi_to_root(from, part[i].p, part[i].bytes);
    for (int c = 0; !rc && c < r->n_cfg; c++)
        rc = sim_mpi_to_root(from, r->retained[c], LK * (size_t)r->width[c] * sizeof(int64_t));
    return rc ? kv_fail(err, KV_EFAIL, "sim: moving rank %d's results to rank 0 failed", from) : KV_OK;
}
