#include "trace_schema.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The descriptions are written on every dataset; docs/trace.md's table is
 * printed from these rows (trace_schema_markdown), so the two say the same. */
static const trace_dset_spec SPECS[TRACE_NDSETS] = {
    [TRACE_TOKENS] = {"/tokens", 1, ELEM_TOKEN, true, false, false, 0, -1,
                      "token ids [T]: the prompt's (positions below prompt_len) as its tokenizer gave them, special "
                      "tokens included where the tokenizer adds them (Llama's BOS first; Qwen adds none), then the "
                      "generated ones",
                      "int32 [T]", "always"},
    [TRACE_KEYS] = {"/keys", 4, ELEM_STORAGE, true, false, false, 2, -1,
                    "keys after RoPE (and after any k-norm, as qwen3's), as cached; [L, K, T, D], one row per kv head "
                    "and position",
                    "storage [L, K, T, D]", "always"},
    [TRACE_VALUES] = {"/values", 4, ELEM_STORAGE, true, false, false, 2, -1,
                      "values as cached; [L, K, T, D], one row per kv head and position", "storage [L, K, T, D]",
                      "always"},
    [TRACE_QUERIES] = {"/queries", 4, ELEM_STORAGE, false, false, false, 2, -1,
                       "queries after RoPE (and after any q-norm); [L, H, T, D]; query head h uses kv head h / (H/K); "
                       "sim needs them",
                       "storage [L, H, T, D]", "optional (capture --record; synth always)"},
    [TRACE_COLSUM] = {"/attention/colsum", 3, ELEM_FLOAT, false, true, false, 2, -1,
                      "attention key j received: sum over queries i >= j of the causal softmax weight a[i][j] "
                      "(scale 1/sqrt(D)), summed in double; [L, H, T], unitless, between 0 and T - j",
                      "float32 [L, H, T]", "optional, full mode only"},
    [TRACE_ATTN_FULL] = {"/attention/full", 4, ELEM_FLOAT, false, false, false, 2, 3,
                         "causal softmax weights a[i][j] of query i on key j; [L, H, T, T], rows sum to 1, "
                         "zero above the diagonal",
                         "float32 [L, H, T, T]", "optional (capture --attention full)"},
    [TRACE_LOGITS] = {"/logits", 2, ELEM_FLOAT, false, false, false, 0, -1,
                      "logits[t] are the model's next-token logits at position t (before softmax); [T, V]",
                      "float32 [T, V]", "optional (capture --logits)"},
    [TRACE_LOGPROBS] = {"/logprobs", 1, ELEM_FLOAT, false, false, false, 0, -1,
                        "logprobs[t] is the log-probability (natural log, temperature 1, whatever the sampling) of "
                        "token t+1 given tokens 0..t; [T], the last is NaN",
                        "float32 [T]", "optional (capture, unless --no-logprobs)"},
    [TRACE_EVICT_RETAINED] = {"/evict/retained", 4, ELEM_TOKEN, false, false, true, -1, -1,
                              "cache positions kept after eviction step s; [S, L, K, W], ascending, -1 padded; W = N "
                              "under the uniform allocator, else the most rows one (layer, kv head) can keep",
                              "int32 [S, L, K, W]", "optional, evict mode (capture --retained)"},
    [TRACE_EVICT_STEP_END] = {"/evict/step_end", 1, ELEM_TOKEN, false, false, true, -1, -1,
                              "step_end[s] is the last position processed before snapshot s; [S]", "int32 [S]",
                              "with /evict/retained"},
    [TRACE_KVZIP] = {"/attention/kvzip", 3, ELEM_FLOAT, false, true, false, 2, -1,
                     "KVzip (capture --kvzip): the largest causal softmax weight (scale 1/sqrt(D)) key j received "
                     "from any query of the reconstruction pass that followed the sequence; [L, H, T], in [0, 1]",
                     "float32 [L, H, T]", "optional (capture --kvzip), full mode only"},
    [TRACE_ATTN_OUT] = {"/attention/out", 4, ELEM_FLOAT, false, true, false, 2, -1,
                        "full-cache attention output o[i] = sum over j <= i of a[i][j] v[j], a the causal softmax "
                        "of q.k/sqrt(D) (the unrounded keys, queries and values of f16 traces); [L, H, T, D], "
                        "query head h with kv head h / (H/K)",
                        "float32 [L, H, T, D]",
                        "optional, full mode only, with /attention/lse (capture records it whenever it records "
                        "/queries without --evict; synth always)"},
    [TRACE_ATTN_LSE] = {"/attention/lse", 3, ELEM_FLOAT, false, true, false, 2, -1,
                        "log-sum-exp of query i's scaled scores: log of the sum over j <= i of exp(q_i.k_j/sqrt(D)) "
                        "(natural log, unitless), so a[i][j] = exp(s_ij - lse_i); [L, H, T], beside /attention/out",
                        "float32 [L, H, T]", "with /attention/out"},
    [TRACE_ATTN_MAX] = {"/attention/max", 3, ELEM_FLOAT, false, true, false, 2, -1,
                        "largest scaled score of query i: max over j <= i of q_i.k_j/sqrt(D) (the unrounded keys "
                        "and queries), unitless; [L, H, T], beside /attention/lse",
                        "float32 [L, H, T]",
                        "optional, full mode only, with /attention/lse (capture and synth write it whenever they write "
                        "/attention/lse; older traces lack it)"},
};

/* One dataset or group of schema 1.0 as docs/trace.md's table lists it: every
 * one that carries a `description` attribute, the attribute's text itself. */
typedef struct {
    const char *path, *shape, *present, *description;
} trace_schema_row;

/* The table's rows: the SPECS datasets and the ones their own files write, in docs/trace.md's order. */
static trace_schema_row spec_row(trace_dset d)
{
    return (trace_schema_row){SPECS[d].path, SPECS[d].shape, SPECS[d].present, SPECS[d].description};
}

/* The rows in the table's order into rows[] (their count returned); `kvtrace info --schema` prints them
 * (trace_schema_markdown) and a test compares docs/trace.md with it. */
static int schema_rows(trace_schema_row rows[TRACE_NDSETS + 4])
{
    static const trace_dset ORDER[] = {TRACE_KEYS, TRACE_VALUES, TRACE_QUERIES, TRACE_COLSUM, TRACE_KVZIP,
                                       TRACE_ATTN_OUT, TRACE_ATTN_LSE, TRACE_ATTN_MAX, TRACE_ATTN_FULL, TRACE_LOGITS,
                                       TRACE_LOGPROBS, TRACE_EVICT_RETAINED, TRACE_EVICT_STEP_END};
    int k = 0;
    rows[k++] = spec_row(TRACE_TOKENS);
    rows[k++] = (trace_schema_row){TRACE_PROMPT_TEXT_PATH, "UTF-8 string, scalar",
                                   "when the prompt came as text (--prompt, --prompt-file)", TRACE_PROMPT_TEXT_DESCRIPTION};
    rows[k++] = (trace_schema_row){TRACE_PROMPT_CHAT_PATH, "UTF-8 string, scalar",
                                   "when the prompt was put in the model's chat template (--chat, --messages, a "
                                   "study line's messages)",
                                   TRACE_PROMPT_CHAT_DESCRIPTION};
    for (size_t i = 0; i < sizeof ORDER / sizeof ORDER[0]; i++) rows[k++] = spec_row(ORDER[i]);
    rows[k++] = (trace_schema_row){TRACE_WO_PATH, "float32 [L, dim, H*D]",
                                   "optional (capture --record ...,wo; fidelity's full.h5 when a configuration "
                                   "reads it)",
                                   TRACE_WO_DESCRIPTION};
    rows[k++] = (trace_schema_row){TRACE_SPANS_PATH,
                                   "group: names UTF-8 string [n] (variable-length), starts, ends int64 [n]",
                                   "optional (capture --prompts with spans or answer)", TRACE_SPANS_DESCRIPTION};
    return k;
}

/* Text for a markdown table cell: '|' and '*' escaped so that it renders as written. */
static void markdown_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|' || *s == '*' || *s == '\\' || *s == '<') fputc('\\', f);
        fputc(*s, f);
    }
}

void trace_schema_markdown(FILE *f)
{
    trace_schema_row r[TRACE_NDSETS + 4];
    const int n = schema_rows(r);
    fputs("| dataset | type, shape | present | description |\n| --- | --- | --- | --- |\n", f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "| `%s` | ", r[i].path);
        markdown_cell(f, r[i].shape);
        fputs(" | ", f);
        markdown_cell(f, r[i].present);
        fputs(" | ", f);
        markdown_cell(f, r[i].description);
        fputs(" |\n", f);
    }
}

const trace_dset_spec *trace_spec(trace_dset d)
{
    KV_ASSERT(d >= 0 && d < TRACE_NDSETS);
    return &SPECS[d];
}

const char *trace_dset_path(trace_dset d)
{
    return trace_spec(d)->path;
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
    case TRACE_ATTN_MAX:
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
    /* the architectures a trace may name: model/arch.c's rows (tests/unit/test_arch.c checks), then those
       only the Python recorder records from transformers (docs/python.md) */
    static const char *const ARCHS[] = {"llama", "qwen2", "qwen3", "mistral", "phi3", "granite", NULL};
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
            (rc = check_range(where, "evict_chunk", m->evict_chunk, 1, TRACE_MAX_TOKENS, err)) ||
            (m->evict_until && (rc = check_range(where, "evict_until", m->evict_until, 1, m->prompt_len, err))))
            return rc;
        if (m->evict_policy[0] == '\0')
            return kv_fail(err, KV_EINPUT, "%s: attribute 'evict_policy' is empty", where);
    }
    return KV_OK;
}
