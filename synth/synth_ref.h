/* synth_ref: the exact full-cache attention output, log-sum-exp and row
 * maximum of one synthetic kv head's query heads (/attention/out,
 * /attention/lse, /attention/max), computed in double and rounded to float. */
#ifndef KV_SYNTH_REF_H
#define KV_SYNTH_REF_H

#include <stdint.h>

#include "core/kv_error.h"

enum { SYNTH_REF_BLOCK = 64 }; /* query rows per work item */

/* q [G][T][D] (the G query heads of one kv head), k and v [T][D]; out
 * [G][T][D], lse [G][T] (scale 1/sqrt(D), natural log) and mx [G][T] (the
 * largest scaled score of each row). Work split over `threads`, values
 * independent of it. Out of memory: KV_EFAIL. */
int synth_ref_compute(const float *q, const float *k, const float *v, int64_t T, int64_t D, int64_t G, int threads,
                      float *out, float *lse, float *mx, kv_err *err);

#endif
