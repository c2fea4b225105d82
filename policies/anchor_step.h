/* anchor_step: keydiff's anchor sum S = Σ k̂ kept across the steps of one stream and updated by
 * the keys that joined and left (docs/policies.md, "keydiff's exact anchor"); core/anchor.h has
 * the exact rounding that makes the update equal the sum from scratch bit for bit. */
#ifndef KV_POLICIES_ANCHOR_STEP_H
#define KV_POLICIES_ANCHOR_STEP_H

#include <stdint.h>

#include "core/kv_error.h"

/* The sum kept across steps for one stream (zeroed: empty). anchor_update makes the candidates
 * (positions ascending) the members, norms[n] out, choosing by cost (docs/policies.md): the sum
 * updated by the keys that joined (norm, rounded k̂ kept) and left (their k̂ taken back), or
 * from scratch in one pass of norms and sum, the members then dropped (same doubles either way). */
typedef struct { int64_t pos, row; double norm; } anchor_member;
typedef struct {
    int64_t D, n, cap, n_free, last_pos;
    double *sum;                /* [D] */
    anchor_member *m, *next;    /* [cap + 1] the members by position, the next list */
    double *unit, *inv;         /* [cap][D] each member's rounded k̂, at its row; [cap] scratch */
    int64_t *free_rows, *idx;   /* [cap] free rows; [2 cap] the rows that leave, or the joiners and their rows */
    int64_t steps, scratch;     /* updates, and how many were from scratch */
} anchor_state;
int anchor_update(anchor_state *a, const float *rows, const int64_t *pos, int64_t n, int64_t D, double *norms,
                  kv_err *err);
void anchor_free(anchor_state *a);

#endif
