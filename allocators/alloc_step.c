/* alloc_step: the eviction step of a dynamic allocator's scope (alloc.h), for
 * both engines: steps 3 and 4 of docs/sim.md#the-eviction-step-step-by-step
 * over S streams at once, the one-stream rule of policy_step otherwise
 * unchanged (the same observe, the same scores, the same selection within a
 * stream). */
#include "allocators/alloc.h"

#include "core/progress.h"
#include "policies/select.h"

/* Step 4's scoring of every stream; the first policy error stops it. */
static int score_all(const alloc_scope_args *a, kv_err *err)
{
    const policy_iface *pi = a->pc->iface;
    for (int64_t x = 0; x < a->n_streams; x++) {
        policy_step_buf *b = a->bufs[x];
        const double t0 = kv_now_seconds();
        int rc = pi->score(a->pc, a->states[x], &a->views[x], b->scores, err);
        b->score_ns += (kv_now_seconds() - t0) * 1e9;
        b->calls++, b->candidates += a->views[x].n;
        if (rc) return rc;
    }
    return KV_OK;
}

int alloc_scope_step(const alloc_scope_args *a, int64_t *kept, bool *evicted, kv_err *err)
{
    const policy_iface *pi = a->pc->iface;
    const int64_t S = a->n_streams;
    int64_t all = 0;
    *evicted = false;
    for (int64_t x = 0; x < S; x++) {   /* step 3, every chunk */
        int rc = pi->observe ? pi->observe(a->pc, a->states[x], &a->views[x], err) : KV_OK;
        if (rc) return rc;
        all += a->views[x].n;
        if (kept) kept[x] = a->views[x].n;
    }
    if (pi->never_evicts || all <= a->total) return KV_OK;
    int rc = score_all(a, err);
    if (rc) return rc;
    const int64_t *pos[ALLOC_MAX_STREAMS];
    const double *scores[ALLOC_MAX_STREAMS];
    KV_ASSERT(S <= ALLOC_MAX_STREAMS);
    int64_t counts_n[ALLOC_MAX_STREAMS];
    for (int64_t x = 0; x < S; x++) counts_n[x] = a->views[x].n, pos[x] = a->views[x].pos, scores[x] = a->bufs[x]->scores;
    const alloc_scope s = {.n_streams = S, .n = counts_n, .scores = scores, .pos = pos, .budget = a->budget,
                           .total = a->total, .comparable = pi->scores_comparable, .views = a->views,
                           .per_layer = a->per_layer};
    if ((rc = a->ac->iface->shares(a->ac, &s, a->ab, a->counts, err))) return rc;
    for (int64_t x = 0; x < S; x++) {
        policy_step_buf *b = a->bufs[x];
        KV_ASSERT(a->counts[x] >= 1 && a->counts[x] <= counts_n[x]);
        const int64_t k = policy_select(b->scores, pos[x], counts_n[x], a->counts[x], b->keep, b->scratch);
        a->compact(a->ctx[x], b->keep, k);
        if (kept) kept[x] = k;
    }
    *evicted = true;
    return KV_OK;
}
