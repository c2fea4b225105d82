/* answer: the task-level measures of a prompt's answer (docs/fidelity.md#the-answer-measures),
 * defined once for the project: the rank of the answer's first token (teacher-forced, from the
 * logits of the lockstep runs) and exact match, a greedy continuation after the question with
 * eviction at every step, matched against the answer's text. */
#ifndef KV_FIDELITY_ANSWER_H
#define KV_FIDELITY_ANSWER_H

#include <stdbool.h>
#include <stdint.h>

#include "allocators/alloc.h"
#include "core/kv_error.h"
#include "model/model.h"
#include "policies/policy.h"

/* What every greedy continuation of one prompt shares. */
typedef struct {
    const kv_model *m;
    const char *model_path;
    void *cpu;               /* the CPU backend's open instance */
    const int32_t *prompt;   /* the prompt's ids, the answer at [ans0, ans1) */
    int64_t ans0, ans1;
    int64_t chunk;           /* B: the prefill chunk */
    bool beyond_context;
} fid_answer_ctx;

/* The continuation of one run: the greedy tokens after prompt[0..ans0), decoded. */
typedef struct {
    char *text;              /* the decoded continuation, malloc'd */
    int match;               /* 1: it starts with the answer's text (leading whitespace stripped from both) */
} fid_continuation;

/* 1 + the number of tokens with a larger logit than `id` in logits[V] (1: the greedy token). */
int64_t fid_token_rank(const float *logits, int64_t V, int32_t id);

/* How many tokens a continuation decodes: len(answer) + 8, fewer only where the model's
 * trained context (without beyond_context) or its sliding window ends first. */
int64_t fid_continuation_length(const fid_answer_ctx *c);

/* Prefill prompt[0..ans0) in chunks of B, then greedy-decode fid_continuation_length tokens one
 * at a time (stopping at EOS), evicting at every step under (pc, ac, budget) as the lockstep runs
 * do; pc NULL: the full cache. */
int fid_continue(const fid_answer_ctx *c, const policy_config *pc, const alloc_config *ac, int64_t budget,
                 fid_continuation *out, kv_err *err);

/* Whether `text`, leading whitespace stripped, starts with `answer`, whitespace stripped at both
 * ends (an empty answer never matches). */
bool fid_answer_matches(const char *text, const char *answer);

#endif
