#include "parallel.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

enum { MAX_THREADS = 256 };

typedef struct {
    kv_item_fn fn;
    void *ctx;
    int n_items;
    atomic_int next;
} pool;

typedef struct {
    pool *p;
    int thread;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg *w = arg;
    int item;
    while ((item = atomic_fetch_add(&w->p->next, 1)) < w->p->n_items) w->p->fn(w->p->ctx, item, w->thread);
    return NULL;
}

void kv_parallel_for(int n_items, int n_threads, kv_item_fn fn, void *ctx)
{
    if (n_threads > n_items) n_threads = n_items;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    pool p = {.fn = fn, .ctx = ctx, .n_items = n_items};
    atomic_init(&p.next, 0);
    pthread_t tid[MAX_THREADS];
    worker_arg args[MAX_THREADS];
    int started = 0;
    for (int t = 1; t < n_threads; t++) {
        args[t] = (worker_arg){&p, t};
        if (pthread_create(&tid[t], NULL, worker, &args[t]) != 0) break;
        started = t;
    }
    args[0] = (worker_arg){&p, 0};
    worker(&args[0]); /* the calling thread works too */
    for (int t = 1; t <= started; t++) pthread_join(tid[t], NULL);
}

int kv_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

int kv_threads(int requested)
{
    return requested > 0 ? requested : kv_cpu_count();
}

void kv_blas_single_threaded(void)
{
    openblas_set_num_threads(1);
}
