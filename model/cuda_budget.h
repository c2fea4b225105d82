/* cuda_budget: the device memory a capture on the GPU needs, checked
 * against the device's free memory before any work. It holds the weights
 * (in the weight type), the float32 KV cache, the RoPE table, O(B·T)-free
 * scratch of O(B·(dim + ffn + V)), and with column sums a double [L][H][T]
 * array (docs/cuda.md, "Device memory"). */
#ifndef KV_CUDA_BUDGET_H
#define KV_CUDA_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "model/cuda_lib.h"
#include "model/model.h"

/* Bytes of device memory a capture needs. */
typedef struct {
    uint64_t weights;   /* matrices in the weight type, vectors float32 */
    uint64_t kv_cache;  /* 2 L K T D float32 */
    uint64_t scratch;   /* activations, logits, RoPE table, statistics, cuBLAS */
    uint64_t colsum;    /* L H T doubles, when column sums are recorded */
    uint64_t total;
} cuda_budget;

void cuda_budget_compute(const kv_model *m, int64_t T, int64_t B, kvcuda_dtype wt, bool colsum, cuda_budget *out);

/* KV_EFAIL, with every number, when the budget exceeds free_bytes. */
int cuda_budget_check(const cuda_budget *b, uint64_t free_bytes, uint64_t total_bytes, const char *device,
                      kv_err *err);

#endif
