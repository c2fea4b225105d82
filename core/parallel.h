/* parallel: run n independent work items on up to n_threads pthreads.
 *
 * Items are handed out dynamically, but callers give each item its own output
 * slot, so results never depend on the thread count or on scheduling. */
#ifndef KV_PARALLEL_H
#define KV_PARALLEL_H

typedef void (*kv_item_fn)(void *ctx, int item, int thread);

/* Runs fn(ctx, item, thread) for item in [0, n_items), thread in
 * [0, n_threads). Runs inline when n_threads <= 1 or thread creation fails. */
void kv_parallel_for(int n_items, int n_threads, kv_item_fn fn, void *ctx);

/* Online CPUs (at least 1). */
int kv_cpu_count(void);

/* The threads a --threads option asks for: requested when positive, else
 * every online CPU. */
int kv_threads(int requested);

/* Tells OpenBLAS to run every call on the calling thread (main() does so
 * first). Its own threads split a product by the thread count, and some of
 * its kernels (Haswell's) then sum an element in another order: kvtrace's
 * threads split work in blocks of a fixed size instead, so results never
 * depend on --threads, OPENBLAS_NUM_THREADS or MPI ranks
 * (docs/reproducibility.md). */
void kv_blas_single_threaded(void);

#endif
