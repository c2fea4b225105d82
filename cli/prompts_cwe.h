/* prompts_cwe: RULER's common-words extraction (docs/study.md, "RULER's
 * synthetic tasks"): a numbered list of words in which `common` words occur
 * `freq` times each and `u` others 3 times each, shuffled; the question asks
 * for the common words. The words are the model's own whole-word tokens (a
 * space, then 4-10 lowercase ASCII letters), so that every word is one token
 * of the tokenizer that counts the length, and the draws come from a kv_rng
 * stream of (seed, task, length). */
#ifndef KV_CLI_PROMPTS_CWE_H
#define KV_CLI_PROMPTS_CWE_H

#include <stdint.h>

#include "cli/prompts_tasks.h"
#include "core/kv_error.h"
#include "model/tokenizer/vocab.h"

enum { CWE_COMMON = 10,       /* the common words asked for (RULER's num_cw) */
       CWE_RARE_FREQ = 3 };  /* how often each uncommon word occurs (RULER's freq_ucw) */

typedef struct {
    char **w;   /* [n] the words, in token id order */
    int64_t n;
} cwe_words;

/* The vocabulary's whole-word tokens; KV_OK (possibly none) or out of memory. */
int prompt_cwe_words(const kv_vocab *v, cwe_words *out, kv_err *err);
void prompt_cwe_words_free(cwe_words *w);

/* The prompt of (seed, length) with u uncommon words (common + u <= w->n): t's question, prefix and
 * answer (the common words in the order they first occur, ", "-joined; no needles) and *body, the
 * instruction and the numbered list. */
int prompt_cwe_make(const cwe_words *w, int common, int freq, int64_t u, uint64_t seed, int64_t length,
                    prompt_task *t, char **body, kv_err *err);

#endif
