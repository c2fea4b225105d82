/* run: one model run over a token sequence — the walk (model/forward.h) on
 * a backend (model/backend.h), optional eviction inside it (evict.h),
 * optional recording into a trace — as capture/'s public API beside
 * `kvtrace capture`: the capture driver (capture.c) and fidelity's model runs
 * (fidelity/runs.c) both go through it. It owns, once, what every run over a
 * sequence needs: the prompt's ids with room for what is generated, the
 * sequence checks, the trace's metadata, and the recording path, chosen when
 * the run opens: none (no output: `--dry-run`, or an unrecorded run), the
 * recorder on the walk's host arrays, or, for a backend with staging, device
 * staging through pinned buffers and a writer thread (record_device.h).
 *
 * The caller owns the model, the backend instance and the token array; the
 * run reads tokens[len .. len+n) at each step, so a generating caller writes
 * the next token before stepping over it (run_known says how far the
 * sequence is decided, for the log-probabilities). */
#ifndef KV_CAPTURE_RUN_H
#define KV_CAPTURE_RUN_H

#include <stdint.h>

#include "core/kv_error.h"
#include "trace/trace.h"
#include "model/backend.h"
#include "model/model.h"
#include "model/tokenizer/prompt.h"
#include "allocators/alloc.h"
#include "policies/policy.h"

typedef struct kv_run kv_run;

typedef struct {
    const kv_model *model;        /* the host model (model_load) */
    const char *model_path;       /* names the model in messages, and in the trace when it has no name */
    const backend_iface *backend; /* NULL: the first of backend_all() (cpu) */
    void *backend_ctx;            /* its open instance (backend_open); one run per instance with prepare */
    const int32_t *tokens;        /* [T] the sequence (run_sequence) */
    int threads;                  /* host threads the recording may use, as --threads (0: every CPU) */
    int64_t T, P;                 /* positions; the prompt's (decided at the start) */
    int64_t chunk;                /* B: the largest step */
    const policy_config *evict;   /* eviction inside the run; NULL or no iface: the full cache */
    int64_t budget;               /* N, with evict */
    int64_t evict_until;          /* with evict: eviction only after steps ending at or before this prompt
                                     position; later ones join the cache unevicted (0: every step evicts) */
    const alloc_config *alloc;    /* with evict: the allocator (evict.h); NULL: uniform */
    const char *output;           /* the trace; NULL: nothing is recorded or written */
    const char *verb;             /* the trace's creator: "kvtrace VERSION verb" */
    bool beyond_context;          /* --allow-beyond-context: T may exceed the model's trained context */
    int64_t extra;                /* positions after the sequence a later pass walks (run_extra: capture
                                     --kvzip's reconstruction pass); the caches and checks cover T + extra */
    const char *prompt_text;      /* the prompt as text (run_sequence), recorded as /prompt_text; NULL: none */
    const char *prompt_chat;      /* its chat record (run_sequence), recorded as /prompt_chat; NULL: none */
    bool record_wo;               /* record /wo: each layer's W_o (the host model's) */
    bool compute_int8;            /* the backend multiplies on int8 rows (backend_request.int8): the trace's compute */
    bool last_logits_only;        /* logits of each step's last row only, the next token's, and none for a step
                                     after which no token is chosen (capture --no-logprobs; trace.want[TRACE_LOGPROBS]
                                     and [TRACE_LOGITS] must be off) */
    const trace_span *spans;      /* recorded as /spans (trace_meta.spans); NULL: none */
    int64_t n_spans;
    trace_create_opts trace;      /* storage, force, want[]: what is recorded (TRACE_COLSUM: also what the
                                     backend accumulates); expected_tokens is T */
} run_opts;

/* The run's tokens for model m: the prompt's ids (prompt.h), then room for
 * `generate` more: tokens [T] (malloc'ed), P = the prompt's length, T = P + generate.
 * A text prompt (--prompt, or --prompt-file read once, whole) must be valid
 * UTF-8 without NUL bytes (the trace keeps it as text): else KV_EUSAGE for
 * --prompt, KV_EINPUT for the file, naming the byte offset. *text (when text
 * is not NULL): that text, malloc'ed, or NULL for --tokens and BOS alone;
 * with a chat prompt (prompt.h) the templated text, and *chat (when chat is
 * not NULL) the record of the conversation (chat_record), else NULL. */
int run_sequence(const prompt_source *src, const kv_model *m, const char *model_path, int64_t generate,
                 int32_t **tokens, int64_t *P, int64_t *T, char **text, char **chat, kv_err *err);

/* Checks the sequence against the model (a sliding window shorter than T,
 * or a trained context shorter than T without beyond_context: KV_EUSAGE),
 * and the allocator against N (KV_EUSAGE), creates the trace, prepares the
 * backend and the walk (caches of T rows, or with eviction the most one
 * stream can keep plus B: N + B under uniform), then the recording path. *r is set even
 * on failure: run_free it. */
int run_open(kv_run **r, const run_opts *o, kv_err *err);

/* The next n <= B tokens of the sequence through the walk: recorded, evicted
 * after (with --retained: the snapshot). */
int run_step(kv_run *r, int64_t n, kv_err *err);

/* After the whole sequence: tokens[0..n) (n <= extra) through the walk in
 * chunks of B, at positions T.., handed to `obs` alone (nothing recorded);
 * the caches keep every row. */
int run_extra(kv_run *r, const int32_t *tokens, int64_t n, const forward_observer *obs, kv_err *err);

/* The trace being written (NULL: nothing is recorded); valid until run_finish. */
trace_writer *run_trace(const kv_run *r);

/* tokens[0 .. known) are decided (generation wrote tokens[known - 1]). */
void run_known(kv_run *r, int64_t known);

/* The last step's next-token logits, host [n][V]. */
const float *run_logits(const kv_run *r);

/* The largest number of rows any (layer, kv head) cache has held. */
int64_t run_cache_peak(const kv_run *r);

/* The high-water mark of the rows every cache held together (forward_state.rows_peak). */
int64_t run_rows_peak(const kv_run *r);

/* Waits until the recording has caught up with the walk and brings back what
 * the backend accumulated (column sums). */
int run_settle(kv_run *r, kv_err *err);

/* `--stats` to stderr: load and walk seconds, throughput, GEMM and attention
 * rates, the cache's rows and high-water mark, peak RSS, the device's peak. */
void run_print_stats(const kv_run *r, double load_s, double secs);

/* Settles, then completes the trace (column sums, the last log-probability). */
int run_finish(kv_run *r, kv_err *err);

/* Stops the recording path, frees the walk and the recorder, removes an
 * unfinished trace; NULL is fine. */
void run_free(kv_run *r);

#endif
