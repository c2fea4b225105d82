/* The recording writer thread and its buffer pool (record_async.h). */
#include "capture/record_async.h"

#include <stdlib.h>
#include <string.h>

#include "core/progress.h"

static void *malloc_hook(void *ctx, size_t bytes)
{
    (void)ctx;
    return malloc(bytes ? bytes : 1);
}

static void free_hook(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

/* Runs one job outside the lock; returns its code (skipped after a failure). */
static int run_job(record_async *ra, const record_async_item *it, bool skip, kv_err *e)
{
    int rc = KV_OK;
    double t0 = kv_now_seconds();
    if (!skip && it->job.wait) rc = it->job.wait(it->job.ctx, it->buf, e);
    if (!skip && !rc && it->job.write) rc = it->job.write(it->job.ctx, it->buf, e);
    if (it->job.done) it->job.done(it->job.ctx);
    ra->write_s += kv_now_seconds() - t0; /* written by this thread only */
    return rc;
}

static void *writer_main(void *arg)
{
    record_async *ra = arg;
    pthread_mutex_lock(&ra->mu);
    for (;;) {
        while (!ra->count && !ra->stop) pthread_cond_wait(&ra->cv, &ra->mu);
        if (!ra->count) break;
        record_async_item it = ra->queue[ra->head];
        ra->head = (ra->head + 1) % RECORD_ASYNC_QUEUE;
        ra->count--, ra->busy = 1;
        bool skip = ra->err.code != KV_OK;
        pthread_mutex_unlock(&ra->mu);
        kv_err e = {0};
        int rc = run_job(ra, &it, skip, &e);
        pthread_mutex_lock(&ra->mu);
        if (rc && ra->err.code == KV_OK) ra->err = e;
        if (it.buf) ra->free_bufs[ra->nfree++] = it.buf;
        ra->busy = 0;
        pthread_cond_broadcast(&ra->cv);
    }
    pthread_mutex_unlock(&ra->mu);
    return NULL;
}

int record_async_init(record_async *ra, int nbuf, size_t bytes, const record_async_mem *mem, kv_err *err)
{
    memset(ra, 0, sizeof *ra);
    if (nbuf < 1 || nbuf > RECORD_ASYNC_MAX_BUF)
        return kv_fail(err, KV_EFAIL, "record_async: %d buffers (1 to %d)", nbuf, RECORD_ASYNC_MAX_BUF);
    ra->mem = mem ? *mem : (record_async_mem){malloc_hook, free_hook, NULL};
    ra->bytes = bytes;
    for (int i = 0; i < nbuf; i++) {
        ra->bufs[i] = ra->mem.alloc(ra->mem.mem_ctx, bytes);
        if (!ra->bufs[i]) {
            record_async_finish(ra, NULL);
            return kv_fail(err, KV_EFAIL, "recording buffers: out of memory (%d x %zu bytes)", nbuf, bytes);
        }
        ra->free_bufs[ra->nfree++] = ra->bufs[i];
        ra->nbuf++;
    }
    pthread_mutex_init(&ra->mu, NULL);
    pthread_cond_init(&ra->cv, NULL);
    if (pthread_create(&ra->thread, NULL, writer_main, ra) != 0) {
        pthread_mutex_destroy(&ra->mu);
        pthread_cond_destroy(&ra->cv);
        record_async_finish(ra, NULL);
        return kv_fail(err, KV_EFAIL, "record_async: cannot start the writer thread");
    }
    ra->started = true;
    return KV_OK;
}

/* The writer's error into err (lock held). */
static int writer_error(record_async *ra, kv_err *err)
{
    return ra->err.code ? kv_fail(err, ra->err.code, "%s", ra->err.msg) : KV_OK;
}

int record_async_acquire(record_async *ra, void **buf, kv_err *err)
{
    *buf = NULL;
    double t0 = kv_now_seconds();
    pthread_mutex_lock(&ra->mu);
    while (!ra->nfree && !ra->err.code) pthread_cond_wait(&ra->cv, &ra->mu);
    int rc = writer_error(ra, err);
    if (!rc) *buf = ra->free_bufs[--ra->nfree];
    pthread_mutex_unlock(&ra->mu);
    ra->wait_s += kv_now_seconds() - t0;
    return rc;
}

int record_async_submit(record_async *ra, void *buf, record_async_job job, kv_err *err)
{
    double t0 = kv_now_seconds();
    pthread_mutex_lock(&ra->mu);
    while (ra->count == RECORD_ASYNC_QUEUE && !ra->err.code) pthread_cond_wait(&ra->cv, &ra->mu);
    int rc = writer_error(ra, err);
    if (rc) { /* not queued: release as the writer would have */
        if (buf) ra->free_bufs[ra->nfree++] = buf;
        pthread_mutex_unlock(&ra->mu);
        if (job.done) job.done(job.ctx);
        return rc;
    }
    ra->queue[(ra->head + ra->count) % RECORD_ASYNC_QUEUE] = (record_async_item){job, buf};
    ra->count++;
    pthread_cond_broadcast(&ra->cv);
    pthread_mutex_unlock(&ra->mu);
    ra->wait_s += kv_now_seconds() - t0;
    return KV_OK;
}

int record_async_drain(record_async *ra, kv_err *err)
{
    if (!ra->started) return KV_OK;
    double t0 = kv_now_seconds();
    pthread_mutex_lock(&ra->mu);
    while (ra->count || ra->busy) pthread_cond_wait(&ra->cv, &ra->mu);
    int rc = writer_error(ra, err);
    pthread_mutex_unlock(&ra->mu);
    ra->wait_s += kv_now_seconds() - t0;
    return rc;
}

int record_async_finish(record_async *ra, kv_err *err)
{
    int rc = KV_OK;
    if (ra->started) {
        rc = record_async_drain(ra, err);
        pthread_mutex_lock(&ra->mu);
        ra->stop = true;
        pthread_cond_broadcast(&ra->cv);
        pthread_mutex_unlock(&ra->mu);
        pthread_join(ra->thread, NULL);
        pthread_mutex_destroy(&ra->mu);
        pthread_cond_destroy(&ra->cv);
        ra->started = false;
    }
    for (int i = 0; i < ra->nbuf; i++)
        if (ra->bufs[i]) ra->mem.release(ra->mem.mem_ctx, ra->bufs[i]);
    ra->nbuf = ra->nfree = 0;
    memset(ra->bufs, 0, sizeof ra->bufs);
    return rc;
}
