/* rng: small deterministic generators. Streams are derived from a seed and a
 * tuple of indices (layer, head, ...), so results never depend on the order
 * or the thread in which work is done. */
#ifndef KV_RNG_H
#define KV_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];     /* xoshiro256** state */
    double spare;      /* second Box-Muller normal */
    int has_spare;
} kv_rng;

/* Stream for (seed, a, b, c): independent for distinct tuples. */
void rng_init(kv_rng *r, uint64_t seed, uint64_t a, uint64_t b, uint64_t c);
uint64_t rng_u64(kv_rng *r);
double rng_uniform(kv_rng *r);   /* [0, 1) with 53 random bits */
double rng_normal(kv_rng *r);    /* standard normal */
uint64_t rng_below(kv_rng *r, uint64_t n);  /* uniform in [0, n), unbiased; n > 0 */

#endif
