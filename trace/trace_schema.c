#include "trace_schema.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The descriptions are written on every dataset (docs/trace.md repeats them). */
static const trace_dset_spec SPECS[TRACE_NDSETS] = {
    [TRACE_TOKENS] = {"/tokens", 1, ELEM_TOKEN, true, false, false, 0, -1,
                      "token ids [T]: the prompt's as its tokenizer gave them (special tokens such as BOS included where the "
                      "tokenizer adds them), positions below prompt_len; then the generated ones"},
    [TRACE_KEYS] = {"/keys", 4, ELEM_STORAGE, true, false, false, 2, -1,
                    "keys after RoPE (and any k-norm), as cached; [L, K, T, D], one row per kv head and position"},
    [TRACE_VALUES] = {"/values", 4, ELEM_STORAGE, true, false, false, 2, -1,
                      "values as cached; [L, K, T, D], one row per kv head and position"},
    [TRACE_QUERIES] = {"/queries", 4, ELEM_STORAGE, false, false, false, 2, -1,
                       "queries after RoPE (and any q-norm); [L, H, T, D]; query head h uses kv head h / (H/K)"},
    [TRACE_COLSUM] = {"/attention/colsum", 3, ELEM_FLOAT, false, true, false, 2, -1,
                      "attention key j received: sum over queries i >= j of the causal softmax weight a[i][j] "
                      "(scale 1/sqrt(D)), summed in double; [L, H, T], unitless, between 0 and T - j"},
    [TRACE_ATTN_FULL] = {"/attention/full", 4, ELEM_FLOAT, false, false, false, 2, 3,
                         "causal softmax weights a[i][j] of query i on key j; [L, H, T, T], rows sum to 1, "
                         "zero above the diagonal"},
    [TRACE_LOGITS] = {"/logits", 2, ELEM_FLOAT, false, false, false, 0, -1,
                      "logits[t] are the model's next-token logits at position t (before softmax); [T, V]"},
    [TRACE_LOGPROBS] = {"/logprobs", 1, ELEM_FLOAT, false, false, false, 0, -1,
                        "logprobs[t] is the log-probability (natural log, temperature 1) of token t+1 given tokens 0..t; "
                        "[T], the last is NaN"},
    [TRACE_EVICT_RETAINED] = {"/evict/retained", 4, ELEM_TOKEN, false, false, true, -1, -1,
                              "cache positions kept after eviction step s; [S, L, K, N], ascending, -1 padded"},
    [TRACE_EVICT_STEP_END] = {"/evict/step_end", 1, ELEM_TOKEN, false, false, true, -1, -1,
                              "step_end[s] is the last position processed before snapshot s; [S]"},
    [TRACE_KVZIP] = {"/attention/kvzip", 3, ELEM_FLOAT, false, true, false, 2, -1,
                     "KVzip (capture --kvzip): the largest causal softmax weight (scale 1/sqrt(D)) key j received "
                     "from any query of the reconstruction pass that followed the sequence; [L, H, T], in [0, 1]"},
    [TRACE_ATTN_OUT] = {"/attention/out", 4, ELEM_FLOAT, false, true, false, 2, -1,
                        "full-cache attention output o[i] = sum over j <= i of a[i][j] v[j], a the causal softmax "
                        "of q.k/sqrt(D) (the unrounded keys, queries and values of f16 traces); [L, H, T, D], "
                        "query head h with kv head h / (H/K)"},
    [TRACE_ATTN_LSE] = {"/attention/lse", 3, ELEM_FLOAT, false, true, false, 2, -1,
                        "log-sum-exp of query i's scaled scores: log of the sum over j <= i of exp(q_i.k_j/sqrt(D)) "
                        "(natural log, unitless); [L, H, T], beside /attention/out"},
};

const trace_dset_spec *trace_spec(trace_dset d)
{
    KV_ASSERT(d >= 0 && d < TRACE_NDSETS);
    return &SPECS[d];
}

const char *trace_dset_path(trace_dset d)
{
    return trace_spec(d)->path;
}

const char *trace_dset_description(trace_dset d)
{
    return trace_spec(d)->description;
}

void trace_expected_dims(const trace_meta *m, trace_dset d, int64_t T, int64_t dims[4])
{
    const int64_t L = m->n_layers, H = m->n_heads, K = m->n_kv_heads, D = m->head_dim;
    int64_t s[4] = {-1, -1, -1, -1};
    switch (d) {
    case TRACE_TOKENS: s[0] = T; break;
    case TRACE_KEYS:
    case TRACE_VALUES: s[0] = L, s[1] = K, s[2] = T, s[3] = D; break;
    case TRACE_QUERIES:
    case TRACE_ATTN_OUT: s[0] = L, s[1] = H, s[2] = T, s[3] = D; break;
    case TRACE_COLSUM:
    case TRACE_ATTN_LSE:
    case TRACE_KVZIP: s[0] = L, s[1] = H, s[2] = T; break;
    case TRACE_ATTN_FULL: s[0] = L, s[1] = H, s[2] = T, s[3] = T; break;
    case TRACE_LOGITS: s[0] = T, s[1] = m->vocab_size; break;
    case TRACE_LOGPROBS: s[0] = T; break;
    case TRACE_EVICT_RETAINED: s[1] = L, s[2] = K; break;  /* S and N free */
    case TRACE_EVICT_STEP_END: break;                      /* S free */
    default: KV_ASSERT(0);
    }
    memcpy(dims, s, sizeof s);
}

int64_t trace_row_width(const trace_meta *m, trace_dset d, int64_t T)
{
    switch (d) {
    case TRACE_KEYS:
    case TRACE_VALUES:
    case TRACE_QUERIES:
    case TRACE_ATTN_OUT: return m->head_dim;
    case TRACE_ATTN_FULL: return T;
    case TRACE_LOGITS: return m->vocab_size;
    default: return 1;
    }
}

static bool one_of(const char *s, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(s, *allowed) == 0) return true;
    return false;
}

static int check_range(const char *where, const char *name, int64_t v, int64_t lo, int64_t hi,
                       kv_err *err)
{
    if (v < lo || v > hi)
        return kv_fail(err, KV_EINPUT, "%s: attribute '%s' = %lld is out of range [%lld, %lld]",
                       where, name, (long long)v, (long long)lo, (long long)hi);
    return KV_OK;
}

/* v must be one of `allowed` (NULL-terminated); the message lists them. */
static int check_enum(const char *where, const char *name, const char *v, const char *const *allowed, kv_err *err)
{
    if (one_of(v, allowed)) return KV_OK;
    char list[256];
    size_t used = 0;
    list[0] = '\0';
    for (const char *const *a = allowed; *a && used < sizeof list; a++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", a == allowed ? "" : ", ", *a);
    return kv_fail(err, KV_EINPUT, "%s: attribute '%s' = '%s' is not one of %s", where, name, v, list);
}

int trace_meta_check(const trace_meta *m, const char *where, bool check_tokens, kv_err *err)
{
    /* the architectures a trace may name (model/arch.c's rows, tests/unit/test_arch.c checks) */
    static const char *const ARCHS[] = {"llama", "qwen2", "qwen3", "mistral", NULL};
    static const char *const ROPES[] = {"interleaved", "neox", NULL};
    static const char *const MODES[] = {"full", "evict", NULL};
    int rc;
    if ((rc = check_range(where, "n_layers", m->n_layers, 1, TRACE_MAX_LAYERS, err)) ||
        (rc = check_range(where, "n_heads", m->n_heads, 1, TRACE_MAX_HEADS, err)) ||
        (rc = check_range(where, "n_kv_heads", m->n_kv_heads, 1, m->n_heads, err)) ||
        (rc = check_range(where, "head_dim", m->head_dim, 1, TRACE_MAX_HEAD_DIM, err)) ||
        (rc = check_range(where, "vocab_size", m->vocab_size, 1, TRACE_MAX_VOCAB, err)) ||
        (rc = check_range(where, "capture_chunk", m->capture_chunk, 0, TRACE_MAX_TOKENS, err)))
        return rc;
    if (m->n_heads % m->n_kv_heads != 0)
        return kv_fail(err, KV_EINPUT, "%s: n_heads = %lld is not a multiple of n_kv_heads = %lld",
                       where, (long long)m->n_heads, (long long)m->n_kv_heads);
    if (check_tokens &&
        ((rc = check_range(where, "n_tokens", m->n_tokens, 1, TRACE_MAX_TOKENS, err)) ||
         (rc = check_range(where, "prompt_len", m->prompt_len, 1, m->n_tokens, err))))
        return rc;
    if (!(isfinite(m->rope_theta) && m->rope_theta > 0))
        return kv_fail(err, KV_EINPUT, "%s: attribute 'rope_theta' = %g is not a positive number",
                       where, m->rope_theta);
    if ((rc = check_enum(where, "architecture", m->architecture, ARCHS, err)) ||
        (rc = check_enum(where, "rope_style", m->rope_style, ROPES, err)) ||
        (rc = check_enum(where, "capture_mode", m->capture_mode, MODES, err)))
        return rc;
    if (m->storage != TRACE_F32 && m->storage != TRACE_F16)
        return kv_fail(err, KV_EINPUT, "%s: storage type must be f32 or f16", where);
    if (strcmp(m->capture_mode, "evict") == 0) {
        if ((rc = check_range(where, "evict_budget", m->evict_budget, 1, TRACE_MAX_TOKENS, err)) ||
            (rc = check_range(where, "evict_chunk", m->evict_chunk, 1, TRACE_MAX_TOKENS, err)))
            return rc;
        if (m->evict_policy[0] == '\0')
            return kv_fail(err, KV_EINPUT, "%s: attribute 'evict_policy' is empty", where);
    }
    return KV_OK;
}
