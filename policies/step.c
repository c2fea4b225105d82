/* step: the eviction step for both engines (see step.h;
 * docs/sim.md#the-eviction-step-step-by-step). */
#include "policies/step.h"

#include <stdlib.h>
#include <string.h>

#include "core/progress.h"
#include "core/vectorize.h"
#include "policies/select.h"

policy_streams policy_streams_of(const policy_config *pc, int64_t H, int64_t K)
{
    const bool layer = pc->iface->layer_scope && pc->iface->layer_scope(pc);
    return layer ? (policy_streams){.per_layer = 1, .kv_heads = K, .q_heads = H}
                 : (policy_streams){.per_layer = K, .kv_heads = 1, .q_heads = H / K};
}

KV_VECTOR_CLONES
void policy_attn_add(float *acc, const float *head, int64_t m, bool first)
{
    if (first) {
        memcpy(acc, head, sizeof(float) * (size_t)m);
        return;
    }
    for (int64_t y = 0; y < m; y++) acc[y] += head[y];
}

KV_VECTOR_CLONES
void policy_attn_divide(float *acc, int64_t m, int64_t heads)
{
    for (int64_t y = 0; y < m; y++) acc[y] /= (float)heads;
}

void policy_attn_mean(float *mean, const float *blocks, int64_t nb, int64_t m)
{
    for (int64_t j = 0; j < nb; j++) policy_attn_add(mean, blocks + j * m, m, j == 0);
    policy_attn_divide(mean, m, nb);
}

int policy_step_buf_init(policy_step_buf *b, int64_t cap, kv_err *err)
{
    memset(b, 0, sizeof *b);
    if (!(b->scores = kv_calloc((size_t)cap, sizeof(double), "scores", err)) ||
        !(b->keep = kv_calloc((size_t)cap, sizeof(int64_t), "selection", err)) ||
        !(b->scratch = kv_calloc((size_t)cap, sizeof(int64_t), "selection", err))) {
        policy_step_buf_free(b);
        return err->code;
    }
    return KV_OK;
}

void policy_step_buf_free(policy_step_buf *b)
{
    free(b->scores), free(b->keep), free(b->scratch);
    memset(b, 0, sizeof *b);
}

int policy_step(const policy_config *pc, void *state, const policy_view *v, policy_step_buf *b,
                policy_compact_fn compact, void *ctx, int64_t *kept, kv_err *err)
{
    const policy_iface *pi = pc->iface;
    if (kept) *kept = v->n;
    int rc = pi->observe ? pi->observe(pc, state, v, err) : KV_OK; /* step 3 */
    if (rc || pi->never_evicts || v->n <= v->budget) return rc;
    const double t0 = kv_now_seconds(); /* step 4 */
    rc = pi->score(pc, state, v, b->scores, err);
    b->score_ns += (kv_now_seconds() - t0) * 1e9;
    b->calls++, b->candidates += v->n;
    if (rc) return rc;
    const int64_t k = policy_select(b->scores, v->pos, v->n, v->budget, b->keep, b->scratch);
    compact(ctx, b->keep, k);
    if (kept) *kept = k;
    return KV_OK;
}
