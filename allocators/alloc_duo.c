/* duo: a DuoAttention-style split into streaming and full heads (Xiao et
 * al., "DuoAttention: Efficient Long-Context LLM Inference with Retrieval and
 * Streaming Heads", 2024; kvpress DuoAttentionPress). Of the L·K streams
 * (layer, kv head), the ⌊ratio·L·K⌋ with the lowest importance (ties: the
 * lower (layer, kv head) first) become streaming heads: each keeps its
 * `sinks` first positions and its `recent` most recent rows, c_s = sinks +
 * recent, whatever the policy scores (the engine replays them with
 * streaming:sinks=S). The m other (full) heads share the rest of L·K·N:
 * each gets ⌊R/m⌋, R = L·K·N − n_s·c_s, and the R mod m most important one
 * more, so the total is exact. recent = −1 (default) means min(64, ⌊N/2⌋), so
 * streaming heads stay below the average. The importance comes from
 * `--head-scores FILE` or, without it, from the trace's full-cache column
 * sums (offline knowledge, as DuoAttention's calibration is offline; sim
 * fills alloc_config.head_scores, docs/allocators.md). Static.
 * Refused: ratio giving every head to streaming, and a budget whose full
 * heads would keep fewer rows than a streaming head. */
#include <math.h>

#include "allocators/alloc.h"

typedef struct {
    int64_t S, n_stream, c_stream, base, extra;   /* full heads: base, the `extra` most important base + 1 */
} duo_plan;

static duo_plan plan_of(const alloc_config *ac, int64_t N, int64_t L, int64_t K)
{
    duo_plan p = {.S = L * K};
    p.n_stream = (int64_t)floor(alloc_num(ac, "ratio") * (double)p.S + 1e-9);
    const int64_t recent = (int64_t)alloc_num(ac, "recent");
    p.c_stream = (int64_t)alloc_num(ac, "sinks") + (recent >= 0 ? recent : (N / 2 < 64 ? N / 2 : 64));
    const int64_t m = p.S - p.n_stream, rest = p.S * N - p.n_stream * p.c_stream;
    if (m > 0) p.base = rest / m, p.extra = rest - p.base * m;
    return p;
}

/* How many streams rank below x in importance (score ascending, then index). */
static int64_t rank_of(const double *s, int64_t S, int64_t x)
{
    int64_t r = 0;
    for (int64_t y = 0; y < S; y++) r += s[y] < s[x] || (s[y] == s[x] && y < x);
    return r;
}

static bool duo_streaming(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t g)
{
    const duo_plan p = plan_of(ac, N, L, K);
    return rank_of(ac->head_scores, p.S, layer * K + g) < p.n_stream;
}

static int duo_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                          kv_err *err)
{
    const duo_plan p = plan_of(ac, N, L, K);
    if (!ac->head_scores) return kv_fail(err, KV_EUSAGE, "duo: no head ranking (the engine gives one)");
    if (p.n_stream >= p.S)
        return kv_fail(err, KV_EUSAGE, "duo: ratio=%g makes all %lld heads streaming heads (nothing left for full "
                       "heads): lower ratio=", alloc_num(ac, "ratio"), (long long)p.S);
    if (p.n_stream > 0 && (p.c_stream < 1 || p.base < p.c_stream))
        return kv_fail(err, KV_EUSAGE, "duo: budget %lld is too small for its streaming heads: %lld of them keep "
                       "sinks + recent = %lld rows each, leaving the full heads %lld (raise the budget, or lower "
                       "ratio=, sinks= or recent=)", (long long)N, (long long)p.n_stream, (long long)p.c_stream,
                       (long long)p.base);
    for (int64_t g = 0; g < K; g++) {
        const int64_t r = rank_of(ac->head_scores, p.S, layer * K + g);
        cap[g] = r < p.n_stream ? p.c_stream : p.base + (p.S - 1 - r < p.extra);
    }
    return KV_OK;
}

/* The ranking without --head-scores, from /attention/colsum [L][H][T]: per kv head, the share of
 * its query heads' attention landing on keys that are neither sinks (j <
 * sinks) nor among the trace's last W positions (W = recent, or 64 when
 * recent is automatic), i.e. Σ_h Σ_{sinks <= j < T-W} colsum[l][h][j] / (G·T). */
static void duo_rank_from_colsum(const alloc_config *ac, const float *colsum, int64_t L, int64_t H, int64_t K,
                                 int64_t T, double *out)
{
    const int64_t G = H / K;
    const int64_t sinks = (int64_t)alloc_num(ac, "sinks"), r = (int64_t)alloc_num(ac, "recent");
    const int64_t end = T - (r >= 0 ? r : 64);
    for (int64_t l = 0; l < L; l++)
        for (int64_t g = 0; g < K; g++) {
            double s = 0;
            for (int64_t h = g * G; h < (g + 1) * G; h++)
                for (int64_t j = sinks; j < end; j++) s += colsum[(l * H + h) * T + j];
            out[l * K + g] = s / (double)(G * T);
        }
}

const alloc_iface alloc_duo = {
    .name = "duo",
    .summary = "DuoAttention: the ratio of heads least attending outside sinks+recent keep sinks+recent; the rest "
               "share the remainder",
    .params = {
        {.key = "ratio", .kind = PARAM_NUMBER, .def = "0.5", .min = 0, .max = 1,
         .doc = "share of the L*K heads made streaming heads, the least important first (0: uniform)"},
        {.key = "recent", .kind = PARAM_NUMBER, .def = "-1", .min = -1, .max = 9007199254740992.0, .integer = true,
         .doc = "most recent rows a streaming head keeps (-1: min(64, floor(N/2)))"},
        {.key = "sinks", .kind = PARAM_NUMBER, .def = "4", .min = 0, .max = 9007199254740992.0, .integer = true,
         .doc = "first positions a streaming head keeps (attention sinks)"},
    },
    .kind = ALLOC_STATIC,
    .scores_from = ALLOC_SCORES_FILE_OR_TRACE,
    .per_head = true,
    .streaming = duo_streaming,
    .capacities = duo_capacities,
    .rank_from_colsum = duo_rank_from_colsum,
};
