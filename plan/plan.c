/* plan: the run plan from the policies' and allocators' declarations (see plan.h). */
#include "plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "policies/step.h"

plan_inputs plan_policy_inputs(const policy_config *pc)
{
    const policy_iface *pi = pc->iface;
    return (plan_inputs){.attention = pi->needs_attention, .kvzip = pi->needs_kvzip, .wo = policy_reads_wo(pc),
                         .future = policy_offline_only(pc),
                         .query_window = pi->query_window ? pi->query_window(pc) : 0};
}

plan_inputs plan_run_inputs(const policy_config *pcs, int n_pc, const alloc_config *acs, int n_ac)
{
    plan_inputs u = {0};
    for (int p = 0; p < n_pc; p++) {
        const plan_inputs in = plan_policy_inputs(&pcs[p]);
        u.attention |= in.attention, u.kvzip |= in.kvzip, u.wo |= in.wo, u.future |= in.future;
        if (in.query_window > u.query_window) u.query_window = in.query_window;
    }
    for (int a = 0; a < n_ac; a++) {
        const alloc_iface *ai = acs[a].iface;
        const int64_t w = ai->needs_queries && ai->query_window ? ai->query_window(&acs[a]) : 0;
        if (w > u.query_window) u.query_window = w;
        u.head_scores |= plan_reads_head_scores(&acs[a]);
    }
    return u;
}

bool plan_reads_head_scores(const alloc_config *ac)
{
    return ac->iface->scores_from != ALLOC_SCORES_NONE;
}

bool plan_ranks_from_trace(const alloc_config *ac)
{
    return ac->iface->scores_from == ALLOC_SCORES_FILE_OR_TRACE && ac->iface->rank_from_colsum;
}

void plan_rank_heads(const alloc_config *ac, const float *colsum, int64_t L, int64_t H, int64_t K, int64_t T,
                     double *out)
{
    ac->iface->rank_from_colsum(ac, colsum, L, H, K, T, out);
}

bool plan_layer_scope(const policy_config *pc)
{
    return pc->iface->layer_scope && pc->iface->layer_scope(pc);
}

bool plan_evicts(const policy_config *pc)
{
    return !pc->iface->never_evicts;
}

/* Whether the policy's scores can be ranked against another head's (docs/allocators.md). */
static bool plan_scores_comparable(const policy_config *pc)
{
    return pc->iface->scores_comparable;
}

bool plan_model_wide(const alloc_config *ac)
{
    return ac->iface->kind == ALLOC_DYNAMIC_MODEL;
}

plan_scope plan_scope_of(const policy_config *pc, const alloc_config *ac, int64_t H, int64_t K)
{
    if (plan_model_wide(ac)) return PLAN_JOINT_MODEL;
    if (ac->iface->kind == ALLOC_DYNAMIC_LAYER && policy_streams_of(pc, H, K).per_layer == K) return PLAN_JOINT_LAYER;
    return PLAN_STREAMS;
}

int plan_layer_streams(const policy_config *pc, const alloc_config *ac, int64_t N, int64_t L, int64_t H, int64_t K,
                       int64_t l, plan_stream *out, int64_t *n, kv_err *err)
{
    const policy_streams st = policy_streams_of(pc, H, K);
    int64_t *caps = kv_calloc((size_t)K, sizeof *caps, "allocator", err);
    int rc = caps ? alloc_stream_capacities(ac, N, L, K, st.kv_heads, l, caps, err) : err->code;
    /* an allocator's streaming heads (duo's) are single kv heads of an evicting policy */
    const bool streaming = ac->iface->streaming && st.kv_heads == 1 && plan_evicts(pc);
    for (int64_t x = 0; !rc && x < st.per_layer; x++) {
        out[x] = (plan_stream){.g0 = x * st.kv_heads, .ng = st.kv_heads, .cap = caps[x]};
        if (streaming && ac->iface->streaming(ac, N, L, K, l, x)) {
            out[x].own_policy = true;
            rc = alloc_streaming_policy(ac, &out[x].own, err);
        }
    }
    free(caps);
    *n = rc ? 0 : st.per_layer;
    return rc;
}

int64_t plan_cache_rows(const policy_config *pc, int64_t keep, int64_t B, int64_t T)
{
    return !plan_evicts(pc) || keep + B > T ? T : keep + B;
}

/* A static allocator's largest capacity over the model (*most starts at N). */
static int static_most(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t *most, kv_err *err)
{
    int64_t *cap = kv_calloc((size_t)K, sizeof *cap, "allocator", err);
    int rc = cap ? KV_OK : err->code;
    for (int64_t l = 0; !rc && l < L; l++) {
        rc = alloc_capacities(ac, N, L, K, l, cap, err);
        for (int64_t g = 0; !rc && g < K; g++) *most = cap[g] > *most ? cap[g] : *most;
    }
    free(cap);
    return rc;
}

int plan_stream_most(const policy_config *pc, const alloc_config *ac, int64_t N, int64_t L, int64_t H, int64_t K,
                     int64_t *most, kv_err *err)
{
    const int64_t per = policy_streams_of(pc, H, K).per_layer;
    *most = N;
    switch (plan_scope_of(pc, ac, H, K)) {
    case PLAN_JOINT_LAYER: *most = K * N - (K - 1); return KV_OK;              /* every other head keeps one */
    case PLAN_JOINT_MODEL: *most = L * per * N - (L * per - 1); return KV_OK;  /* every other stream keeps one */
    case PLAN_STREAMS: break;
    }
    return ac->iface->kind == ALLOC_STATIC ? static_most(ac, N, L, K, most, err) : KV_OK;
}

int64_t plan_results_width(const policy_config *pc, const alloc_config *ac, int64_t N, int64_t L, int64_t K,
                           int64_t T, int64_t *caps, kv_err *err)
{
    if (!plan_evicts(pc)) return T;
    const alloc_kind kind = ac->iface->kind;
    int64_t w = kind == ALLOC_DYNAMIC_LAYER ? K * N : kind == ALLOC_DYNAMIC_MODEL ? L * K * N : 0;
    for (int64_t l = 0; kind == ALLOC_STATIC && l < L; l++) {
        if (alloc_capacities(ac, N, L, K, l, caps, err)) return -1;
        for (int64_t g = 0; g < K; g++) w = caps[g] > w ? caps[g] : w;
    }
    return w > T ? T : w;
}

int plan_check_query_window(const policy_config *pc, kv_err *err)
{
    const int64_t w = pc->iface->query_window ? pc->iface->query_window(pc) : 0;
    if (w >= 0) return KV_OK;
    return kv_fail(err, KV_EUSAGE, "policy %s: its query window is %lld (a number of past query positions: at "
                   "least 0)", pc->iface->name, (long long)w);
}

int plan_check_online(const policy_config *pc, const char *verb, const char *where, kv_err *err)
{
    return policy_check_online(pc, verb, where, err);
}

int plan_check_pair(const policy_config *pc, const alloc_config *ac, const char *verb, kv_err *err)
{
    if (!ac->iface->needs_comparable || !plan_evicts(pc) || plan_scores_comparable(pc)) return KV_OK;
    char msg[512];
    snprintf(msg, sizeof msg, "%s: %s's scores do not compare across layers and heads (kvtrace policies says which "
             "do); use it with adakv or a static allocator", ac->iface->name, pc->iface->name);
    return verb ? cli_usage(err, verb, "%s", msg) : kv_fail(err, KV_EUSAGE, "%s", msg);
}

/* The registry's allocators that read head scores, "a, b or c" (for the refusal naming them). */
static void readers(char *buf, size_t cap)
{
    const alloc_iface *const *all = alloc_all();
    int n = 0, total = 0;
    for (int i = 0; all[i]; i++) total += all[i]->scores_from != ALLOC_SCORES_NONE;
    buf[0] = 0;
    for (int i = 0; all[i]; i++) {
        if (all[i]->scores_from == ALLOC_SCORES_NONE) continue;
        const size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", n == 0 ? "" : n == total - 1 ? " and " : ", ", all[i]->name);
        n++;
    }
}

int plan_check_head_scores(const alloc_config *acs, int n_ac, bool given, bool has_ranking, const char *verb,
                           const char *opt, kv_err *err)
{
    bool reads = false;
    for (int a = 0; a < n_ac; a++) {
        const alloc_iface *ai = acs[a].iface;
        reads |= plan_reads_head_scores(&acs[a]);
        if (given || !plan_reads_head_scores(&acs[a])) continue;
        if (!plan_ranks_from_trace(&acs[a]))
            return cli_usage(err, verb, "%s %s needs --head-scores FILE (a CSV layer,kv_head,score, e.g. kvtrace "
                             "analyze's head_importance.csv)", opt, ai->name);
        if (!has_ranking)
            return cli_usage(err, verb, "%s %s ranks heads by full-cache attention, which %s does not have before "
                             "its in-model runs: give --head-scores FILE (e.g. kvtrace analyze's "
                             "head_importance.csv)", opt, ai->name, verb);
    }
    if (!given || reads) return KV_OK;
    char names[256];
    readers(names, sizeof names);
    return cli_usage(err, verb, "--head-scores is read only by the %s allocators (none is listed)", names);
}

int plan_check_trace(const policy_config *pcs, int n_pc, bool has_kvzip, const char *path, kv_err *err)
{
    for (int p = 0; p < n_pc; p++)
        if (plan_policy_inputs(&pcs[p]).kvzip && !has_kvzip)
            return kv_fail(err, KV_EINPUT, "%s: has no /attention/kvzip dataset; %s ranks by it (capture with "
                           "--kvzip)", path, pcs[p].iface->name);
    return KV_OK;
}

int plan_without_wo(policy_config *pc, bool *changed, kv_err *err)
{
    return policy_without_wo(pc, changed, err);
}

int plan_default_allocator(alloc_config *out, kv_err *err)
{
    return alloc_default(out, err);
}
