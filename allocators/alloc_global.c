/* global: one pool for the whole model, KVzip-style (Kim et al., "KVzip:
 * Query-Agnostic KV Cache Compression with Context Reconstruction", 2025:
 * its non-uniform head budgets come from one top-k ratio over every (layer,
 * head, token) score). At an evicting step of the model-wide scope (all L·K
 * streams, replayed in lock step), every stream first keeps its own best
 * candidate (a head never keeps fewer than 1 row), and the rest of L·K·N
 * goes to the best remaining candidates of all streams together: score
 * descending, +INFINITY (protected) first, then the later position, then the
 * lower stream (layer-major). Each stream's ranking agrees with this order,
 * so each keeps a prefix of its own ranking and the shares are all this
 * returns. A k-way merge of the streams' rankings: O(total · log S).
 * Only for policies whose scores compare across layers and heads
 * (policy_iface.scores_comparable; others are refused before any work).
 * No parameters. On one layer with one kv head it is uniform (one stream
 * keeps N). */
#include <math.h>

#include "allocators/alloc.h"
#include "policies/select.h"

typedef struct {
    const alloc_scope *s;
    const int64_t *const *ord;
    const int64_t *counts;
} merge;

/* Stream x's next candidate ranks before stream y's. */
static bool ahead(const merge *m, int64_t x, int64_t y)
{
    const int64_t i = m->ord[x][m->counts[x]], j = m->ord[y][m->counts[y]];
    double a = m->s->scores[x][i], b = m->s->scores[y][j];
    a = isnan(a) ? -INFINITY : a, b = isnan(b) ? -INFINITY : b;
    if (a != b) return a > b;
    if (m->s->pos[x][i] != m->s->pos[y][j]) return m->s->pos[x][i] > m->s->pos[y][j];
    return x < y;
}

static void sift_down(const merge *m, int64_t *heap, int64_t n, int64_t i)
{
    for (;;) {
        int64_t best = i, l = 2 * i + 1, r = l + 1;
        if (l < n && ahead(m, heap[l], heap[best])) best = l;
        if (r < n && ahead(m, heap[r], heap[best])) best = r;
        if (best == i) return;
        const int64_t t = heap[i];
        heap[i] = heap[best], heap[best] = t, i = best;
    }
}

static int global_shares(const alloc_config *ac, const alloc_scope *s, alloc_buf *b, int64_t *counts, kv_err *err)
{
    (void)err;
    (void)ac;
    const int64_t S = s->n_streams;
    const int64_t *ord[ALLOC_MAX_STREAMS];
    int64_t heap[ALLOC_MAX_STREAMS], n = 0, off = 0, left = s->total;
    KV_ASSERT(S <= ALLOC_MAX_STREAMS);
    for (int64_t x = 0; x < S; x++) {
        KV_ASSERT(off + s->n[x] <= b->cap && s->n[x] >= 1);
        policy_rank_order(s->scores[x], s->pos[x], s->n[x], b->order + off);
        ord[x] = b->order + off;
        off += s->n[x];
        counts[x] = 1, left--;
    }
    const merge m = {s, ord, counts};
    for (int64_t x = 0; x < S; x++)
        if (counts[x] < s->n[x]) heap[n++] = x;
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(&m, heap, n, i);
    for (; left > 0; left--) {   /* total < Σ n: the heap never runs dry before */
        KV_ASSERT(n > 0);
        const int64_t x = heap[0];
        counts[x]++;
        if (counts[x] == s->n[x]) heap[0] = heap[--n];
        sift_down(&m, heap, n, 0);
    }
    return KV_OK;
}

const alloc_iface alloc_global = {
    .name = "global",
    .summary = "KVzip-style: one top-(L*K*N) over every (layer, kv head, candidate) score, at least 1 row a head",
    .kind = ALLOC_DYNAMIC_MODEL,
    .needs_comparable = true,
    .shares = global_shares,
};
