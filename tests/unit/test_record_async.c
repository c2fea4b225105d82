/* record_async on the CPU with plain buffers: jobs run in submission order
 * on one writer thread, never more than nbuf buffers are in flight, a slow
 * writer makes the producer wait (and only then), the writer's first error
 * reaches the producer, and every job's done runs, also after an error. */
#include "testutil.h"

#include <pthread.h>
#include <time.h>

#include "capture/record_async.h"

enum { NBUF = 2, JOBS = 40, WIDTH = 16 };

typedef struct {
    int order[JOBS];      /* sequence numbers as written */
    int nwritten, ndone;
    int in_flight, max_in_flight;
    int fail_at;          /* -1: never */
    int sleep_us;
    pthread_t writer;     /* thread that ran the first write */
    bool other_thread;    /* a write ran on another thread than the first */
    pthread_mutex_t mu;
} sink;

typedef struct {
    sink *s;
    int seq;
} job_ctx;

static int job_wait(void *ctx, void *buf, kv_err *err)
{
    (void)ctx, (void)buf, (void)err;
    return KV_OK;
}

static int job_write(void *ctx, void *buf, kv_err *err)
{
    job_ctx *j = ctx;
    sink *s = j->s;
    if (s->sleep_us) {
        struct timespec ts = {0, (long)s->sleep_us * 1000};
        nanosleep(&ts, NULL);
    }
    const int *v = buf;
    for (int i = 0; i < WIDTH; i++) assert_int_equal(v[i], j->seq * 100 + i); /* the data handed over */
    if (s->nwritten == 0) s->writer = pthread_self();
    else if (!pthread_equal(s->writer, pthread_self())) s->other_thread = true;
    if (j->seq == s->fail_at) return kv_fail(err, KV_EFAIL, "disk full at job %d", j->seq);
    s->order[s->nwritten++] = j->seq;
    return KV_OK;
}

static void job_done(void *ctx)
{
    job_ctx *j = ctx;
    pthread_mutex_lock(&j->s->mu);
    j->s->ndone++, j->s->in_flight--;
    pthread_mutex_unlock(&j->s->mu);
    free(j);
}

/* Produces JOBS buffers; returns the first error code. */
static int produce(record_async *ra, sink *s, kv_err *err)
{
    for (int q = 0; q < JOBS; q++) {
        void *buf;
        int rc = record_async_acquire(ra, &buf, err);
        if (rc) return rc;
        int *v = buf;
        for (int i = 0; i < WIDTH; i++) v[i] = q * 100 + i;
        job_ctx *j = malloc(sizeof *j);
        assert_non_null(j);
        j->s = s, j->seq = q;
        pthread_mutex_lock(&s->mu);
        if (++s->in_flight > s->max_in_flight) s->max_in_flight = s->in_flight;
        pthread_mutex_unlock(&s->mu);
        rc = record_async_submit(ra, buf, (record_async_job){job_wait, job_write, job_done, j}, err);
        if (rc) return rc;
    }
    return KV_OK;
}

static void sink_init(sink *s, int fail_at, int sleep_us)
{
    memset(s, 0, sizeof *s);
    s->fail_at = fail_at, s->sleep_us = sleep_us;
    pthread_mutex_init(&s->mu, NULL);
}

static void in_order_bounded(void **state)
{
    (void)state;
    sink s;
    sink_init(&s, -1, 200);
    record_async ra;
    kv_err err = {0};
    assert_int_equal(record_async_init(&ra, NBUF, WIDTH * sizeof(int), NULL, &err), KV_OK);
    assert_int_equal(produce(&ra, &s, &err), KV_OK);
    assert_int_equal(record_async_finish(&ra, &err), KV_OK);
    assert_int_equal(s.nwritten, JOBS);
    assert_int_equal(s.ndone, JOBS);
    for (int q = 0; q < JOBS; q++) assert_int_equal(s.order[q], q);
    assert_false(s.other_thread);
    assert_false(pthread_equal(s.writer, pthread_self())); /* written off the producer's thread */
    /* a buffer in flight is one acquired and not yet returned: at most NBUF
     * (+1 counted between the writer's done and its return to the pool) */
    assert_true(s.max_in_flight <= NBUF + 1);
    assert_true(ra.wait_s > 0.0); /* the slow writer made the producer wait */
    pthread_mutex_destroy(&s.mu);
}

static void error_reaches_producer(void **state)
{
    (void)state;
    sink s;
    sink_init(&s, 5, 0);
    record_async ra;
    kv_err err = {0};
    assert_int_equal(record_async_init(&ra, NBUF, WIDTH * sizeof(int), NULL, &err), KV_OK);
    int rc = produce(&ra, &s, &err);
    int rc2 = record_async_finish(&ra, &err);
    assert_true(rc == KV_EFAIL || rc2 == KV_EFAIL);
    assert_non_null(strstr(err.msg, "disk full at job 5"));
    assert_int_equal(s.nwritten, 5);           /* jobs after the failure are skipped */
    assert_int_equal(s.in_flight, 0); /* every submitted job's done ran */
    pthread_mutex_destroy(&s.mu);
}

static int custom_allocs, custom_frees;
static void *custom_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    custom_allocs++;
    return malloc(bytes);
}
static void custom_release(void *ctx, void *p)
{
    (void)ctx;
    custom_frees++;
    free(p);
}

static void memory_hooks_and_bufferless_jobs(void **state)
{
    (void)state;
    record_async_mem mem = {custom_alloc, custom_release, NULL};
    record_async ra;
    kv_err err = {0};
    assert_int_equal(record_async_init(&ra, 3, 64, &mem, &err), KV_OK);
    assert_int_equal(custom_allocs, 3);
    sink s;
    sink_init(&s, -1, 0);
    for (int q = 0; q < 10; q++) { /* jobs without a buffer keep their order too */
        job_ctx *j = malloc(sizeof *j);
        assert_non_null(j);
        j->s = &s, j->seq = q;
        pthread_mutex_lock(&s.mu);
        s.in_flight++;
        pthread_mutex_unlock(&s.mu);
        assert_int_equal(record_async_submit(&ra, NULL, (record_async_job){NULL, NULL, job_done, j}, &err), KV_OK);
    }
    assert_int_equal(record_async_drain(&ra, &err), KV_OK);
    assert_int_equal(s.ndone, 10);
    assert_int_equal(record_async_finish(&ra, &err), KV_OK);
    assert_int_equal(custom_frees, 3);
    assert_int_equal(record_async_init(&ra, 0, 64, NULL, &err), KV_EFAIL);
    assert_int_equal(record_async_finish(&ra, NULL), KV_OK); /* safe on a failed init */
    pthread_mutex_destroy(&s.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(in_order_bounded),
        cmocka_unit_test(error_reaches_producer),
        cmocka_unit_test(memory_hooks_and_bufferless_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
