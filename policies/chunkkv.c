/* chunkkv: ChunkKV (Liu et al., "ChunkKV: Semantic-Preserving KV Cache
 * Compression for Efficient Long-Context LLM Inference", 2025, arXiv
 * 2502.00299; kvpress ChunkKVPress, kvpress/presses/chunkkv_press.py).
 * A base policy's scores (with its defaults) are aggregated over fixed chunks
 * of `size` candidates in position order (the last chunk may be shorter):
 * the chunk score is the mean of its members' base scores, as the source
 * aggregates them. Chunks are ranked by it (ties: the later chunk first);
 * whole chunks are kept while they fit in N and the next chunk is filled by
 * the base score (ties: the later position), so the engine keeps exactly N.
 * The scores handed to policy_select encode that order exactly:
 *   s_i = (n_chunks − rank(chunk_i))·(size + 1) + (size − rank of i within its chunk)
 * (integers, exact in a double). Per kv head (the source sums the base
 * scores over a layer's kv heads and keeps one set per layer; see
 * docs/policies.md). Parameters: base (snapkv), size (20). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policy.h"

#define CHUNKKV_BASES "snapkv|h2o|tova|keydiff|knorm|capkv|primekv|random|streaming"

typedef struct {
    policy_base base;    /* first (policy_wrapper_create): the base policy, its defaults or an alias's */
    double *bscores;     /* [cap] */
    struct rank_item { double s; int64_t key, idx; } *items; /* [cap] */
    int64_t cap;
} chunkkv_state;

/* The bases, in CHUNKKV_BASES's order (referenced directly: the registry lists chunkkv, so going
 * through it or the parser would make a loop between files). */
extern const policy_iface policy_snapkv, policy_h2o, policy_tova, policy_keydiff, policy_knorm, policy_capkv,
    policy_primekv, policy_random, policy_streaming;
static const policy_iface *const BASES[] = {&policy_snapkv, &policy_h2o,     &policy_tova,
                                            &policy_keydiff, &policy_knorm,  &policy_capkv,
                                            &policy_primekv, &policy_random, &policy_streaming};

static int chunkkv_create(const policy_config *cfg, void **state, kv_err *err)
{
    return policy_wrapper_create(cfg, BASES, sizeof(chunkkv_state), state, err);
}

static void chunkkv_destroy(void *state)
{
    chunkkv_state *s = state;
    if (!s) return;
    policy_base_close(&s->base);
    free(s->bscores), free(s->items), free(s);
}

/* Descending by s, ties by the larger key (the later chunk, the later position). */
static int by_score_desc(const void *a, const void *b)
{
    const struct rank_item *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->key < y->key) - (x->key > y->key);
}

static int ensure(chunkkv_state *s, int64_t n, kv_err *err)
{
    if (n <= s->cap) return KV_OK;
    free(s->bscores), free(s->items);
    s->bscores = kv_calloc((size_t)n, sizeof *s->bscores, "chunkkv base scores", err);
    s->items = s->bscores ? kv_calloc((size_t)n, sizeof *s->items, "chunkkv ranking", err) : NULL;
    s->cap = s->items ? n : 0;
    return s->items ? KV_OK : err->code;
}

static int chunkkv_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    chunkkv_state *s = state;
    const int64_t n = v->n, size = (int64_t)policy_num(cfg, "size"), nc = (n + size - 1) / size;
    int rc = ensure(s, n, err);
    if (!rc) rc = policy_base_score(&s->base, v, s->bscores, err);
    if (rc || n == 0) return rc;
    /* within each chunk: the rank of each member by its base score (ties: the later position) */
    for (int64_t c = 0; c < nc; c++) {
        const int64_t a = c * size, m = (a + size < n ? a + size : n) - a;
        double sum = 0.0;
        for (int64_t i = 0; i < m; i++) {
            s->items[i] = (struct rank_item){s->bscores[a + i], v->pos[a + i], a + i};
            sum += s->bscores[a + i];
        }
        qsort(s->items, (size_t)m, sizeof *s->items, by_score_desc);
        for (int64_t r = 0; r < m; r++) scores[s->items[r].idx] = (double)(size - r);
        s->bscores[c] = sum / (double)m; /* chunk c's score; members a.. are read above, c <= a */
    }
    for (int64_t c = 0; c < nc; c++) s->items[c] = (struct rank_item){s->bscores[c], c, c};
    qsort(s->items, (size_t)nc, sizeof *s->items, by_score_desc);
    for (int64_t r = 0; r < nc; r++) {
        const int64_t c = s->items[r].idx, a = c * size, b = a + size < n ? a + size : n;
        for (int64_t i = a; i < b; i++) scores[i] += (double)(nc - r) * (double)(size + 1);
    }
    return KV_OK;
}

static int64_t chunkkv_query_window(const policy_config *cfg)
{
    return policy_base_query_window(cfg, BASES);
}

const policy_iface policy_chunkkv = {
    .name = "chunkkv",
    .summary = "ChunkKV: a base policy's scores averaged over chunks of `size` candidates; whole chunks kept",
    .params = {{.key = "base", .kind = PARAM_CHOICE, .def = "snapkv", .choices = CHUNKKV_BASES, .policy_valued = true,
                .doc = "the base policy (with its defaults, or an --alias of one) whose scores are aggregated"},
               {.key = "size", .kind = PARAM_NUMBER, .def = "20", .min = 1, .max = 1 << 20, .integer = true,
                .doc = "candidates per chunk, in position order"}},
    .needs_attention = true, /* for an attention base (h2o, tova); the engine computes it either way */
    .create = chunkkv_create,
    .destroy = chunkkv_destroy,
    .score = chunkkv_score,
    .observe = policy_wrapper_observe,
    .query_window = chunkkv_query_window,
    /* its scores are ranks within one head's candidates */
    .scores_comparable = false,
};
