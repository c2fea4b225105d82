/* myalloc: an out-of-tree kvtrace budget allocator, built as a plug-in.
 *
 * It restates PyramidKV's layer schedule (Cai et al., "PyramidKV: Dynamic KV
 * Cache Compression based on Pyramidal Information Funneling", 2024): with
 * window w and steepness beta, layer l of L keeps
 *   min = (N - w)/beta,  max = 2(N - w) - min,
 *   N_l = w + max - l(max - min)/(L - 1)        (N_0 = N when L = 1)
 * rows per kv head, rounded by largest remainder (ties to the lower layer) so
 * that the capacities sum to exactly L*K*N, as kvtrace checks they do.
 * kvtrace's built-in `pyramid` does the same, so
 *   kvtrace sim TRACE --plugin build/myalloc.so --allocators myalloc,pyramid ...
 * gives the same rows for both (tests/scripts/test_plugin.py checks it).
 *
 * A static allocator gives `capacities` (one layer's K at a time); a dynamic
 * one gives `shares` instead (docs/plugins.md). Build: make. */
#include <math.h>
#include <stdio.h>

#include <kvtrace/allocator.h>

/* Parameters come in the order of .params below (sorted by key): num[0] is beta, num[1] window. */
static double layer_share(double N, double w, double beta, int64_t L, int64_t l)
{
    if (L == 1) return N;
    const double lo = (N - w) / beta, hi = 2 * (N - w) - lo;
    return w + hi - (double)l * (hi - lo) / (double)(L - 1);
}

static int64_t layer_capacity(double N, double w, double beta, int64_t L, int64_t l)
{
    int64_t sum = 0, ahead = 0;
    const double x = layer_share(N, w, beta, L, l), fx = x - floor(x);
    for (int64_t j = 0; j < L; j++) {
        const double y = layer_share(N, w, beta, L, j), fy = y - floor(y);
        sum += (int64_t)floor(y);
        if (fy > fx || (fy == fx && j < l)) ahead++;
    }
    return (int64_t)floor(x) + (ahead < (int64_t)N * L - sum ? 1 : 0);
}

static int my_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                         kv_err *err)
{
    const double beta = ac->num[0], w = ac->num[1];
    if ((double)N < w || (L > 1 && w + ((double)N - w) / beta < 1)) {   /* one line, exit 2 */
        err->code = KV_EUSAGE;
        snprintf(err->msg, sizeof err->msg, "myalloc: budget %lld is too small for window %g and beta %g",
                 (long long)N, w, beta);
        return KV_EUSAGE;
    }
    const int64_t c = layer_capacity((double)N, w, beta, L, layer);
    for (int64_t g = 0; g < K; g++) cap[g] = c;
    return KV_OK;
}

static const alloc_iface myalloc = {
    .name = "myalloc",
    .summary = "PyramidKV restated as a plug-in: layer l keeps w + max - l(max-min)/(L-1)",
    .params = {
        {.key = "beta", .kind = PARAM_NUMBER, .def = "20", .min = 1, .max = 1e6,
         .doc = "steepness: the top layer keeps w + (N-w)/beta"},
        {.key = "window", .kind = PARAM_NUMBER, .def = "32", .min = 0, .max = 1e9, .integer = true,
         .doc = "w, the rows every layer keeps besides its pyramid share (N >= w)"},
    },
    .kind = ALLOC_STATIC,
    .capacities = my_capacities,
};

static const alloc_iface *const my_allocators[] = {&myalloc, NULL};
KVTRACE_PLUGIN_LISTS(NULL, my_allocators)
