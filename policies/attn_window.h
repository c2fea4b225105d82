/* attn_window: SnapKV's observation window, shared by snapkv and the score
 * expressions' attn_window/attn_pooled features (expr/expr_feat.c), so both
 * compute the same doubles. */
#ifndef KV_POLICY_ATTN_WINDOW_H
#define KV_POLICY_ATTN_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include "policies/policy.h"

/* sum[c] (n doubles, overwritten) = Σ over the last `window` queries, positions i0 = max(0, now −
 * window + 1) … now of the trace's queries (cached or not), of their softmax over the candidates each
 * sees (scale 1/√D, weights in float, sums in double), averaged over v's q_heads; 0 without queries.
 * *first = i0. KV_OK, or out of memory in err naming `owner`. */
int attn_window_sums(const policy_view *v, int64_t window, double *sum, int64_t *first, const char *owner,
                     kv_err *err);

/* out[c] = the pool of sum over candidates c − ⌊K/2⌋ … c + K − 1 − ⌊K/2⌋, zero padded: their mean, or
 * (max) the largest of them and 0. out may not be sum. */
void attn_window_pool(const double *sum, int64_t n, int64_t kernel, bool max, double *out);

#endif
