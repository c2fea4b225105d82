/* kv_mpi: the MPI side of a run over many processes (sim, capture --prompts; docs/mpi.md).
 * Built with MPI when the Makefile found mpicc (KV_HAVE_MPI); otherwise, and whenever the
 * process was not started by mpirun, it is one rank of one: the run is a single process. */
#ifndef KV_CORE_MPI_H
#define KV_CORE_MPI_H

#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"


/* This process's rank and the number of ranks: MPI is initialised (threads
 * funneled) only when mpirun (or srun) started the process; else 0 and 1. */
void kv_mpi_world(int *rank, int *size);

/* Shuts MPI down when kv_mpi_world started it (before the process exits). */
void kv_mpi_finalize(void);

/* The collective calls below add the seconds they spent (MPI_Wtime around the call) to
 * *spent when it is not NULL: the run's time in MPI communication (--rank-times). */


/* kv_mpi_agree, and a failure named on rank 0: its err becomes the first failed rank's own
 * error prefixed "rank R of N: " (the others keep theirs and print nothing: rank 0 says it once).
 * Returns the agreed rc on every rank. */
int kv_mpi_agree_err(int rc, int rank, int size, kv_err *err, double *spent);

/* Moves bytes of buf from rank `from` to rank 0 (rank 0 receives in place;
 * the other ranks but `from` do nothing). Nonzero on a failed transfer. */
int kv_mpi_to_root(int from, void *buf, size_t bytes, double *spent);

/* Rank 0's bytes of buf to every rank (collective). Nonzero on a failed transfer. */
int kv_mpi_bcast(void *buf, size_t bytes, double *spent);

/* owner[i] of each of n units of cost[i] over `size` ranks: the costliest first, each to the
 * least loaded rank (the lowest rank on a tie): the same on every rank. A unit of cost < 0
 * gets no owner (-1: done before, --resume). */
void kv_mpi_owners(const int64_t *cost, int n, int size, int *owner);

#endif
