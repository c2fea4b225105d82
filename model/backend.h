/* backend: where a model run's arithmetic happens, as one interface with a
 * small static table of values chosen by name (`--device NAME`):
 *
 *   cpu   the CPU kernels (model/backend_cpu.c, OpenBLAS), host memory;
 *   cuda  the CUDA library build/libkvtrace_cuda.so (model/backend_cuda.c
 *         over model/cuda_lib.c), opened with dlopen only when chosen, so a
 *         CPU run never maps cudart or cuBLAS. KVTRACE_CUDA_LIB may name
 *         another library of the same ABI: tests/emul's host emulation is
 *         how CI runs this value without a GPU.
 *
 * The interface (`backend_iface`) is kept apart from the instance: open
 * returns a context that every hook and every kernel of the table takes
 * first (NULL for the CPU); nothing is process-wide. Hooks marked optional
 * may be NULL and are checked by the caller. A run asks, in order: check
 * (before any work: the options the backend refuses), open, prepare (once
 * the model is loaded: the kernels' view of it), then walks on `kernels`
 * (model/forward.h); column sums may be accumulated by the backend itself
 * (colsum), and a backend whose kernels' memory is not the host's says how
 * recording stages it (staging). */
#ifndef KV_BACKEND_H
#define KV_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "model/forward.h"
#include "model/model.h"

/* What a run will ask of a backend, known before the model is loaded. */
typedef struct {
    bool evict;          /* eviction inside the run: every head's weights and cache compaction */
    bool attention_full; /* every head's full weights recorded */
    int weights;         /* type of the weight matrices in the kernels' memory: 0 f32, 1 f16, 2 bf16 */
    int threads;         /* host threads the kernels may use (at least 1); results do not depend on it */
    bool int8;           /* products of Q8_0, Q4_0 and Q4_1 matrices on int8-quantised rows (capture --compute
                            int8, docs/capture.md#compute-int8); a backend without them refuses it in check */
} backend_request;

/* Asynchronous staging of the kernels' memory to the host, for recording
 * without stalling the device (capture/record_device.c). Fences are opaque. */
typedef struct {
    /* page-locked host memory (asynchronous downloads land in it) */
    int (*host_alloc)(void *ctx, void **h, size_t bytes, const char *what, kv_err *err);
    void (*host_release)(void *ctx, void *h);
    /* bytes at src (kernels' memory) copied to twin (kernels' memory), in
     * the order of the kernels, then twin to host asynchronously: the next
     * kernels may overwrite src at once */
    int (*stage)(void *ctx, void *host, void *twin, const void *src, size_t bytes, kv_err *err);
    /* a fence after the staging started so far; wait blocks the caller
     * (any thread); free releases it */
    int (*fence)(void *ctx, void **fence, kv_err *err);
    int (*fence_wait)(void *ctx, void *fence, kv_err *err);
    void (*fence_free)(void *ctx, void *fence);
} backend_staging;

typedef struct {
    const char *name;               /* --device NAME */
    const forward_kernels *kernels; /* the table the walk runs on, with the instance as context */
    bool weight_types;              /* takes 16-bit weights (backend_request.weights) */
    /* optional: KV_EUSAGE, one line, for what the backend refuses; before any work */
    int (*check)(const backend_request *req, kv_err *err);
    /* optional: the instance (NULL without open); no usable device: KV_EFAIL, one line */
    int (*open)(const backend_request *req, void **ctx, kv_err *err);
    void (*close)(void *ctx);
    /* optional (NULL: the walk reads m itself): model m for a walk of T
     * positions in chunks of up to B, with column sums accumulated when
     * colsum (and the backend has the colsum hook): checks the memory it
     * needs, mirrors the weights, allocates scratch; *walk is the model the
     * walk reads (owned by the instance, valid until close). One prepared
     * model per instance. */
    int (*prepare)(void *ctx, const kv_model *m, int64_t T, int64_t B, bool colsum, const kv_model **walk,
                   kv_err *err);
    /* optional (NULL: the walk hands every head's weights to the observers,
     * on_attention): the column sums accumulated since prepare, into host
     * [L][H][T] (the recorder's layout) */
    int (*colsum)(void *ctx, double *host, kv_err *err);
    /* optional: peak bytes of the instance's own device allocations so far */
    uint64_t (*peak_bytes)(void *ctx);
    /* NULL where kernels->host_memory: observers read the walk's arrays */
    const backend_staging *staging;
} backend_iface;

extern const backend_iface BACKEND_CPU;
extern const backend_iface BACKEND_CUDA;

/* Every backend, NULL-terminated; the first is the default. */
const backend_iface *const *backend_all(void);

/* The backend called `name`; NULL if none is. */
const backend_iface *backend_find(const char *name);
/* be, or the default backend (the table's first: cpu) when be is NULL: the one fallback. */
const backend_iface *backend_or_default(const backend_iface *be);

/* "cpu or cuda": the names for a message. */
void backend_names(char *buf, size_t cap);

/* check, then open: *ctx NULL on failure */
int backend_open(const backend_iface *b, const backend_request *req, void **ctx, kv_err *err);

/* close where the backend has one (safe on a NULL ctx) */
void backend_close(const backend_iface *b, void *ctx);

#endif
