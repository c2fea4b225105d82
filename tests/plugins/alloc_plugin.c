/* Plug-in allocators for tests/scripts/test_plugin.py. Without a macro: `plugeven`, a dynamic
 * allocator (a layer's kv heads) that deals the scope's total out one row at a time, stream
 * after stream, up to each stream's candidates: with streams of equal candidates every one keeps
 * N, as uniform. ALLOC_MODEL: the same over the whole model's streams (`plugevenm`, replayed in
 * lock step). One macro each for what kvtrace must refuse:
 *   ALLOC_CLASH       an allocator named pyramid (a built-in): exit 2 at load
 *   ALLOC_BAD_SIZE    tables claiming an alloc_scope larger than the host's: exit 2 at load
 *   ALLOC_NO_SHARES   a dynamic allocator without shares: exit 2 at load
 *   ALLOC_BAD_CAPS    static capacities N, but N + 1 on layer 0's first head (the sum is off): exit 3
 *   ALLOC_ZERO_CAP    static capacities N, but 0 on the last layer's last head and N+1 on the first: exit 3
 *   ALLOC_HUGE_CAPS   static capacities N + 2^62 on a model of four streams (L*K = 4): the int64 sum wraps to
 *                     L*K*N exactly; each capacity must be checked before it is added: exit 3
 *   ALLOC_BAD_SHARES  plugeven's shares less one row: exit 3 at the first evicting step */
#include <kvtrace/allocator.h>

__attribute__((unused)) static int even_shares(const alloc_config *ac, const alloc_scope *s, alloc_buf *b,
                                               int64_t *counts, kv_err *err)
{
    (void)ac, (void)b, (void)err;
    int64_t left = s->total;
    for (int64_t x = 0; x < s->n_streams; x++) counts[x] = 1, left--;
    for (int more = 1; left > 0 && more;) {
        more = 0;
        for (int64_t x = 0; x < s->n_streams && left > 0; x++)
            if (counts[x] < s->n[x]) counts[x]++, left--, more = 1;
    }
#ifdef ALLOC_BAD_SHARES
    counts[0]--;
#endif
    return KV_OK;
}

__attribute__((unused)) static int odd_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K,
                                                  int64_t layer, int64_t *cap, kv_err *err)
{
    (void)ac, (void)err;
    for (int64_t g = 0; g < K; g++) cap[g] = N;
#ifdef ALLOC_HUGE_CAPS
    for (int64_t g = 0; L * K == 4 && g < K; g++) cap[g] = N + ((int64_t)1 << 62);
    (void)layer;
#else
    if (layer == 0) cap[0] = N + 1;
#endif
#ifdef ALLOC_ZERO_CAP
    if (layer == L - 1) cap[K - 1] = 0;
#else
    (void)L;
#endif
    return KV_OK;
}

static const alloc_iface plug = {
#if defined(ALLOC_CLASH)
    .name = "pyramid",
#elif defined(ALLOC_BAD_CAPS) || defined(ALLOC_ZERO_CAP) || defined(ALLOC_HUGE_CAPS)
    .name = "plugodd",
    .kind = ALLOC_STATIC,
    .per_head = true,
    .capacities = odd_capacities,
#elif defined(ALLOC_MODEL)
    .name = "plugevenm",
#else
    .name = "plugeven",
#endif
    .summary = "deals the scope's total out one row at a time, stream after stream",
#if !defined(ALLOC_BAD_CAPS) && !defined(ALLOC_ZERO_CAP) && !defined(ALLOC_HUGE_CAPS)
#ifdef ALLOC_MODEL
    .kind = ALLOC_DYNAMIC_MODEL,
#else
    .kind = ALLOC_DYNAMIC_LAYER,
#endif
#ifndef ALLOC_NO_SHARES
    .shares = even_shares,
#endif
#endif
};

#ifdef ALLOC_BAD_SIZE
const uint32_t kvtrace_plugin_abi = KVTRACE_POLICY_ABI;
const kvtrace_plugin *kvtrace_plugin_tables(const kvtrace_host *host)
{
    static const alloc_iface *const list[] = {&plug, NULL};
    static const kvtrace_plugin tables = {KVTRACE_POLICY_ABI, sizeof(policy_config), sizeof(policy_view),
                                          sizeof(policy_iface), NULL, sizeof(alloc_config),
                                          sizeof(alloc_scope) + 8, sizeof(alloc_buf), sizeof(alloc_iface), list};
    (void)host;
    return &tables;
}
#else
static const alloc_iface *const allocators[] = {&plug, NULL};
KVTRACE_PLUGIN_LISTS(NULL, allocators)
#endif
