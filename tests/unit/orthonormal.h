/* A random orthonormal set for tests that build data with known geometry
 * (header-only, like testutil.h). */
#ifndef KV_TEST_ORTHONORMAL_H
#define KV_TEST_ORTHONORMAL_H

#include <math.h>

#include "core/rng.h"

/* q [n][D]: n ≤ D orthonormal rows, Gram–Schmidt in double on normal draws. */
static inline void tu_orthonormal(double *q, int n, int D, uint64_t seed)
{
    kv_rng r;
    rng_init(&r, seed, 11, 0, 0);
    for (int a = 0; a < n; a++) {
        double *v = q + a * D;
        for (int d = 0; d < D; d++) v[d] = rng_normal(&r);
        for (int b = 0; b < a; b++) {
            double dot = 0.0;
            for (int d = 0; d < D; d++) dot += v[d] * q[b * D + d];
            for (int d = 0; d < D; d++) v[d] -= dot * q[b * D + d];
        }
        double nrm = 0.0;
        for (int d = 0; d < D; d++) nrm += v[d] * v[d];
        for (int d = 0; d < D; d++) v[d] /= sqrt(nrm);
    }
}

#endif
