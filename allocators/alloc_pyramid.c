/* pyramid: PyramidKV's layer schedule (Cai et al., "PyramidKV: Dynamic KV
 * Cache Compression based on Pyramidal Information Funneling", 2024): lower
 * layers keep more. With window w and beta, per layer l of L
 *   min = (N − w)/beta,  max = 2(N − w) − min,
 *   N_l = w + max − l·(max − min)/(L − 1)          (N_0 = N when L = 1)
 * which sums to exactly L·N; every kv head of layer l gets N_l. Rounding by
 * largest remainder (ties to the lower layer) keeps the integer sum L·N.
 * Static: each stream evicts when its candidates exceed N_l. N < w (the
 * pyramid would turn upside down) and a top layer below one row are refused.
 * Parameters: beta (>= 1, default 20), window (integer >= 0, default 32). */
#include <math.h>
#include <stdlib.h>

#include "allocators/alloc.h"

/* The real N_l of the formula. */
static double layer_share(double N, double w, double beta, int64_t L, int64_t l)
{
    if (L == 1) return N;
    const double lo = (N - w) / beta, hi = 2 * (N - w) - lo;
    return w + hi - (double)l * (hi - lo) / (double)(L - 1);
}

/* Layer l's integer N_l: the floors, plus one for the L·N − Σ floors layers
 * with the largest fractional parts (ties to the lower layer). */
static int64_t layer_capacity(double N, double w, double beta, int64_t L, int64_t l)
{
    int64_t sum = 0, ahead = 0;
    const double x = layer_share(N, w, beta, L, l), fx = x - floor(x);
    for (int64_t j = 0; j < L; j++) {
        const double y = layer_share(N, w, beta, L, j), fy = y - floor(y);
        sum += (int64_t)floor(y);
        if (fy > fx || (fy == fx && j < l)) ahead++;
    }
    const int64_t extra = (int64_t)N * L - sum;   /* Σ of the fractional parts: in [0, L) */
    return (int64_t)floor(x) + (ahead < extra ? 1 : 0);
}

static int pyramid_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer,
                              int64_t *cap, kv_err *err)
{
    const double beta = alloc_num(ac, "beta"), w = alloc_num(ac, "window");
    if ((double)N < w)
        return kv_fail(err, KV_EUSAGE, "pyramid: budget %lld is below its window %g (N >= window is needed for "
                       "the pyramid's formula; lower window= or raise the budget)", (long long)N, w);
    if (L > 1 && w + ((double)N - w) / beta < 1)
        return kv_fail(err, KV_EUSAGE, "pyramid: budget %lld gives the top layer %g rows (< 1): raise the budget, "
                       "window= or lower beta=", (long long)N, w + ((double)N - w) / beta);
    const int64_t c = layer_capacity((double)N, w, beta, L, layer);
    for (int64_t g = 0; g < K; g++) cap[g] = c;
    return KV_OK;
}

const alloc_iface alloc_pyramid = {
    .name = "pyramid",
    .summary = "PyramidKV: layer l keeps w + max - l(max-min)/(L-1), min = (N-w)/beta, max = 2(N-w) - min",
    .params = {
        {.key = "beta", .kind = PARAM_NUMBER, .def = "20", .min = 1, .max = 1e6,
         .doc = "steepness: the top layer keeps w + (N-w)/beta, the bottom one w + (N-w)(2 - 1/beta)"},
        {.key = "window", .kind = PARAM_NUMBER, .def = "32", .min = 0, .max = 9007199254740992.0, .integer = true,
         .doc = "w, the rows every layer keeps besides its pyramid share (N must be >= w)"},
    },
    .kind = ALLOC_STATIC,
    .capacities = pyramid_capacities,
};
