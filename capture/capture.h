/* capture: run a model over a prompt (chunked prefill) and a generated
 * continuation, recording a trace (SPEC §2, §3). */
#ifndef KV_CAPTURE_H
#define KV_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "core/kv_error.h"
#include "core/trace.h"
#include "policies/policy.h"

typedef enum { ATTN_COLSUM, ATTN_FULL, ATTN_NONE } capture_attention;

typedef struct {
    const char *model;        /* GGUF, llama2.c .bin, or random:NAME[:SEED] */
    const char *tokenizer;    /* llama2.c tokenizer.bin */
    const char *prompt;       /* text ... */
    const char *prompt_file;  /* ... or a file of text ... */
    const char *tokens_file;  /* ... or token ids; none of them: BOS alone */
    const char *output;
    int64_t generate;         /* tokens to generate after the prompt */
    int64_t chunk;            /* B: prefill chunk */
    bool record_queries;
    capture_attention attention;
    double max_attention_gib; /* refuse --attention full above this file size */
    bool logits;
    trace_dtype dtype;
    int threads;              /* 0: OpenBLAS default */
    double temperature;       /* 0: greedy */
    uint64_t seed;
    bool force, quiet;
    bool print_text;          /* decode the tokens to stdout */
    bool stats;               /* throughput and GEMM rate on stderr (benchmarks) */
    /* eviction inside the run (capture_mode = evict): evict.iface NULL for none */
    policy_config evict;
    int64_t budget;           /* N */
    bool retained;            /* /evict/retained snapshots after every chunk */
    bool device_cuda;         /* --device cuda (capture/capture_device.h) */
    int weights;              /* --weights: kvcuda_dtype of the weights on the device (0 f32, 1 f16, 2 bf16) */
    bool dry_run;             /* --dry-run: the walk alone, nothing recorded or written (benchmarks) */
} capture_opts;

int capture_run(const capture_opts *o, kv_err *err);

/* The prompt's token ids of o (--tokens, --prompt, --prompt-file; none: BOS
 * alone) for model m; *ids is malloc'ed, *n >= 1. */
int capture_prompt_tokens(const capture_opts *o, const kv_model *m, int32_t **ids, int64_t *n, kv_err *err);

/* `kvtrace capture` */
int capture_main(int argc, char **argv);

#endif
