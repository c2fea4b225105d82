/* anchor: keydiff's anchor sum S = Σ_m k̂_m (k̂ = k/‖k‖), exact, so that its step-by-step
 * update equals the sum from scratch bit for bit (docs/policies.md, "keydiff's exact anchor").
 * Each component of k̂ is rounded to a multiple of 2^-36: below ANCHOR_MAX_N rows every partial
 * sum is a multiple of 2^-36 under 2^17, exact in double in any order. At or above it callers
 * use the plain double sum (keydiff and cos_anchor decide by the same n, so they agree). */
#ifndef KV_CORE_ANCHOR_H
#define KV_CORE_ANCHOR_H

#include <stdbool.h>
#include <stdint.h>
#include "core/kv_error.h"
#define ANCHOR_MAX_N ((int64_t)1 << 16)

/* sum[D] = Σ_j rounded rows_j / norms_j from scratch (a zero row adds nothing); inv: n doubles. */
void anchor_sum(const float *rows, int64_t n, int64_t D, const double *norms, double *inv, double *sum);

/* The sum kept across steps for one stream (zeroed: empty). anchor_update makes the candidates
 * (positions ascending) the members, norms[n] out, choosing by cost (docs/policies.md): the sum
 * updated by the keys that joined (norm, rounded k̂ kept) and left (their k̂ taken back), or
 * from scratch in one pass of norms and sum, the members then dropped (same doubles either way). */
typedef struct { int64_t pos, row; double norm; } anchor_member;
typedef struct {
    int64_t D, n, cap, n_free, last_pos;
    double *sum;                /* [D] */
    anchor_member *m, *next;    /* [cap] the members by position, the next list */
    double *unit, *inv;         /* [cap][D] each member's rounded k̂, at its row; [cap] scratch */
    int64_t *free_rows, *idx;   /* [cap] free rows; [2 cap] the rows that leave, or the joiners and their rows */
    int64_t steps, scratch;     /* updates, and how many were from scratch */
} anchor_state;
int anchor_update(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, int64_t D, double *norms,
                  kv_err *err);
void anchor_free(anchor_state *a);

/* keydiff's cosine scores from a sum of the normalised rows: out[j] = −cos(k_j, sum/n), or with
 * pairwise −(k_j·sum/‖k_j‖ − 1)/(n−1) (0 with one row or a zero row); mu: D doubles (may be sum). */
void anchor_cos_scores(const float *rows, int64_t n, int64_t D, const double *norms, const double *sum,
                       bool pairwise, double *mu, double *out);

#endif
