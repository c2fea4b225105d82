/* kernels_cuda: the CUDA forward_kernels table, the second table the walk
 * (model/forward.c) runs on. It forwards each kernel to the backend
 * library (model/cuda/, opened by model/backend.c) on one process-wide
 * context: a capture runs one model on one device. Kernels return void as
 * the table's signatures do; the first failure is kept and returned by the
 * table's sync (the walk syncs after every chunk), later kernels are skipped.
 *
 * The walk reads weights through s->m: kernels_cuda_upload_model makes a
 * mirror kv_model whose weight pointers are device memory (matrices in the
 * weight type, vectors float32), which the driver passes to forward_init. */
#ifndef KV_KERNELS_CUDA_H
#define KV_KERNELS_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include "model/backend.h"
#include "model/forward.h"

/* Opens the backend (lib: NULL to search, see backend.h) with weights of type wt. */
int kernels_cuda_open(const char *lib, kvcuda_dtype wt, kv_err *err);

/* The table (valid after kernels_cuda_open). */
const forward_kernels *kernels_cuda_table(void);

/* The open backend (its api and context, device information). */
backend_cuda *kernels_cuda_backend(void);

/* Device copies of host's weights into dev (cfg and rope_div shared with host). */
int kernels_cuda_upload_model(const kv_model *host, kv_model *dev, kv_err *err);
void kernels_cuda_free_model(kv_model *dev);

/* Scratch of the attention kernels for chunks of up to B rows, and with
 * colsum the device's column sums [L][H][T] (double, zeroed). */
int kernels_cuda_prepare(const model_config *c, int64_t T, int64_t B, bool colsum, kv_err *err);

/* The column sums into host [L][H][T] (the recorder's layout). */
int kernels_cuda_colsum_download(double *host, kv_err *err);

/* Peak bytes of the backend's own device allocations so far. */
uint64_t kernels_cuda_peak_bytes(void);

void kernels_cuda_close(void);

#endif
