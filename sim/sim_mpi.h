/* sim_mpi: the MPI side of a sim run (docs/mpi.md). Built with MPI when the
 * Makefile found mpicc (KV_HAVE_MPI); otherwise, and whenever the process was
 * not started by mpirun, it is one rank of one: the run is a single process. */
#ifndef KV_SIM_MPI_H
#define KV_SIM_MPI_H

#include <stddef.h>
#include <stdint.h>

#include "sim/results.h"

/* This process's rank and the number of ranks: MPI is initialised (threads
 * funneled) only when mpirun (or srun) started the process; else 0 and 1. */
void sim_mpi_world(int *rank, int *size);

/* Shuts MPI down when sim_mpi_world started it (before the process exits). */
void sim_mpi_finalize(void);

/* Every rank's rc combined: KV_OK when all are, else the first nonzero rc in
 * rank order, with *who its rank (a collective call: every rank calls it). */
int sim_mpi_agree(int rc, int *who);

/* Moves bytes of buf from rank `from` to rank 0 (rank 0 receives in place;
 * the other ranks but `from` do nothing). Nonzero on a failed transfer. */
int sim_mpi_to_root(int from, void *buf, size_t bytes);

/* owner[i] of each of n units of cost[i] over `size` ranks: the costliest first, each to the
 * least loaded rank (the lowest rank on a tie): the same on every rank. */
void sim_mpi_owners(const int64_t *cost, int n, int size, int *owner);

/* A trace's results replayed on rank `from` moved into rank 0's r (allocated
 * alike on both: the same plan): every result array, timings included. */
int sim_mpi_results_to_root(int from, sim_results *r, kv_err *err);

#endif
