/* select: the engine's selection rule
 * (docs/sim.md#the-eviction-step-step-by-step): the `budget` best scores by a
 * bounded heap, ties to the later position, then position order; and the
 * recent-window helpers the policies share. */
#include "policies/select.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/kv_error.h"

int64_t policy_recent_count(double fraction, int64_t budget)
{
    if (!(fraction > 0) || budget <= 0) return 0;
    int64_t w = (int64_t)floor(fraction * (double)budget + 1e-9);
    return w > budget ? budget : w;
}

void policy_protect_recent(const policy_view *v, int64_t count, double *scores)
{
    if (count > v->n) count = v->n;
    for (int64_t j = v->n - count; j < v->n; j++) scores[j] = INFINITY;
}

typedef struct {
    const double *scores;
    const int64_t *pos;
    bool by_rank;   /* true: best first (score desc, pos desc); false: pos asc */
} order;

static double score_of(const order *o, int64_t i)
{
    double s = o->scores[i];
    return isnan(s) ? -INFINITY : s;
}

/* A total order (never inconsistent): a before b? Index breaks the last tie. */
static bool before(const order *o, int64_t a, int64_t b)
{
    if (o->by_rank) {
        double sa = score_of(o, a), sb = score_of(o, b);
        if (sa != sb) return sa > sb;
        if (o->pos[a] != o->pos[b]) return o->pos[a] > o->pos[b];
        return a > b;
    }
    if (o->pos[a] != o->pos[b]) return o->pos[a] < o->pos[b];
    return a < b;
}

/* Heapsort of idx[0..n) by `before`: O(n log n), in place, no allocation
 * (qsort has no context argument, and the engine calls this from threads). */
static void sift_down(const order *o, int64_t *idx, int64_t root, int64_t n)
{
    for (int64_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && before(o, idx[child], idx[child + 1])) child++;
        if (!before(o, idx[root], idx[child])) return;
        int64_t t = idx[root];
        idx[root] = idx[child];
        idx[child] = t;
    }
}

static void heap_sort(const order *o, int64_t *idx, int64_t n)
{
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(o, idx, i, n);
    for (int64_t end = n - 1; end > 0; end--) {
        int64_t t = idx[0];
        idx[0] = idx[end];
        idx[end] = t;
        sift_down(o, idx, 0, end);
    }
}

/* Min-rank heap over h[0..n): the root ranks FIRST among its subtree, so it is
 * the best of a set of evicted candidates, the first to leave that set. */
static void sift_worst_set(const order *o, int64_t *h, int64_t root, int64_t n)
{
    for (;;) {
        int64_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && before(o, h[c + 1], h[c])) c++;
        if (!before(o, h[c], h[root])) return;
        int64_t t = h[root];
        h[root] = h[c], h[c] = t;
        root = c;
    }
}

static int cmp_index(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static bool ascending(const int64_t *pos, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        if (pos[i] <= pos[i - 1]) return false;
    return true;
}

/* Keeps the `budget` best by finding the E = n - budget worst with a heap of
 * size E: O(n log E), so a decode step that evicts one candidate is O(n). */
int64_t policy_select(const double *scores, const int64_t *pos, int64_t n, int64_t budget,
                      int64_t *keep, int64_t *scratch)
{
    KV_ASSERT(n >= 0 && budget >= 0);
    order o = {scores, pos, true};
    const int64_t k = n < budget ? n : budget, E = n - k;
    if (E == 0) {
        for (int64_t i = 0; i < n; i++) keep[i] = i;
    } else {
        int64_t *worst = scratch; /* [E] */
        for (int64_t i = 0; i < E; i++) worst[i] = i;
        for (int64_t i = E / 2 - 1; i >= 0; i--) sift_worst_set(&o, worst, i, E);
        for (int64_t i = E; i < n; i++)
            if (before(&o, worst[0], i)) { /* i ranks after the best of the evicted: swap them */
                worst[0] = i;
                sift_worst_set(&o, worst, 0, E);
            }
        qsort(worst, (size_t)E, sizeof *worst, cmp_index); /* evicted indices, ascending */
        /* kept = every index not evicted, in index order */
        int64_t m = 0, w = 0;
        for (int64_t i = 0; i < n; i++) {
            if (w < E && worst[w] == i) w++;
            else keep[m++] = i;
        }
        KV_ASSERT(m == k);
    }
    o.by_rank = false;
    if (!ascending(pos, n)) heap_sort(&o, keep, k); /* index order is position order otherwise */
    return k;
}

void policy_rank_order(const double *scores, const int64_t *pos, int64_t n, int64_t *idx)
{
    order o = {scores, pos, true};
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    heap_sort(&o, idx, n);
}
