/* The replay engine (docs/sim.md#the-eviction-step-step-by-step): the engine
 * owns the cache; per chunk it forms the candidates C = S ∪ chunk, measures the
 * chunk's queries against the visible candidates (step 2), and hands them to
 * policy_step (steps 3 and 4: observe, and if |C| > N score, keep exactly N,
 * compact here). */
#include "sim/replay.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/logdet.h"
#include "core/progress.h"
#include "core/softmax.h"
#include "core/vectorize.h"
#include "plan/plan.h"
#include "policies/step.h"
#include "sim/stats.h"

/* One stream: kv heads g0 .. g0+ng-1 of a layer sharing one kept set (ng = 1,
 * or K for a policy with layer scope). Heads below are the stream's query
 * heads, hs = ng * G of them. */
typedef struct {
    int64_t g0, ng;        /* kv heads of the stream */
    int64_t D;             /* head dim */
    int64_t cap;           /* N + largest chunk */
    int64_t n;             /* |C| */
    int64_t *pos;          /* [cap] */
    float *k, *v;          /* [ng][cap][D] */
    policy_step_buf step;  /* scores and selection [cap], scoring counters */
    float *qrows;          /* [G][chunk][D] one kv group's query rows */
    float *att;            /* [hs][chunk][cap] */
    float *out;            /* [G][chunk][D] */
    float *attn_mean;      /* [chunk][cap] the chunk's attention, mean over the stream's heads */
    double *errs;          /* [hs][T] per evaluated query */
    double *recalls;       /* [hs][T] */
    int64_t *eval_pos;     /* [T] positions evaluated (same for every head) */
    int64_t n_eval;
    double *lds;           /* [D][D] */
    double *span_ret;      /* [n_spans] retention summed over the queries after each span */
    double *span_num;      /* [hs][n_spans] the full-cache weight on the span's cached positions, summed likewise */
    bool evicted;          /* anything dropped yet? if not, C holds every j <= i */
} replay_buf;

static void buf_free(replay_buf *b)
{
    free(b->pos), free(b->k), free(b->v);
    policy_step_buf_free(&b->step);
    free(b->qrows), free(b->att), free(b->out), free(b->attn_mean), free(b->errs), free(b->recalls), free(b->eval_pos), free(b->lds);
    free(b->span_ret), free(b->span_num);
}

static int buf_alloc(replay_buf *b, const sim_layer *ly, int64_t g0, int64_t ng, int64_t cap, kv_err *err)
{
    memset(b, 0, sizeof *b);
    const int64_t D = ly->D, G = ly->H / ly->K, B = ly->chunk > ly->decode_chunk ? ly->chunk : ly->decode_chunk;
    const int64_t hs = ng * G;
    b->g0 = g0, b->ng = ng, b->D = D, b->cap = cap;
    if (!(b->pos = kv_calloc((size_t)cap, sizeof(int64_t), "cache", err)) ||
        !(b->k = kv_calloc((size_t)(ng * cap * D), sizeof(float), "cache keys", err)) ||
        !(b->v = kv_calloc((size_t)(ng * cap * D), sizeof(float), "cache values", err)) ||
        policy_step_buf_init(&b->step, cap, err) ||
        !(b->qrows = kv_calloc((size_t)(G * B * D), sizeof(float), "queries", err)) ||
        !(b->att = kv_calloc((size_t)(hs * B * cap), sizeof(float), "attention", err)) ||
        !(b->out = kv_calloc((size_t)(G * B * D), sizeof(float), "outputs", err)) ||
        !(b->attn_mean = kv_calloc((size_t)(B * cap), sizeof(float), "attention", err)) ||
        !(b->errs = kv_calloc((size_t)(hs * ly->T), sizeof(double), "errors", err)) ||
        !(b->recalls = kv_calloc((size_t)(hs * ly->T), sizeof(double), "recalls", err)) ||
        !(b->eval_pos = kv_calloc((size_t)ly->T, sizeof(int64_t), "positions", err)) ||
        !(b->lds = kv_calloc((size_t)(D * D), sizeof(double), "log-det", err)) ||
        !(b->span_ret = kv_calloc((size_t)ly->n_spans + 1, sizeof(double), "spans", err)) ||
        !(b->span_num = kv_calloc((size_t)(hs * ly->n_spans) + 1, sizeof(double), "spans", err))) {
        buf_free(b);
        return err->code;
    }
    return KV_OK;
}

/* Keys (or values) of stream kv head x: [cap][D]. */
static float *head_rows(const replay_buf *b, float *base, int64_t x, int64_t D)
{
    return base + x * b->cap * D;
}

/* Appends positions [p0, p1) of the stream's kv heads to the candidates. */
static void add_chunk(replay_buf *b, const sim_layer *ly, int64_t p0, int64_t p1)
{
    const int64_t D = ly->D;
    for (int64_t p = p0; p < p1; p++, b->n++) {
        b->pos[b->n] = p;
        for (int64_t x = 0; x < b->ng; x++) {
            const int64_t g = b->g0 + x;
            memcpy(head_rows(b, b->k, x, D) + b->n * D, ly->k + (g * ly->T + p) * D, sizeof(float) * (size_t)D);
            memcpy(head_rows(b, b->v, x, D) + b->n * D, ly->v + (g * ly->T + p) * D, sizeof(float) * (size_t)D);
        }
    }
}

/* Softmax of row `row` over its `vis` visible candidates (zero for the rest);
 * returns the recall Σ_c exp(s_c − lse_full) = exp(lse_visible − lse_full). */
static double softmax_visible(float *row, int64_t vis, int64_t cols, double lse)
{
    /* The kept share of a query's attention, exp(lse_kept - lse_full) <= 1 in exact arithmetic. The
     * two log-sum-exps come from different float32 products of the same scores (this chunk's, the
     * reference's blocks), so with almost every key kept rounding can put lse_kept above lse_full:
     * the kept share is capped at the whole (docs/sim.md#metrics), by at most that rounding. */
    const double r = exp(softmax_row(row, vis, cols, NULL) - lse);
    return r < 1.0 ? r : 1.0;
}

/* ‖o − f‖ / ‖f‖ in double (0 when f = 0), four partial sums in a fixed order. */
KV_VECTOR_CLONES
static double rel_err(const float *o, const float *f, int64_t D)
{
    double num[4] = {0}, den[4] = {0};
    int64_t d = 0;
    for (; d + 4 <= D; d += 4)
        for (int l = 0; l < 4; l++) {
            double e = (double)o[d + l] - f[d + l];
            num[l] += e * e, den[l] += (double)f[d + l] * f[d + l];
        }
    double nu = (num[0] + num[1]) + (num[2] + num[3]), de = (den[0] + den[1]) + (den[2] + den[3]);
    for (; d < D; d++) nu += ((double)o[d] - f[d]) * ((double)o[d] - f[d]), de += (double)f[d] * f[d];
    return de > 0 ? sqrt(nu / de) : 0.0;
}

/* Candidates [*lo, *hi) are span s's positions still cached (pos ascending). */
static void span_rows(const replay_buf *b, const trace_span *s, int64_t *lo, int64_t *hi)
{
    int64_t a = 0, z = b->n;
    while (a < z) { /* the first candidate at or past s->start */
        const int64_t m = a + (z - a) / 2;
        if (b->pos[m] < s->start) a = m + 1;
        else z = m;
    }
    *lo = a;
    while (a < b->n && b->pos[a] < s->end) a++;
    *hi = a;
}

/* The chunk [p0, p1)'s share of every span's retention (each query after the
 * span counts the fraction of its positions cached); before any eviction
 * also its weights (the full cache's). Whether the chunk's rows must be
 * scored for span weights (evicted, and a span ends before p1). */
static bool spans_chunk(replay_buf *b, const sim_layer *ly, int64_t p0, int64_t p1, bool exact)
{
    bool need = false;
    const int64_t hs = b->ng * (ly->H / ly->K), T = ly->T;
    for (int64_t s = 0; s < ly->n_spans; s++) {
        const trace_span *sp = &ly->spans[s];
        const int64_t from = p0 > sp->end ? p0 : sp->end; /* the chunk's queries after the span */
        if (from >= p1) continue;
        int64_t lo, hi;
        span_rows(b, sp, &lo, &hi);
        b->span_ret[s] += (double)(p1 - from) * (double)(hi - lo) / (double)(sp->end - sp->start);
        need = need || !exact;
        for (int64_t j = 0; exact && j < hs; j++) {
            const double *full = ly->span_full + (s * ly->H + b->g0 * (ly->H / ly->K) + j) * T;
            for (int64_t i = from; i < p1; i++) b->span_num[j * ly->n_spans + s] += full[i];
        }
    }
    return need;
}

/* Query i of layer head h (stream head sj): the full-cache weight of each
 * span's cached positions, from its raw scores row[|C|] (before the softmax). */
static void span_weights(replay_buf *b, const sim_layer *ly, const float *row, int64_t sj, int64_t h, int64_t i)
{
    const double lse = ly->ref->lse[h * ly->T + i];
    for (int64_t s = 0; s < ly->n_spans; s++) {
        if (i < ly->spans[s].end) continue;
        int64_t lo, hi;
        span_rows(b, &ly->spans[s], &lo, &hi);
        double w = 0.0;
        for (int64_t c = lo; c < hi; c++) w += exp((double)row[c] - lse);
        /* the kept part of the span's weight cannot exceed the whole span's, the full cache's weight
         * from other float32 products (sim_spans_full): capped per query, so that the sums over the
         * queries, taken in one order, keep num <= den and the recall in [0, 1] */
        const double whole = ly->span_full[((size_t)s * (size_t)ly->H + (size_t)h) * (size_t)ly->T + (size_t)i];
        b->span_num[sj * ly->n_spans + s] += w < whole ? w : whole;
    }
}

/* Steps 2 and 3's input: the chunk's queries [p0, p1) of every query head of
 * the stream against the visible candidates, per kv head one sgemm for the
 * scores of its G heads [G*n][|C|] and one for the outputs. Measured rows get
 * their error and recall; with `want_attn` every row is normalised and their
 * mean over the stream's heads is left in b->attn_mean [n][|C|]. */
static void measure(replay_buf *b, const sim_layer *ly, int64_t from, int64_t p0, int64_t p1, bool want_attn)
{
    const int64_t D = ly->D, T = ly->T, G = ly->H / ly->K, n = p1 - p0, cols = b->n, hs = b->ng * G;
    const int64_t first = p0 > from ? p0 : from; /* earlier queries cannot be affected */
    const int64_t n_eval_before = b->n_eval;
    for (int64_t i = first; i < p1; i++)
        if (i % ly->eval_stride == 0) b->eval_pos[b->n_eval++] = i;
    const bool exact = !b->evicted; /* nothing evicted: the full cache exactly, error 0 and recall 1 */
    if (exact)
        for (int64_t j = 0; j < hs; j++)
            for (int64_t e = n_eval_before; e < b->n_eval; e++) b->errs[j * T + e] = 0.0, b->recalls[j * T + e] = 1.0;
    const bool measured = !exact && b->n_eval > n_eval_before;
    const bool spans = spans_chunk(b, ly, p0, p1, exact);
    if (!measured && !want_attn && !spans) return;
    const float scale = (float)(1.0 / sqrt((double)D));
    for (int64_t x = 0; x < b->ng; x++) {
        const int64_t g = b->g0 + x;
        float *att = b->att + x * G * n * cols; /* this kv head's G heads */
        for (int64_t j = 0; j < G; j++) /* the group's query rows, stacked: [G][n][D] */
            memcpy(b->qrows + j * n * D, ly->q + ((g * G + j) * T + p0) * D, sizeof(float) * (size_t)(n * D));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(G * n), (int)cols, (int)D, scale, b->qrows,
                    (int)D, head_rows(b, b->k, x, D), (int)D, 0.0f, att, (int)cols);
        for (int64_t j = 0; j < G; j++) {
            const int64_t h = g * G + j, sj = x * G + j; /* layer head, stream head */
            int64_t e = n_eval_before;
            for (int64_t i = p0; i < p1; i++) {
                const bool eval = e < b->n_eval && b->eval_pos[e] == i;
                if (spans) span_weights(b, ly, att + (j * n + i - p0) * cols, sj, h, i);
                if (!eval && !want_attn) continue; /* not measured: its output is unused */
                /* candidates are ascending and the chunk is last: visible = a prefix */
                const double recall = softmax_visible(att + (j * n + i - p0) * cols, cols - (p1 - 1 - i), cols,
                                                ly->ref->lse[h * T + i]);
                if (eval && measured) b->recalls[sj * T + e] = recall;
                e += eval;
            }
        }
        if (!measured) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(G * n), (int)D, (int)cols, 1.0f, att,
                    (int)cols, head_rows(b, b->v, x, D), (int)D, 0.0f, b->out, (int)D);
        for (int64_t j = 0; j < G; j++) {
            const int64_t h = g * G + j, sj = x * G + j;
            for (int64_t e = n_eval_before; e < b->n_eval; e++) {
                const int64_t i = b->eval_pos[e];
                const float *o = b->out + (j * n + i - p0) * D, *f = ly->ref->out + (h * T + i) * D;
                b->errs[sj * T + e] = rel_err(o, f, D);
            }
        }
    }
    if (want_attn) /* heads outer, so that the sums over each head's row block vectorise */
        policy_attn_mean(b->attn_mean, b->att, hs, n * cols);
}

/* The policy's view of the current candidates; the chunk's attention when it asked for it. */
static policy_view view_of(const replay_buf *b, const sim_layer *ly, const policy_config *pc, int64_t budget,
                           int64_t layer, int64_t step, int64_t p0, int64_t p1)
{
    /* keys and values: the stream's first kv head (a layer-scope policy sees the layer's first) */
    const int64_t G = ly->H / ly->K;
    policy_view v = {.n = b->n, .D = ly->D, .pos = b->pos, .keys = b->k, .values = b->v, .budget = budget,
                     .now = p1 - 1, .layer = layer, .kv_head = b->g0, .step = step,
                     .queries = ly->q + b->g0 * G * ly->T * ly->D, .lse = ly->ref->lse + b->g0 * G * ly->T,
                     .q_heads = G, .T = ly->T, .rope = ly->rope, .prompt_len = ly->prompt_len,
                     .wo = ly->wo, .wo_dim = ly->wo_dim, .wo_ld = ly->H * ly->D, .q_head0 = b->g0 * G};
    const plan_inputs in = plan_policy_inputs(pc);
    if (in.attention) v.attn = b->attn_mean, v.n_queries = p1 - p0;
    if (in.kvzip && ly->kvzip) v.kvzip = ly->kvzip + b->g0 * G * ly->T;
    return v;
}

/* policy_step's compaction: the kept candidates to the front, in place
 * (keep[] ascending, keep[i] >= i), keys and values of every kv head. */
static void compact(void *ctx, const int64_t *keep, int64_t kept)
{
    replay_buf *b = ctx;
    const int64_t D = b->D;
    for (int64_t i = 0, r; i < kept; i += r) { /* runs of consecutive kept rows, each moved at once */
        const int64_t s = keep[i];
        for (r = 1; i + r < kept && keep[i + r] == s + r; r++) {}
        if (s == i) continue; /* already in place */
        memmove(b->pos + i, b->pos + s, sizeof(int64_t) * (size_t)r);
        for (int64_t x = 0; x < b->ng; x++) {
            float *k = head_rows(b, b->k, x, D), *v = head_rows(b, b->v, x, D);
            memmove(k + i * D, k + s * D, sizeof(float) * (size_t)(r * D));
            memmove(v + i * D, v + s * D, sizeof(float) * (size_t)(r * D));
        }
    }
    b->evicted = b->evicted || kept < b->n;
    b->n = kept;
}

/* Stream kv head x's span statistics: retention over the queries after
 * each span, and the weight its cached positions got over what all of them
 * got under the full cache, over the kv head's query heads. */
static void span_finish(const replay_buf *b, const sim_layer *ly, int64_t x, double *ret, double *recall)
{
    const int64_t G = ly->H / ly->K, T = ly->T;
    for (int64_t s = 0; s < ly->n_spans; s++) {
        const int64_t after = T - ly->spans[s].end;
        ret[s] = after > 0 ? b->span_ret[s] / (double)after : NAN;
        double num = 0.0, den = 0.0;
        for (int64_t j = 0; j < G; j++) { /* per head, then over the heads: num and den summed alike (num <= den) */
            const double *full = ly->span_full + (s * ly->H + (b->g0 + x) * G + j) * T;
            double dj = 0.0;
            for (int64_t i = ly->spans[s].end; i < T; i++) dj += full[i];
            num += b->span_num[(x * G + j) * ly->n_spans + s], den += dj;
        }
        recall[s] = den > 0 ? num / den : NAN;
    }
}

static int finish(replay_buf *b, const sim_layer *ly, int64_t layer, sim_result *out, kv_err *err)
{
    const int64_t hs = b->ng * (ly->H / ly->K), T = ly->T;
    double *tmp = kv_calloc((size_t)(T > 0 ? T : 1), sizeof(double), "statistics", err);
    if (!tmp) return err->code;
    for (int64_t j = 0; j < hs; j++) /* once per head: the errors and recalls of a finite trace are finite */
        for (int64_t e = 0; e < b->n_eval; e++)
            if (!isfinite(b->errs[j * T + e]) || !isfinite(b->recalls[j * T + e])) {
                free(tmp);
                return kv_fail(err, KV_EINPUT, "layer %lld, head %lld, position %lld: the replay's errors are "
                               "not finite (inf or NaN: float32 scores overflow) although the trace's values are "
                               "finite", (long long)layer, (long long)(b->g0 * (ly->H / ly->K) + j),
                               (long long)b->eval_pos[e]);
            }
    for (int64_t j = 0; j < hs; j++)
        for (int p = 0; p < N_PHASES; p++) {
            memcpy(tmp, b->errs + j * T, sizeof(double) * (size_t)b->n_eval);
            sim_stats_of(tmp, b->recalls + j * T, b->eval_pos, b->n_eval, ly->prompt_len, p, &out->stats[j * N_PHASES + p]);
        }
    free(tmp);
    for (int64_t x = 0; out->span_ret && x < b->ng; x++)
        span_finish(b, ly, x, out->span_ret + x * ly->n_spans, out->span_recall + x * ly->n_spans);
    for (int64_t x = 0; x < b->ng; x++) {   /* the stream's kv heads share its kept set */
        out->n_retained[x] = b->n;
        memcpy(out->retained + x * T, b->pos, sizeof(int64_t) * (size_t)b->n);
        out->logdet[x] = logdet_keys(head_rows(b, b->k, x, ly->D), b->n, ly->D, b->lds);
    }
    return KV_OK;
}

/* The end of the chunk that starts at p0: prompt chunks of B (the last one
 * ends at prompt_len), then decode chunks. */
static int64_t chunk_end(const sim_layer *ly, int64_t p0)
{
    int64_t p1 = p0 < ly->prompt_len ? p0 + ly->chunk : p0 + ly->decode_chunk;
    if (p0 < ly->prompt_len && p1 > ly->prompt_len) p1 = ly->prompt_len;
    return p1 > ly->T ? ly->T : p1;
}

int64_t sim_replay_steps(const sim_layer *ly)
{
    int64_t n = 0;
    for (int64_t p0 = 0; p0 < ly->T; p0 = chunk_end(ly, p0)) n++;
    return n;
}

#define KEPT_HASH_BASIS 0xcbf29ce484222325ULL

/* FNV-1a over 64-bit words. */
static uint64_t hash_word(uint64_t h, uint64_t v)
{
    return (h ^ v) * 0x100000001b3ULL;
}

/* Stream head x's kept set after a step into its kept_hash: the step, the count, the positions. */
static void note_kept(sim_result *out, int64_t x, int64_t step, const int64_t *pos, int64_t n)
{
    uint64_t h = hash_word(hash_word(out->kept_hash[x], (uint64_t)step), (uint64_t)n);
    for (int64_t i = 0; i < n; i++) h = hash_word(h, (uint64_t)pos[i]);
    out->kept_hash[x] = h;
}

/* What one step did to stream head x: its candidates and what it kept (the
 * per-step record, when asked for), summed into kept_mean over the evicting
 * steps (the same steps for every head of a stream or scope: *n_evicting). */
static void note_step(sim_result *out, int64_t x, int64_t step, int64_t cand, int64_t kept, bool evicted)
{
    if (out->step_cand) {
        out->step_cand[x * out->n_steps + step] = (int32_t)cand;
        out->step_kept[x * out->n_steps + step] = (int32_t)kept;
    }
    if (evicted) out->kept_mean[x] += (double)kept;
}

/* kept_mean from its sums: the mean over n_evicting steps, NaN when none. */
static void kept_means(sim_result *out, int64_t ng, int64_t n_evicting)
{
    for (int64_t x = 0; x < ng; x++) out->kept_mean[x] = n_evicting ? out->kept_mean[x] / (double)n_evicting : NAN;
}

/* Chunk [p0, p1) of one stream: its candidates, the measures (step 2) and the policy's view. */
static policy_view stream_chunk(replay_buf *b, const sim_layer *ly, const policy_config *pc, int64_t from,
                                int64_t capacity, int64_t layer, int64_t step, int64_t p0, int64_t p1)
{
    add_chunk(b, ly, p0, p1);
    measure(b, ly, from, p0, p1, plan_policy_inputs(pc).attention);
    return view_of(b, ly, pc, capacity, layer, step, p0, p1);
}

/* A step's counts and kept set for kv heads x0 .. x0 + ng of out, all held by stream b. */
static void note_heads(sim_result *out, int64_t x0, int64_t ng, int64_t step, int64_t cand, int64_t kept,
                       bool evicted, const replay_buf *b)
{
    for (int64_t x = x0; x < x0 + ng; x++) {
        note_step(out, x, step, cand, kept, evicted);
        note_kept(out, x, step, b->pos, b->n);
    }
}

/* One configuration's replay of one stream, step by step (sim_replay alone, sim_replay_group in
 * lock step with the stream's other budgets). */
typedef struct {
    const sim_layer *ly;
    const policy_config *pc;
    int64_t capacity, layer, ng, from, n_evicting;
    replay_buf b;
    void *state;
    sim_result *out;
    double ns;             /* its own time so far */
} replay_run;

static int run_open(replay_run *r, const sim_layer *ly, const policy_config *pc, int64_t budget, int64_t capacity,
                    int64_t layer, int64_t g0, int64_t ng, sim_result *out, kv_err *err)
{
    const double t0 = kv_now_seconds();
    const int64_t B = ly->chunk > ly->decode_chunk ? ly->chunk : ly->decode_chunk;
    *r = (replay_run){.ly = ly, .pc = pc, .capacity = capacity, .layer = layer, .ng = ng, .out = out,
                      .from = budget < capacity ? budget : capacity};
    int rc = buf_alloc(&r->b, ly, g0, ng, plan_cache_rows(pc, capacity, B, ly->T), err);
    if (rc) return rc;
    if (pc->iface->create && (rc = pc->iface->create(pc, &r->state, err))) {
        buf_free(&r->b);
        return rc;
    }
    out->metrics_ns = 0.0;
    for (int64_t x = 0; x < ng; x++) out->kept_mean[x] = 0.0, out->kept_hash[x] = KEPT_HASH_BASIS;
    r->ns = (kv_now_seconds() - t0) * 1e9;
    return KV_OK;
}

/* Chunk [p0, p1) as step `step`: candidates, measures (step 2), policy_step (steps 3 and 4). */
static int run_step(replay_run *r, int64_t step, int64_t p0, int64_t p1, void *share, kv_err *err)
{
    const double t0 = kv_now_seconds();
    const policy_config *pc = r->pc;
    policy_view view = stream_chunk(&r->b, r->ly, pc, r->from, r->capacity, r->layer, step, p0, p1);
    r->out->metrics_ns += (kv_now_seconds() - t0) * 1e9;
    view.share = share;
    int64_t kept = view.n;
    int rc = policy_step(pc, r->state, &view, &r->b.step, compact, &r->b, &kept, err);
    const bool evicted = plan_evicts(pc) && view.n > r->capacity;
    if (!rc) note_heads(r->out, 0, r->ng, step, view.n, kept, evicted, &r->b);
    r->n_evicting += evicted;
    r->ns += (kv_now_seconds() - t0) * 1e9;
    return rc;
}

/* The statistics (unless rc), the timing, and the buffers freed; returns rc or finish's error. */
static int run_close(replay_run *r, int rc, kv_err *err)
{
    const double t0 = kv_now_seconds();
    sim_result *out = r->out;
    if (!rc) rc = finish(&r->b, r->ly, r->layer, out, err);
    kept_means(out, r->ng, r->n_evicting);
    out->calls = r->b.step.calls, out->candidates = r->b.step.candidates, out->score_ns = r->b.step.score_ns;
    if (r->pc->iface->destroy) r->pc->iface->destroy(r->state);
    buf_free(&r->b);
    out->replay_ns = r->ns + (kv_now_seconds() - t0) * 1e9;
    return rc;
}

int sim_replay(const sim_layer *ly, const policy_config *pc, int64_t budget, int64_t capacity, int64_t layer,
               int64_t g0, int64_t ng, sim_result *out, kv_err *err)
{
    return sim_replay_group(ly, pc, 1, &budget, &capacity, layer, g0, ng, out, err);
}

int sim_replay_group(const sim_layer *ly, const policy_config *pc, int n, const int64_t *budgets,
                     const int64_t *capacities, int64_t layer, int64_t g0, int64_t ng, sim_result *outs, kv_err *err)
{
    replay_run *runs = kv_calloc((size_t)n, sizeof *runs, "sim replay", err);
    if (!runs) return err->code;
    void *share = NULL;
    int rc = n > 1 && pc->iface->share_create ? pc->iface->share_create(pc, &share, err) : KV_OK;
    int opened = 0;
    for (; !rc && opened < n; opened++)
        if ((rc = run_open(&runs[opened], ly, pc, budgets[opened], capacities[opened], layer, g0, ng, &outs[opened],
                           err)))
            break;
    for (int64_t p0 = 0, step = 0; !rc && p0 < ly->T; step++) {
        const int64_t p1 = chunk_end(ly, p0);
        for (int i = 0; !rc && i < n; i++) rc = run_step(&runs[i], step, p0, p1, share, err);
        p0 = p1;
    }
    for (int i = 0; i < opened; i++) {
        kv_err mine = {0};
        const int rci = run_close(&runs[i], rc, rc ? &mine : err);
        rc = rc ? rc : rci;
    }
    if (share && pc->iface->share_destroy) pc->iface->share_destroy(share);
    free(runs);
    return rc;
}

/* The S streams of a dynamic scope replayed together (sim_replay_scope):
 * per layer `per` streams of ng kv heads each (ng = 1, or K for a policy
 * with layer scope); stream x is kv heads (x % per)·ng .. +ng of layer
 * x / per of the scope, and kv heads x·ng .. of the scope's results. */
typedef struct {
    replay_buf *b;                 /* [S] */
    void **states;                 /* [S] */
    policy_view *views;            /* [S] */
    policy_step_buf **bufs;        /* [S] -> b[x].step */
    void **ctx;                    /* [S] -> b[x] */
    int64_t *counts, *kept;        /* [S] */
    int64_t S, per, ng;
    alloc_buf ab;
} scope_bufs;

static void scope_free(scope_bufs *l, const policy_config *pc)
{
    for (int64_t x = 0; l->b && x < l->S; x++) {
        buf_free(&l->b[x]);
        if (l->states && l->states[x] && pc->iface->destroy) pc->iface->destroy(l->states[x]);
    }
    free(l->b), free(l->states), free(l->views), free(l->bufs), free(l->ctx), free(l->counts), free(l->kept);
    alloc_buf_free(&l->ab);
}

static int scope_alloc(scope_bufs *l, const sim_layer *lys, int64_t n_layers, const policy_config *pc, kv_err *err)
{
    const int64_t K = lys[0].K;
    memset(l, 0, sizeof *l);
    const policy_streams st = policy_streams_of(pc, lys[0].H, K);
    l->per = st.per_layer, l->ng = st.kv_heads, l->S = n_layers * st.per_layer;
    const int64_t S = l->S;
    if (!(l->b = kv_calloc((size_t)S, sizeof *l->b, "scope replay", err)) ||
        !(l->states = kv_calloc((size_t)S, sizeof *l->states, "scope replay", err)) ||
        !(l->views = kv_calloc((size_t)S, sizeof *l->views, "scope replay", err)) ||
        !(l->bufs = kv_calloc((size_t)S, sizeof *l->bufs, "scope replay", err)) ||
        !(l->ctx = kv_calloc((size_t)S, sizeof *l->ctx, "scope replay", err)) ||
        !(l->counts = kv_calloc((size_t)S, sizeof *l->counts, "scope replay", err)) ||
        !(l->kept = kv_calloc((size_t)S, sizeof *l->kept, "scope replay", err)))
        return err->code;
    return KV_OK;
}

/* Each stream's buffers of `cap` rows and its policy state. */
static int scope_streams(scope_bufs *l, const sim_layer *lys, const policy_config *pc, int64_t cap, kv_err *err)
{
    int rc = alloc_buf_init(&l->ab, l->S * cap, err);
    for (int64_t x = 0; !rc && x < l->S; x++) {
        rc = buf_alloc(&l->b[x], &lys[x / l->per], (x % l->per) * l->ng, l->ng, cap, err);
        if (!rc && pc->iface->create) rc = pc->iface->create(pc, &l->states[x], err);
        l->bufs[x] = &l->b[x].step, l->ctx[x] = &l->b[x];
    }
    return rc;
}

/* Stream x's share of out: its query heads' statistics and its kv heads' arrays. */
static sim_result head_result(const sim_result *out, const sim_layer *ly, int64_t x, int64_t ng)
{
    sim_result r = *out;
    r.stats = out->stats + x * ng * (ly->H / ly->K) * N_PHASES;
    r.retained = out->retained + x * ng * ly->T, r.n_retained = out->n_retained + x * ng;
    r.logdet = out->logdet + x * ng;
    if (out->span_ret) r.span_ret = out->span_ret + x * ng * ly->n_spans, r.span_recall = out->span_recall + x * ng * ly->n_spans;
    return r;
}

/* One chunk of every stream of the scope: candidates, measures, views. */
static void scope_chunk(scope_bufs *l, const sim_layer *lys, const policy_config *pc, int64_t budget,
                        int64_t layer0, int64_t step, int64_t p0, int64_t p1)
{
    for (int64_t x = 0; x < l->S; x++)
        l->views[x] = stream_chunk(&l->b[x], &lys[x / l->per], pc, budget, budget, layer0 + x / l->per, step, p0, p1);
}

int sim_replay_scope(const sim_layer *lys, int64_t n_layers, const policy_config *pc, const alloc_config *ac,
                     int64_t budget, int64_t layer0, sim_result *out, kv_err *err)
{
    const sim_layer *ly = &lys[0];
    const int64_t B = ly->chunk > ly->decode_chunk ? ly->chunk : ly->decode_chunk;
    scope_bufs l;
    int rc = scope_alloc(&l, lys, n_layers, pc, err);
    const int64_t S = l.S, ng = l.ng;
    const int64_t cap = plan_cache_rows(pc, S * budget, B, ly->T);
    if (!rc) rc = scope_streams(&l, lys, pc, cap, err);
    const alloc_scope_args args = {.pc = pc, .ac = ac, .n_streams = S, .states = l.states, .views = l.views,
                                   .bufs = l.bufs, .compact = compact, .ctx = l.ctx, .budget = budget,
                                   .total = S * budget, .ab = &l.ab, .counts = l.counts, .per_layer = l.per};
    out->metrics_ns = 0.0;
    const double started = kv_now_seconds();
    int64_t n_evicting = 0;
    for (int64_t x = 0; x < S * ng; x++) out->kept_mean[x] = 0.0, out->kept_hash[x] = KEPT_HASH_BASIS;
    for (int64_t p0 = 0, step = 0; !rc && p0 < ly->T; step++) {
        const int64_t p1 = chunk_end(ly, p0);
        const double t0 = kv_now_seconds();
        scope_chunk(&l, lys, pc, budget, layer0, step, p0, p1);
        out->metrics_ns += (kv_now_seconds() - t0) * 1e9;
        bool evicted = false;
        rc = alloc_scope_step(&args, l.kept, &evicted, err);
        for (int64_t x = 0; !rc && x < S; x++)
            note_heads(out, x * ng, ng, step, l.views[x].n, l.kept[x], evicted, &l.b[x]);
        n_evicting += evicted;
        p0 = p1;
    }
    out->calls = out->candidates = 0, out->score_ns = 0;
    for (int64_t x = 0; !rc && x < S; x++) {
        sim_result r = head_result(out, &lys[x / l.per], x, ng);
        rc = finish(&l.b[x], &lys[x / l.per], layer0 + x / l.per, &r, err);
        out->calls += l.b[x].step.calls, out->candidates += l.b[x].step.candidates;
        out->score_ns += l.b[x].step.score_ns;
    }
    kept_means(out, S * ng, n_evicting);
    out->replay_ns = (kv_now_seconds() - started) * 1e9;
    scope_free(&l, pc);
    return rc;
}
