/* attn_causal: causal attention of a block of consecutive query rows, the
 * product both the capture kernel and sim's full-cache reference compute.
 *
 * Rows r = 0..n-1 are queries at positions pos0 + r; each attends to keys
 * 0 .. pos0 + r (the causal past). One sgemm forms the scores [n][pos0+n],
 * each row becomes its softmax (exp in float, the sum in double, zero above
 * the diagonal), one sgemm forms the outputs. Scratch O(n·T), never T x T. */
#ifndef KV_ATTN_CAUSAL_H
#define KV_ATTN_CAUSAL_H

#include <stdint.h>

/* q: rows of stride ldq; k, v: [pos0+n][D]; p: [n][pos0+n] weights out;
 * out: rows of stride ldo; lse (may be NULL): [n] log Σ_j exp(s_ij) of the
 * scaled scores s = q.k / sqrt(D); mx (may be NULL): [n] max_j s_ij. */
void attn_causal_rows(const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0, int64_t n,
                      int64_t D, float *p, float *out, int64_t ldo, double *lse, float *mx);

/* Rows [r0, r0 + rows) of the same n-row block, alone: the arithmetic of
 * attn_causal_rows(q + r0 ldq, ..., pos0 + r0, rows, ...), written into the
 * block's arrays (p rows of stride pos0 + n, zero past each row's position).
 * Blocks of a fixed size, whichever thread runs them, give results that do
 * not depend on the thread count (model/backend_cpu.c). */
void attn_causal_row_block(const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0, int64_t n,
                           int64_t r0, int64_t rows, int64_t D, float *p, float *out, int64_t ldo, double *lse,
                           float *mx);

/* The same for `groups` query heads sharing these keys (grouped-query
 * attention), stacked so that one pair of sgemms serves them all: q [groups*n][D],
 * row r at position pos0 + r % n; p [groups*n][pos0+n]; out [groups*n][D];
 * lse, mx (may be NULL) [groups*n]. Row for row the same arithmetic as above. */
void attn_causal_group_rows(const float *q, int64_t groups, const float *k, const float *v, int64_t pos0,
                            int64_t n, int64_t D, float *p, float *out, double *lse, float *mx);

#endif
