/* attn_hist: the attention a candidate has received, kept by position for
 * the policies that accumulate it across chunks (h2o, scissorhands). Memory
 * follows the cache, not the sequence: the sums of the candidates seen at
 * the last update, by ascending position (an evicted position never comes
 * back, so its sum is dropped). */
#ifndef KV_POLICY_ATTN_HIST_H
#define KV_POLICY_ATTN_HIST_H

#include <stdint.h>

#include "policies/policy.h"

typedef struct {
    int64_t *pos, *npos;   /* [cap] positions; the next update's */
    double *acc, *nacc;    /* [cap] their sums; the next update's */
    int64_t n, cap;
} attn_hist;

/* New sums for v's candidates: decay · the sum held (0 for a new one) plus
 * the attention of v->attn's rows [first_row, n_queries), added in row order
 * in double. KV_OK, or out of memory in err naming `owner` (the old sums stay). */
int attn_hist_update(attn_hist *h, const policy_view *v, int64_t first_row, double decay, const char *owner,
                     kv_err *err);

/* out[c] = the sum held for v->pos[c] (0 for a candidate never seen). */
void attn_hist_lookup(const attn_hist *h, const policy_view *v, double *out);

void attn_hist_free(attn_hist *h);

/* A policy's state as one attn_hist: policy_iface's create and destroy. */
int attn_hist_create(const policy_config *cfg, void **state, kv_err *err);
void attn_hist_destroy(void *state);

#endif
