/* capture: run a model over a prompt (chunked prefill) and a generated
 * continuation, recording a trace (docs/trace.md). The run itself (walk,
 * eviction, recording) is run.h's; this is the verb's driver. */
#ifndef KV_CAPTURE_H
#define KV_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "trace/trace.h"
#include "model/backend.h"
#include "model/tokenizer/prompt.h"
#include "allocators/alloc.h"
#include "policies/policy.h"
#include "provenance/provenance.h"

typedef enum { ATTN_COLSUM, ATTN_FULL, ATTN_NONE } capture_attention;

typedef struct {
    const char *model;        /* GGUF, llama2.c .bin, or random:NAME[:SEED] */
    const char *tokenizer;    /* llama2.c tokenizer.bin */
    prompt_source prompt;     /* --prompt, --prompt-file, --tokens; none of them: BOS alone */
    const char *output;
    int64_t generate;         /* tokens to generate after the prompt */
    int64_t chunk;            /* B: prefill chunk */
    bool record_queries;
    bool record_wo;           /* --record wo: /wo, the output projection (criticalkv) */
    capture_attention attention;
    double max_attention_gib; /* refuse --attention full above this file size */
    bool logits;
    bool no_logprobs;         /* --no-logprobs: no /logprobs; logits of each step's last row only */
    trace_dtype dtype;
    int threads;              /* the CPU kernels' threads; 0: one per CPU (the trace does not depend on it) */
    double temperature;       /* 0: greedy */
    uint64_t seed;
    bool force, quiet;
    bool print_text;          /* decode the tokens to stdout */
    bool stats;               /* throughput and GEMM rate on stderr (benchmarks) */
    /* eviction inside the run (capture_mode = evict): evict.iface NULL for none */
    policy_config evict;
    int64_t budget;           /* N */
    alloc_config alloc;       /* --allocator (evict.h); alloc.iface NULL: uniform */
    const char *head_scores;  /* --head-scores FILE: per-(layer, kv head) importance (headkv, duo) */
    bool retained;            /* /evict/retained snapshots after every chunk */
    int64_t evict_until;      /* --evict-until POS: eviction only up to that prompt position (run.h); 0: none */
    const char *evict_until_span; /* --evict-until NAME: up to the start of the prompt's span NAME */
    const backend_iface *backend; /* --device NAME (NULL: cpu) */
    int weights;              /* --weights: type of the weight matrices (0 f32, 1 f16, 2 bf16; -1: the file's
                                 on the CPU, f32 on a device) */
    int compute;              /* --compute: 0 float (float32 products), 1 int8 (Q8_0, Q4_0, Q4_1 matrices on int8-quantised
                                 rows: docs/capture.md#compute-int8) */
    bool beyond_context;      /* --allow-beyond-context: past the model's trained context */
    bool kvzip;               /* --kvzip: the reconstruction pass and /attention/kvzip (capture/kvzip.h) */
    bool dry_run;             /* --dry-run: the walk alone, nothing recorded or written (benchmarks) */
    bool timestamp;           /* --timestamp: the time in the provenance record */
    prov_record *prov;        /* the trace's /provenance (inputs added once the model loaded); NULL: none */

    const char *prompts;      /* --prompts FILE.jsonl: one trace per prompt into the directory `output` (prompts.c) */
    const trace_span *spans;  /* the prompt's spans, recorded as /spans (--prompts); NULL: none */
    int64_t n_spans;
} capture_opts;

int capture_run(const capture_opts *o, kv_err *err);

/* --evict-until as a position of a prompt of P positions with these spans:
 * the number given, or the start of the span named (>= 1); past P, or a span
 * the prompt lacks: KV_EUSAGE. 0 when neither was given. */
int capture_evict_until(const capture_opts *o, const trace_span *spans, int64_t n_spans, int64_t P, int64_t *until,
                        kv_err *err);

/* One run of an already loaded model (capture --prompts loads it once): the
 * prompt ids[n_ids] as given (NULL: o->prompt through the tokenizer), then
 * o->generate more, into the trace o->output; the backend opened and closed
 * here; o->prov's inputs are the caller's to add. */
int capture_loaded(const capture_opts *o, const kv_model *model, const int32_t *ids, int64_t n_ids, kv_err *err);

/* capture --prompts FILE -o DIR (capture/prompts.c, docs/study.md): the
 * prompts file read and checked whole (KV_EINPUT "FILE:LINE: ..."), the model
 * loaded once, one trace per prompt named ID.h5 and DIR/index.jsonl, all or
 * nothing. */
int capture_prompts(const capture_opts *o, kv_err *err);

/* The inputs of a model run into a provenance record: the model's files,
 * the tokenizer file, the kind of prompt and its file (capture, fidelity). */
int capture_provenance(prov_record *p, const char *model, const char *tokenizer, const prompt_source *ps,
                       kv_err *err);

/* A --head-scores FILE for model shape c (alloc_head_scores_read: KV_EINPUT
 * naming the file and row) into *scores [L][K], malloc'ed (capture, fidelity). */
int capture_head_scores(const char *path, const model_config *c, double **scores, kv_err *err);

/* `kvtrace capture` */
int capture_main(int argc, char **argv);

#endif
