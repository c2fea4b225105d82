/* head_importance: how much a kv head's attention reaches beyond the sinks
 * and the recent window, and how concentrated it is: the offline head
 * ranking of DuoAttention-style and HeadKV-style allocators
 * (docs/analyze.md, "Head importance"; `sim --head-scores` reads the file).
 *
 * For query head h and query i, p_ij = softmax over j <= i of q_i·k_j/√D (the
 * full causal cache). The outside set of query i is O(i) = {j : S <= j <= i − W}
 * (neither one of the first S keys, the sinks, nor one of the W most recent,
 * i − W < j <= i). Over the queries Q = [S + W, T) (all of [0, T) when T <= S + W,
 * where every O(i) is empty):
 *   score         = mean over the G query heads and i in Q of Σ_{j ∈ O(i)} p_ij
 *   concentration = mean over the same of max_j p_ij (1 for a head that puts
 *                   all of a query's attention on one key: retrieval-like)
 * Queries are processed in blocks of HEAD_IMP_BLOCK rows, one sgemm per
 * block into an [n][i+n] scratch: O(HEAD_IMP_BLOCK·T) memory, never T×T.
 *
 * With the recorded row statistics (/attention/lse and /attention/max of a
 * full-mode trace) both follow without the other keys: p_ij = exp(s_ij −
 * lse_i), so Σ_{j ∈ O(i)} p_ij = 1 − Σ_{j ∉ O(i)} p_ij over only the S sinks
 * and W recent keys, and max_j p_ij = exp(m_i − lse_i): O(T·(S+W)·D) instead
 * of O(T²·D) (head_importance_kv_recorded; its accuracy in its comment and
 * docs/analyze.md). analyze uses it for float32 traces only: the statistics
 * are of the unrounded rows, which float16 /queries and /keys are not. */
#ifndef KV_HEAD_IMPORTANCE_H
#define KV_HEAD_IMPORTANCE_H

#include <stdint.h>

enum { HEAD_IMP_BLOCK = 64, HEAD_IMP_SINKS = 4, HEAD_IMP_RECENT = 64 };

typedef struct {
    double score, concentration;
} head_importance;

/* Floats of scratch head_importance_kv needs. */
int64_t head_importance_scratch(int64_t T);

/* q [G][T][D]: the G query heads of one kv head; k [T][D] its keys. */
void head_importance_kv(const float *q, int64_t G, const float *k, int64_t T, int64_t D, int64_t sinks,
                        int64_t recent, float *scratch, head_importance *out);

/* The same from the recorded statistics: lse [G][T] and mx [G][T] of the G
 * query heads (/attention/lse, /attention/max); scratch as above. */
void head_importance_kv_recorded(const float *q, int64_t G, const float *k, const float *lse, const float *mx,
                                 int64_t T, int64_t D, int64_t sinks, int64_t recent, float *scratch,
                                 head_importance *out);

#endif
