/* recorder: the recording path of a capture. It observes the forward pass
 * (forward_observer) and streams what it sees into a trace: tokens, keys,
 * values, queries, exact attention column sums (accumulated in double from
 * the normalised weights of each chunk, so no T x T matrix ever exists),
 * optional full attention rows, logits and log-probabilities, and the
 * full-cache reference (every head's attention output and log-sum-exp). */
#ifndef KV_RECORDER_H
#define KV_RECORDER_H

#include <stdbool.h>
#include <stdint.h>

#include "model/forward.h"
#include "trace/trace.h"

typedef struct {
    bool queries;      /* /queries */
    bool colsum;       /* /attention/colsum */
    bool full;         /* /attention/full */
    bool logits;       /* /logits */
    bool reference;    /* /attention/out, /attention/lse and /attention/max (full runs) */
    bool logprobs;     /* /logprobs */
} recorder_wants;

typedef struct {
    trace_writer *w;
    model_config cfg;
    recorder_wants want;
    int64_t T;              /* tokens the capture will process */
    const int32_t *tokens;  /* [T], owned by the driver */
    int64_t known;          /* tokens[0 .. known) are decided */
    double *colsum;         /* [L][H][T] */
    float *rows;            /* [B][D] gather scratch */
    float *logprob;         /* [B] */
    float *pending;         /* [V] logits of a row whose next token was not yet known */
    int64_t pending_pos;    /* -1: none */
    int threads;            /* threads for the log-probabilities (at least 1; results do not depend on it) */
} recorder;

int recorder_init(recorder *r, trace_writer *w, const model_config *cfg, recorder_wants want,
                  const int32_t *tokens, int64_t T, int64_t max_chunk, kv_err *err);

/* Whether its on_logits hook reads the logits rows (for /logits or /logprobs); else it writes the
 * tokens alone and the rows may be NULL. */
bool recorder_reads_logits(const recorder *r);

/* The hooks to pass to forward_chunk. */
forward_observer recorder_observer(recorder *r);

/* Writes the column sums and the last log-probability (NaN: no next token). */
int recorder_finish(recorder *r, kv_err *err);

void recorder_free(recorder *r);

#endif
