/* prompts: a study's prompts file (JSON Lines, docs/study.md) read, checked
 * and tokenized: what `capture --prompts` runs, and what `fidelity --prompts`
 * reads (the answer's token range). Public to capture's callers; stable.
 *
 * A line: {"id", "text" | "tokens", optional "generate", "spans", "answer"}.
 * A span is {"name", "text"} (found in the prompt's text, exactly once) or
 * {"name", "start", "end"} (token positions [start, end) of the prompt's ids,
 * BOS included); "answer" is a text the prompt's text ends with, or
 * {"start", "end"} with end = the prompt's length, and becomes the span named
 * "answer". Every error is KV_EINPUT "FILE:LINE: ..." (FILE as given). */
#ifndef KV_CAPTURE_PROMPTS_H
#define KV_CAPTURE_PROMPTS_H

#include <stdint.h>

#include "core/kv_error.h"
#include "model/model.h"
#include "study/study.h"
#include "trace/trace.h"

#define PROMPTS_ANSWER "answer" /* the answer's span name (reserved for it) */

typedef struct {
    char id[STUDY_ID_MAX + 1];
    char *text;            /* the prompt's text; NULL when given as ids */
    int32_t *ids;          /* [n_ids]: given as tokens, or (prompts_tokenize) the text's ids, BOS first */
    int64_t n_ids;
    int64_t generate;      /* -1: the command's --generate */
    int line;              /* its line in the file */
    trace_span *spans;     /* [n_spans], the answer last when there is one; token ranges after prompts_tokenize */
    char **span_text;      /* [n_spans]: a span's text as given, NULL for a token range */
    int n_spans;
} prompt_item;

typedef struct {
    prompt_item *p;
    int n;
} prompt_list;

/* The whole file, checked (JSON, fields, ids, span forms and names); blank
 * lines skipped; an empty file is an error. Spans given as text are not yet
 * placed. On failure *l is empty. */
int prompts_read(const char *file, prompt_list *l, kv_err *err);

/* Every text prompt encoded with model m's tokenizer (as `capture --prompt`
 * does) into its ids, token ids checked against the vocabulary, and every
 * span placed and checked (within the prompt, text found exactly once).
 * How text is placed: docs/study.md, "Spans". */
int prompts_tokenize(prompt_list *l, const char *file, const kv_model *m, kv_err *err);

/* The prompt's answer span (token range after prompts_tokenize); NULL: none. */
const trace_span *prompt_answer(const prompt_item *it);

void prompts_free(prompt_list *l);

/* internal to capture/: the spans and answer of one prompt object (spans.c) */
int prompts_spans_parse(void *json_obj, prompt_item *it, const char *file, kv_err *err);
int prompts_spans_place(prompt_item *it, const char *file, const kv_model *m, kv_err *err);

#endif
