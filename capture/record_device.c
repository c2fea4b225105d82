/* The GPU recording path (record_device.h). */
#include "capture/record_device.h"

#include <stdlib.h>
#include <string.h>

static void *pinned_alloc(void *mem_ctx, size_t bytes)
{
    record_device *rd = mem_ctx;
    void *h = NULL;
    kv_err e = {0};
    return rd->be->staging->host_alloc(rd->ctx, &h, bytes, "recording buffer", &e) ? NULL : h;
}

static void pinned_release(void *mem_ctx, void *p)
{
    record_device *rd = mem_ctx;
    rd->be->staging->host_release(rd->ctx, p);
}

int record_device_init(record_device *rd, recorder *rec, const backend_iface *be, void *ctx, const model_config *c,
                       int64_t B, int nbuf, kv_err *err)
{
    memset(rd, 0, sizeof *rd);
    rd->rec = rec, rd->inner = recorder_observer(rec), rd->be = be, rd->ctx = ctx;
    rd->H = c->n_heads, rd->K = c->n_kv_heads, rd->D = c->head_dim, rd->V = c->vocab_size;
    rd->known = rec->known;
    const int64_t qkv = (rd->H + 2 * rd->K) * rd->D, ref = rd->H * (rd->D + 2); /* a chunk's q, k, v or out, stats */
    const size_t bytes = sizeof(float) * (size_t)B * (size_t)(qkv > ref ? qkv : ref);
    record_async_mem mem = {pinned_alloc, pinned_release, rd};
    int rc = record_async_init(&rd->ra, nbuf, bytes, &mem, err);
    for (int i = 0; !rc && i < rd->ra.nbuf; i++)
        if (!(rd->dstage[i] = be->kernels->alloc(ctx, bytes, 1, "recording stage", err))) rc = err->code;
    return rc;
}

/* The device twin of pinned buffer buf. */
static void *twin(const record_device *rd, const void *buf)
{
    for (int i = 0; i < rd->ra.nbuf; i++)
        if (rd->ra.bufs[i] == buf) return rd->dstage[i];
    return NULL;
}

/* src (device) -> the twin at off (on the compute stream) -> the pinned buffer (copy stream) */
static int stage(record_device *rd, char *buf, char *dev, size_t off, const void *src, size_t bytes, kv_err *err)
{
    return rd->be->staging->stage(rd->ctx, buf + off, dev + off, src, bytes, err);
}

typedef struct {
    record_device *rd;
    void *fence;
    int64_t layer, pos0, n;
    float *logits;  /* on_logits jobs: [n][V] copy */
    int64_t known;
} rd_job;

static int job_wait(void *ctx, void *buf, kv_err *err)
{
    (void)buf;
    rd_job *j = ctx;
    return j->fence ? j->rd->be->staging->fence_wait(j->rd->ctx, j->fence, err) : KV_OK;
}

/* buf holds q [n][H*D], then k and v [n][K*D] */
static int job_write_qkv(void *ctx, void *buf, kv_err *err)
{
    rd_job *j = ctx;
    const record_device *rd = j->rd;
    const float *q = buf, *k = q + j->n * rd->H * rd->D, *v = k + j->n * rd->K * rd->D;
    return rd->inner.on_qkv ? rd->inner.on_qkv(rd->inner.ctx, j->layer, j->pos0, j->n, q, k, v, err) : KV_OK;
}

/* buf holds out [n][H*D], then the statistics [2][H][n] */
static int job_write_output(void *ctx, void *buf, kv_err *err)
{
    rd_job *j = ctx;
    const record_device *rd = j->rd;
    const float *out = buf, *stats = out + j->n * rd->H * rd->D;
    return rd->inner.on_output ? rd->inner.on_output(rd->inner.ctx, j->layer, j->pos0, j->n, out, stats, err) : KV_OK;
}

static int job_write_logits(void *ctx, void *buf, kv_err *err)
{
    (void)buf;
    rd_job *j = ctx;
    j->rd->rec->known = j->known; /* the recorder is touched on this thread only */
    return j->rd->inner.on_logits ? j->rd->inner.on_logits(j->rd->inner.ctx, j->pos0, j->n, j->logits, err) : KV_OK;
}

static void job_done(void *ctx)
{
    rd_job *j = ctx;
    if (j->fence) j->rd->be->staging->fence_free(j->rd->ctx, j->fence);
    free(j->logits);
    free(j);
}

/* Stages up to three device arrays (src[i], bytes[i]; NULL: skipped, its room kept) one after another
 * into a buffer and queues `write` for it. */
static int stage_job(record_device *rd, int64_t layer, int64_t pos0, int64_t n, const void *const src[3],
                     const size_t bytes[3], record_async_fn write, kv_err *err)
{
    if (bytes[0] + bytes[1] + bytes[2] > rd->ra.bytes)
        return kv_fail(err, KV_EFAIL, "recording: a chunk of %lld rows exceeds the buffers", (long long)n);
    rd_job *j = calloc(1, sizeof *j);
    if (!j) return kv_fail(err, KV_EFAIL, "recording: out of memory");
    j->rd = rd, j->layer = layer, j->pos0 = pos0, j->n = n;
    void *buf = NULL;
    int rc = record_async_acquire(&rd->ra, &buf, err);
    char *h = buf, *dev = rc ? NULL : twin(rd, buf);
    if (!rc && !dev) rc = kv_fail(err, KV_EFAIL, "recording: a buffer without its device twin");
    for (size_t i = 0, off = 0; !rc && i < 3; off += bytes[i], i++)
        if (src[i] && bytes[i]) rc = stage(rd, h, dev, off, src[i], bytes[i], err);
    if (!rc) rc = rd->be->staging->fence(rd->ctx, &j->fence, err);
    if (rc && !buf) {
        job_done(j);
        return rc;
    }
    record_async_job job = {job_wait, rc ? NULL : write, job_done, j};
    int rc2 = record_async_submit(&rd->ra, buf, job, err); /* on error too: the buffer goes back after the copy */
    return rc ? rc : rc2;
}

static int on_qkv(void *ctx, int64_t layer, int64_t pos0, int64_t n, const float *q, const float *k, const float *v,
                  kv_err *err)
{
    record_device *rd = ctx;
    const size_t qb = sizeof(float) * (size_t)(n * rd->H * rd->D), kb = sizeof(float) * (size_t)(n * rd->K * rd->D);
    const void *src[3] = {rd->rec->want.queries ? q : NULL, k, v};
    return stage_job(rd, layer, pos0, n, src, (size_t[3]){qb, kb, kb}, job_write_qkv, err);
}

/* The layer's attention outputs and softmax statistics (the recorded full-cache reference). */
static int on_output(void *ctx, int64_t layer, int64_t pos0, int64_t n, const float *out, const float *stats,
                     kv_err *err)
{
    record_device *rd = ctx;
    const size_t ob = sizeof(float) * (size_t)(n * rd->H * rd->D), sb = sizeof(float) * (size_t)(2 * rd->H * n);
    const void *src[3] = {out, stats, NULL};
    return stage_job(rd, layer, pos0, n, src, (size_t[3]){ob, sb, 0}, job_write_output, err);
}

static int on_logits(void *ctx, int64_t pos0, int64_t n, const float *logits, kv_err *err)
{
    record_device *rd = ctx;
    rd_job *j = calloc(1, sizeof *j);
    const bool rows = recorder_reads_logits(rd->rec); /* else the tokens alone are written: no copy */
    const size_t bytes = sizeof(float) * (size_t)(n * rd->V);
    if (!j || (rows && !(j->logits = malloc(bytes)))) {
        free(j);
        return kv_fail(err, KV_EFAIL, "recording: out of memory for %lld rows of logits", (long long)n);
    }
    if (rows) memcpy(j->logits, logits, bytes);
    j->rd = rd, j->pos0 = pos0, j->n = n, j->known = rd->known;
    return record_async_submit(&rd->ra, NULL, (record_async_job){NULL, job_write_logits, job_done, j}, err);
}

forward_observer record_device_observer(record_device *rd)
{
    forward_observer o = {.ctx = rd, .on_qkv = on_qkv, .on_logits = on_logits,
                          .on_output = rd->inner.on_output ? on_output : NULL};
    return o;
}

int record_device_drain(record_device *rd, kv_err *err)
{
    return record_async_drain(&rd->ra, err);
}

int record_device_finish(record_device *rd, kv_err *err)
{
    int rc = record_async_finish(&rd->ra, err);
    for (int i = 0; i < RECORD_ASYNC_MAX_BUF; i++)
        if (rd->dstage[i]) rd->be->kernels->release(rd->ctx, rd->dstage[i]);
    memset(rd->dstage, 0, sizeof rd->dstage);
    return rc;
}
