#include "core/kv_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef KV_HAVE_MPI
#include <mpi.h>

/* Whether a launcher started this process (OpenMPI's mpirun, PMIx or Slurm's srun). */
static int launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

void kv_mpi_world(int *rank, int *size)
{
    int started = 0, done = 0;
    *rank = 0, *size = 1;
    MPI_Initialized(&started);
    MPI_Finalized(&done);
    if (done || (!started && !launched())) return;   /* MPI shut down: one rank of one from then on */
    if (!started) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
}

void kv_mpi_finalize(void)
{
    int started = 0, done = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&done);
    if (started && !done) MPI_Finalize();
}

/* The number of ranks, 1 when MPI was not started. */
static int world_size(void)
{
    int started = 0, done = 0, size = 1;
    MPI_Initialized(&started);
    MPI_Finalized(&done);
    if (started && !done) MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

/* Every rank's rc combined: KV_OK when all are, else the first nonzero rc in
 * rank order, with *who its rank (a collective call: every rank calls it). */
static int kv_mpi_agree(int rc, int *who, double *spent)
{
    const int size = world_size();
    *who = 0;
    if (size == 1) return rc;
    int *all = malloc(sizeof *all * (size_t)size);
    if (!all) return rc ? rc : -1;
    const double t0 = MPI_Wtime();
    MPI_Allgather(&rc, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    if (spent) *spent += MPI_Wtime() - t0;
    int out = 0;
    for (int r = 0; r < size && !out; r++)
        if (all[r]) out = all[r], *who = r;
    free(all);
    return out;
}

int kv_mpi_to_root(int from, void *buf, size_t bytes, double *spent)
{
    int rank = 0;
    if (world_size() == 1) return 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (from == 0 || (rank != 0 && rank != from)) return 0;
    const double t0 = MPI_Wtime();
    for (size_t at = 0; at < bytes;) {   /* in pieces of at most INT_MAX bytes */
        const size_t n = bytes - at < (size_t)INT_MAX ? bytes - at : (size_t)INT_MAX;
        int rc = rank == 0 ? MPI_Recv((char *)buf + at, (int)n, MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                           : MPI_Send((char *)buf + at, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return -1;
        at += n;
    }
    if (spent) *spent += MPI_Wtime() - t0;
    return 0;
}

int kv_mpi_bcast(void *buf, size_t bytes, double *spent)
{
    if (world_size() == 1) return 0;
    const double t0 = MPI_Wtime();
    for (size_t at = 0; at < bytes;) {
        const size_t n = bytes - at < (size_t)INT_MAX ? bytes - at : (size_t)INT_MAX;
        if (MPI_Bcast((char *)buf + at, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
        at += n;
    }
    if (spent) *spent += MPI_Wtime() - t0;
    return 0;
}

#else

void kv_mpi_world(int *rank, int *size)
{
    *rank = 0, *size = 1;
}

void kv_mpi_finalize(void)
{
}

int kv_mpi_agree(int rc, int *who, double *spent)
{
    (void)spent;
    *who = 0;
    return rc;
}

int kv_mpi_to_root(int from, void *buf, size_t bytes, double *spent)
{
    (void)from, (void)buf, (void)bytes, (void)spent;
    return 0;
}

int kv_mpi_bcast(void *buf, size_t bytes, double *spent)
{
    (void)buf, (void)bytes, (void)spent;
    return 0;
}

#endif

/* A unit and its cost: sorted the costlier first, the lower index on a tie. */
typedef struct {
    int64_t cost;
    int i;
} owned;

static int by_cost(const void *a, const void *b)
{
    const owned *x = a, *y = b;
    return x->cost != y->cost ? (x->cost < y->cost ? 1 : -1) : (x->i > y->i) - (x->i < y->i);
}

void kv_mpi_owners(const int64_t *cost, int n, int size, int *owner)
{
    int64_t load[1024] = {0};   /* at most 1024 ranks balanced; more share by index */
    const int R = size < 1024 ? size : 1024;
    owned *order = malloc(sizeof *order * ((size_t)n + 1));
    int m = 0;
    for (int i = 0; i < n; i++) {
        owner[i] = -1;
        if (order && cost[i] >= 0) order[m++] = (owned){cost[i], i};
    }
    if (!order) {   /* no room to sort: round robin (should another rank differ, a unit it left out is
                       missing at the merge: an error there, never a wrong result) */
        for (int i = 0, k = 0; i < n; i++)
            if (cost[i] >= 0) owner[i] = k++ % R;
        return;
    }
    qsort(order, (size_t)m, sizeof *order, by_cost);
    for (int x = 0; x < m; x++) {
        int r = 0;
        for (int y = 1; y < R; y++)
            if (load[y] < load[r]) r = y;
        owner[order[x].i] = r, load[r] += order[x].cost;
    }
    free(order);
}

int kv_mpi_agree_err(int rc, int rank, int size, kv_err *err, double *spent)
{
    int who = 0;
    const int all = kv_mpi_agree(rc, &who, spent);
    if (!all || size == 1) return rc;
    kv_err theirs = *err;
    if (kv_mpi_to_root(who, &theirs, sizeof theirs, spent) != 0)
        snprintf(theirs.msg, sizeof theirs.msg, "its error did not reach rank 0");
    if (rank != 0) return all;
    *err = (kv_err){0};
    return kv_fail(err, all, "rank %d of %d: %s", who, size, theirs.msg);
}
