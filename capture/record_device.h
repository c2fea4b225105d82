/* record_device: the recording path of a capture on the GPU (a backend
 * with staging, model/backend.h). It sits
 * between the walk and the recorder (capture/recorder.h): the walk hands it
 * the chunk's queries, keys and values in device memory; it starts their
 * copies into a page-locked buffer on the copy stream and queues a job for
 * the writer thread (capture/record_async.h), which waits for the copy and
 * calls the recorder there. The chunk's q/k/v are first copied on the
 * device, in stream order, into a device twin of the pinned buffer, since
 * the next layer overwrites them while the device-to-host copy may still
 * run; a twin is reused only after its buffer's job has waited for it. The walk goes on with the next layer while the
 * copy and the HDF5 write run; with two buffers it waits only when the
 * disk falls behind. Every recorder call (and so every HDF5 call) happens on
 * the writer thread, in order; logits, which the walk already brought to the
 * host, are copied into the job. In a full run the layer's attention outputs
 * and softmax statistics (the recorded reference, on_output) go the same way. */
#ifndef KV_RECORD_DEVICE_H
#define KV_RECORD_DEVICE_H

#include "capture/record_async.h"
#include "capture/recorder.h"
#include "model/backend.h"

typedef struct {
    recorder *rec;
    forward_observer inner;   /* the recorder's hooks, run on the writer thread */
    const backend_iface *be;  /* its kernels (the twins) and staging (pinned buffers, copies, fences) */
    void *ctx;                /* the backend instance */
    record_async ra;
    void *dstage[RECORD_ASYNC_MAX_BUF]; /* device twin of each pinned buffer */
    int64_t H, K, D, V;
    int64_t known;            /* tokens decided so far: the driver sets it, jobs take a copy */
} record_device;

/* Buffers of one chunk of up to B rows (q, k, v), `nbuf` of them (2: double
 * buffering), staged by backend `be` (be->staging set) with instance ctx. */
int record_device_init(record_device *rd, recorder *rec, const backend_iface *be, void *ctx, const model_config *c,
                       int64_t B, int nbuf, kv_err *err);

/* The hooks to pass to forward_chunk (on_qkv takes device pointers). */
forward_observer record_device_observer(record_device *rd);

/* Waits for every queued write; the writer's first error. Then the recorder
 * may be used on the calling thread again (recorder_finish). */
int record_device_drain(record_device *rd, kv_err *err);

/* Drains, stops the writer and frees the buffers. */
int record_device_finish(record_device *rd, kv_err *err);

#endif
