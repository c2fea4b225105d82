/* uniform: every (layer, kv head) keeps N, the behaviour before allocators
 * existed (docs/sim.md#the-eviction-step-step-by-step). Static, so the streams
 * stay independent and the replay is exactly today's (no joint step, no extra
 * work). No parameters. */
#include "allocators/alloc.h"

static int uniform_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                              kv_err *err)
{
    (void)ac, (void)L, (void)layer, (void)err;
    for (int64_t g = 0; g < K; g++) cap[g] = N;
    return KV_OK;
}

const alloc_iface alloc_uniform = {
    .name = "uniform",
    .summary = "every (layer, kv head) keeps N (the behaviour without an allocator)",
    .kind = ALLOC_STATIC,
    .capacities = uniform_capacities,
};
