/* attn_colsum: exact causal attention column sums without a T x T matrix.
 *
 * colsum[j] = sum over queries i >= j of softmax_j(q_i . k_j * scale), the
 * softmax over j' <= i (the full causal past). Queries are processed in blocks
 * of rows: for a block, the scores against every visible key are formed with
 * one sgemm into an [n][i_end] scratch, each row's maximum and normaliser are
 * taken first, then the normalised weights are added to colsum in double.
 * Memory: the scratch, O(block * T), never T x T. */
#ifndef KV_ATTN_COLSUM_H
#define KV_ATTN_COLSUM_H

#include <stdint.h>

enum { ATTN_COLSUM_BLOCK = 128 };

/* Adds the contributions of queries i0 .. i0+n-1 (q: [n][D], query i seeing
 * keys 0..i) to colsum[0 .. i0+n-1]. k: [i0+n][D] (at least). scratch:
 * [n][i0+n] floats. The caller zeroes colsum once before the first block.
 * A capture calls this per chunk; a whole head is attn_colsum_head. */
void attn_colsum_add_rows(const float *q, int64_t i0, int64_t n, const float *k, int64_t D,
                          float scale, double *colsum, float *scratch);

/* Whole head: colsum[T] (zeroed here) for q [T][D], k [T][D]; scratch as
 * attn_colsum_scratch_floats(T) floats. */
void attn_colsum_head(const float *q, const float *k, int64_t T, int64_t D, float scale,
                      double *colsum, float *scratch);

int64_t attn_colsum_scratch_floats(int64_t T);

/* For threads: rows [r0, r1) in blocks, added into colsum (not zeroed). */
void attn_colsum_row_range(const float *q, const float *k, int64_t r0, int64_t r1, int64_t D,
                           float scale, double *colsum, float *scratch);

/* Splits rows [0, T) into P ranges of about equal work (row i costs i + 1),
 * bounds[0] = 0 <= ... <= bounds[P] = T. A fixed split (not one per thread
 * count) keeps summation order, hence results, independent of threads. */
void attn_colsum_partition(int64_t T, int P, int64_t *bounds);

#endif
