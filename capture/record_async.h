/* record_async: recording without stalling the device. The walk fills a
 * buffer (on the GPU: starts a device->pinned-host copy into it), hands it
 * to a host writer thread with a job, and goes on with the next chunk; the
 * writer waits until the buffer holds its data (the job's `wait`, e.g. a
 * CUDA event), writes it (HDF5: every write happens on this one thread, in
 * submission order) and returns the buffer to the pool. With nbuf buffers
 * at most nbuf copies are in flight: two make a double buffer, and the walk
 * waits only when the disk is slower than the device.
 *
 * The memory hooks let the pool hold page-locked memory (cudaMallocHost);
 * without them it uses malloc, which is how the CPU tests run it. Errors:
 * the writer's first failure is kept and returned by the next acquire,
 * submit, drain or finish; later jobs are then skipped (their `done` runs). */
#ifndef KV_RECORD_ASYNC_H
#define KV_RECORD_ASYNC_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/kv_error.h"

enum { RECORD_ASYNC_MAX_BUF = 16, RECORD_ASYNC_QUEUE = 64 };

/* runs on the writer thread; buf may be NULL for a job without a buffer */
typedef int (*record_async_fn)(void *ctx, void *buf, kv_err *err);

typedef struct {
    record_async_fn wait;   /* may be NULL: blocks until buf holds the data */
    record_async_fn write;  /* may be NULL */
    void (*done)(void *ctx);/* may be NULL: releases ctx, always called */
    void *ctx;
} record_async_job;

typedef struct {
    void *(*alloc)(void *mem_ctx, size_t bytes);
    void (*release)(void *mem_ctx, void *p);
    void *mem_ctx;
} record_async_mem;

typedef struct {
    record_async_job job;
    void *buf;
} record_async_item;

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, stop;
    record_async_mem mem;
    size_t bytes;                              /* of each buffer */
    int nbuf, nfree;
    void *bufs[RECORD_ASYNC_MAX_BUF];
    void *free_bufs[RECORD_ASYNC_MAX_BUF];     /* stack */
    record_async_item queue[RECORD_ASYNC_QUEUE];
    int head, count, busy;                     /* ring; busy: a job is running */
    kv_err err;                                /* the writer's first failure */
    double wait_s;                             /* time the caller spent blocked */
    double write_s;                            /* time the writer spent in wait+write */
} record_async;

/* nbuf buffers of `bytes` (1 <= nbuf <= RECORD_ASYNC_MAX_BUF); mem NULL: malloc. */
int record_async_init(record_async *ra, int nbuf, size_t bytes, const record_async_mem *mem, kv_err *err);

/* A free buffer of ra->bytes (blocks while all are in flight). */
int record_async_acquire(record_async *ra, void **buf, kv_err *err);

/* Queues a job for buf (from acquire, or NULL); buf returns to the pool
 * after the job. On error the job's done still runs and buf is returned. */
int record_async_submit(record_async *ra, void *buf, record_async_job job, kv_err *err);

/* Waits until every queued job has run; the writer's first error, if any. */
int record_async_drain(record_async *ra, kv_err *err);

/* Drains, stops the thread and frees the buffers (safe on a zeroed or failed ra). */
int record_async_finish(record_async *ra, kv_err *err);

#endif
