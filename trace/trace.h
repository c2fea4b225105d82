/* trace: the one owner of kvtrace's HDF5 trace format, schema 1.0 (docs/trace.md).
 *
 * A trace holds one captured model run: per layer and head the keys, values and
 * (optionally) queries, plus token ids, attention column sums and logits.
 * Writers append along T in pieces (extendable datasets), so a capture never
 * holds a whole trace in memory; readers validate the whole schema on open and
 * then read one (layer, head) slice at a time as float32, whatever the storage.
 *
 * Dimension names, used everywhere: L layers, H query heads, K kv heads,
 * D head dim, T tokens, V vocab, S eviction snapshots, N cache budget.
 */
#ifndef KV_TRACE_H
#define KV_TRACE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/kv_error.h"

enum { TRACE_SCHEMA_MAJOR = 1, TRACE_SCHEMA_MINOR = 0 };

/* A named token range of the prompt, positions [start, end) (/spans, optional). */
enum { TRACE_SPAN_NAME_MAX = 64, TRACE_MAX_SPANS = 4096 };
typedef struct {
    char name[TRACE_SPAN_NAME_MAX + 1];
    int64_t start, end;
} trace_span;


typedef enum {
    TRACE_TOKENS,          /* int32 [T] */
    TRACE_KEYS,            /* storage [L][K][T][D] */
    TRACE_VALUES,          /* storage [L][K][T][D] */
    TRACE_QUERIES,         /* storage [L][H][T][D] */
    TRACE_COLSUM,          /* f32 [L][H][T] */
    TRACE_ATTN_FULL,       /* f32 [L][H][T][T] */
    TRACE_LOGITS,          /* f32 [T][V] */
    TRACE_LOGPROBS,        /* f32 [T] */
    TRACE_EVICT_RETAINED,  /* int32 [S][L][K][N] */
    TRACE_EVICT_STEP_END,  /* int32 [S] */
    TRACE_KVZIP,           /* f32 [L][H][T] (capture --kvzip) */
    TRACE_ATTN_OUT,        /* f32 [L][H][T][D] full-cache attention output (with TRACE_ATTN_LSE) */
    TRACE_ATTN_LSE,        /* f32 [L][H][T] its log-sum-exp of the scaled scores */
    TRACE_ATTN_MAX,        /* f32 [L][H][T] the largest scaled score of each row (with TRACE_ATTN_LSE) */
    TRACE_NDSETS
} trace_dset;

/* Root attributes. Text fields are NUL-terminated; longer values are refused. */
typedef struct {
    int schema_major, schema_minor;
    char creator[128];
    char model_name[256];
    char architecture[16];   /* llama | qwen2 | qwen3 | mistral */
    char rope_style[16];     /* interleaved | neox */
    char capture_mode[8];    /* full | evict */
    char compute[8];         /* "int8": products on int8-quantised rows (capture --compute int8); "": float32 */
    int64_t n_layers, n_heads, n_kv_heads, head_dim;
    int64_t n_tokens, prompt_len, vocab_size;
    int64_t capture_chunk;   /* 0: not a model run (synthetic trace) */
    double rope_theta;
    /* RoPE frequency scaling, optional attributes (absent: none). Pair p
     * turned at rope_theta^(-2p/D) / rope_freq_factors[p]; rope_scaling names
     * the rule ("llama3 factor=8 ..." or "rope_freqs.weight"). The factors
     * are written from the pointer ([head_dim/2], NULL: not written); a
     * reader points it at the factors it read (NULL: absent), owned by the
     * trace handle. */
    char rope_scaling[160];
    const double *rope_freq_factors;
    /* The prompt's text, as given (--prompt, or --prompt-file's contents):
     * the /prompt_text dataset, valid UTF-8 without NUL bytes, written from
     * the pointer (NULL: not written: the prompt came as ids, or BOS alone).
     * Readers leave it NULL: trace_prompt_text reads it. */
    const char *prompt_text;
    /* A chat prompt's conversation (/prompt_chat, JSON text: the messages,
     * the template's family and sha256), written from the pointer (NULL:
     * none); readers leave it NULL: trace_prompt_chat reads it. */
    const char *prompt_chat;
    /* The attention output projection W_o (/wo, optional: capture --record
     * wo): written from wo[l] ([wo_dim][n_heads*head_dim] floats per layer;
     * NULL: not written). Readers set wo_dim (0: absent) and leave wo NULL:
     * trace_read_wo reads one layer. */
    const float *const *wo;
    int64_t wo_dim;
    /* Named token ranges of the prompt (/spans, optional: capture --prompts
     * with spans or answer): written from spans[n_spans] (NULL: not written;
     * names distinct, 0 <= start < end <= prompt_len). Readers leave them
     * NULL / 0: trace_spans reads them. */
    const trace_span *spans;
    int64_t n_spans;
    trace_dtype storage;
    /* capture_mode = evict only */
    char evict_policy[64];
    char evict_params[256];
    int64_t evict_budget, evict_chunk;
    /* the last position whose chunk evicted (capture --evict-until): later positions joined the cache
     * unevicted; 0 (the attribute absent): every step evicted */
    int64_t evict_until;
    /* the allocator's label (allocators/alloc.h: "uniform", "pyramid:beta=20:window=32");
     * written in evict mode, "" read from a trace before allocators (uniform) */
    char evict_allocator[256];
    /* a score expression's definition (--define, docs/expressions.md) when evict_policy is one;
     * "" otherwise (optional: written only then) */
    char evict_definition[512];
    /* writers only: the width W of /evict/retained's snapshots [L][K][W], the
     * most rows a (layer, kv head) can keep; 0: N (evict_budget) */
    int64_t evict_width;
} trace_meta;

const char *trace_dset_path(trace_dset d);
/* docs/trace.md's table of datasets, in markdown: each dataset's path, type and
 * shape, when it is present and its `description` attribute as written
 * (`kvtrace info --schema`). */
void trace_schema_markdown(FILE *f);

/* Checks a meta's values on their own (ranges, enumerations, H % K == 0, ...).
 * `where` names the file in the message. Does not look at n_tokens when
 * `check_tokens` is false (writers learn T only at the end). */
int trace_meta_check(const trace_meta *m, const char *where, bool check_tokens, kv_err *err);

/* ---- reading ---------------------------------------------------------- */

typedef struct trace trace;

/* Opens and validates a trace: schema major, required datasets and
 * attributes, shapes against the attributes, element types, token ids.
 * Errors are KV_EINPUT (or KV_EFAIL when the file cannot be read at all
 * for a reason other than its content) with one line naming the problem. */
int trace_open(const char *path, trace **out, kv_err *err);

/* The same on an already open HDF5 file id (the caller keeps ownership of
 * `file_id`; used by the fuzz harness with in-memory files). */
int trace_open_hid(int64_t file_id, const char *name, trace **out, kv_err *err);

void trace_close(trace *tr);

const trace_meta *trace_get_meta(const trace *tr);
const char *trace_path(const trace *tr);
bool trace_has(const trace *tr, trace_dset d);

/* The trace's /prompt_text (checked on open: a scalar string, valid UTF-8),
 * NUL-terminated and owned by the trace; NULL when it has none. */
const char *trace_prompt_text(const trace *tr);

/* The trace's /prompt_chat (a chat prompt's record, JSON text), NULL when absent. */
const char *trace_prompt_chat(const trace *tr);

/* Whether `name` can name a span: 1 .. TRACE_SPAN_NAME_MAX of A-Z a-z 0-9 _ . -
 * (it is a CSV field and a label as it is). */
bool trace_span_name_ok(const char *name);

/* The trace's /spans (checked on open), owned by the trace, *n of them;
 * NULL and *n = 0 when it has none. */
const trace_span *trace_spans(const trace *tr, int64_t *n);

/* Layer `layer` of /wo into out[wo_dim][n_heads*head_dim] (the trace must
 * have it: meta wo_dim > 0); a value that is not finite is KV_EINPUT. */
int trace_read_wo(trace *tr, int64_t layer, float *out, kv_err *err);

/* Token ids, [T] (checked to lie in [0, vocab_size)). */
int trace_read_tokens(trace *tr, int32_t *out, kv_err *err);

/* Rows [t0, t0+n) of one (layer, head) of keys/values/queries (row width D)
 * or colsum/kvzip/lse (width 1), attention out (width D), as float32 whatever the storage type. `head` is a kv
 * head for keys/values, a query head otherwise. Non-finite values (and
 * negative column sums, kvzip weights outside [0, 1]) are refused as
 * KV_EINPUT naming the position. */
int trace_read_rows(trace *tr, trace_dset d, int64_t layer, int64_t head,
                    int64_t t0, int64_t n, float *out, kv_err *err);

/* A whole (layer, head) slice: trace_read_rows over [0, T). */
int trace_read_head(trace *tr, trace_dset d, int64_t layer, int64_t head,
                    float *out, kv_err *err);

/* What `kvtrace info` shows about one dataset. */
typedef struct {
    int rank;
    int64_t dims[4];
    char type[16];           /* "float32", "float16", "int32", ... */
    uint64_t storage_bytes;  /* on disk, after filters */
    char filters[32];        /* "none", "deflate+shuffle", ... */
} trace_dset_info;

int trace_describe(trace *tr, trace_dset d, trace_dset_info *out, kv_err *err);

/* ---- writing ---------------------------------------------------------- */

typedef struct {
    trace_dtype storage;      /* keys, values, queries */
    int deflate;              /* 0: off; 1..9: deflate level (with shuffle) */
    bool want[TRACE_NDSETS];  /* optional datasets to create (tokens, keys,
                                 values are always created) */
    bool force;               /* replace an existing file */
    int64_t expected_tokens;  /* 0: unknown; else caps the chunk length along T
                                 so that short traces waste no space */
    /* Metadata kept apart from the data (the /provenance group, written by
     * provenance/): when set, called once on the new file's HDF5 id, after the
     * root attributes and before any dataset. NULL: none. */
    int (*annotate)(int64_t file_id, const void *ctx, kv_err *err);
    const void *annotate_ctx;
} trace_create_opts;

typedef struct trace_writer trace_writer;

/* Creates `path` atomically: data goes to a temporary name in the same
 * directory, renamed by trace_finish. meta.n_tokens is ignored (T is what
 * was written); everything else is checked and stored as attributes. */
/* The bytes trace_create's datasets will hold for T positions (the optional ones opts wants), whole
 * chunks as HDF5 allocates them; eviction snapshots and the small attributes left out. */
double trace_create_bytes(const trace_meta *meta, const trace_create_opts *opts, int64_t T);

int trace_create(const char *path, const trace_meta *meta, const trace_create_opts *opts,
                 trace_writer **out, kv_err *err);

/* Token ids for positions [t0, t0+n). */
int trace_write_tokens(trace_writer *w, int64_t t0, int64_t n, const int32_t *tokens,
                       kv_err *err);

/* Rows [t0, t0+n) of one (layer, head): keys/values/queries [n][D],
 * colsum [n], kvzip [n], attention out [n][D], lse [n], logits [n][V] (layer = head = 0), logprobs [n] (layer = head = 0),
 * full attention [n][t0+n] (row i holds columns 0..t0+n-1). Datasets grow
 * along T as needed; pieces may come in any order. */
int trace_write_rows(trace_writer *w, trace_dset d, int64_t layer, int64_t head,
                     int64_t t0, int64_t n, const float *rows, kv_err *err);

/* Eviction snapshot `step` (0, 1, ... in order): the cache positions of
 * every (layer, kv head) after the step, pos [L][K][W] (sorted, -1 padded;
 * W = evict_width, or evict_budget when 0), and the last position processed
 * before it. */
int trace_write_retained(trace_writer *w, int64_t step, int64_t step_end, const int32_t *pos, kv_err *err);

/* Checks that every dataset reached the same T as /tokens, writes n_tokens,
 * closes, and renames to the final path. The writer is freed either way. */
int trace_finish(trace_writer *w, kv_err *err);

/* Closes and removes the temporary file; nothing is left behind. */
void trace_abort(trace_writer *w);

#endif
