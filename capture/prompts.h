/* prompts: a study's prompts file (JSON Lines, docs/study.md) read, checked
 * and tokenized: what `capture --prompts` runs, and what `fidelity --prompts`
 * reads (the answer's token range). Public to capture's callers; stable.
 *
 * A line: {"id", "text" | "messages" | "tokens", optional "generate", "spans",
 * "answer", "answer_prefix"}. "messages" is a conversation ([{"role",
 * "content"}]) put in the model's chat template at prompts_tokenize
 * (model/tokenizer/chat.h): the prompt's text is then the templated text, the
 * answer_prefix (if any) and the answer's text (if any) appended after the
 * generation prompt, as the model's reply would begin.
 * A span is {"name", "text"} (found in the prompt's text, exactly once) or
 * {"name", "start", "end"} (token positions [start, end) of the prompt's ids,
 * BOS included); "answer" is a text the prompt's text ends with, or
 * {"start", "end"} with end = the prompt's length, and becomes the span named
 * "answer". Every error is KV_EINPUT "FILE:LINE: ..." (FILE as given). */
#ifndef KV_CAPTURE_PROMPTS_H
#define KV_CAPTURE_PROMPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "model/model.h"
#include "model/tokenizer/chat.h"
#include "model/tokenizer/prompt.h"
#include "study/study.h"
#include "trace/trace.h"

#define PROMPTS_ANSWER "answer" /* the answer's span name (reserved for it) */

typedef struct {
    char id[STUDY_ID_MAX + 1];
    char *text;            /* the prompt's text (with messages: the templated text, after prompts_tokenize); NULL
                              when given as ids */
    chat_message *msgs;    /* [n_msgs] the conversation, given as messages; else NULL */
    int n_msgs;
    char *answer_prefix;   /* with messages: the reply's start before the answer (NULL: none) */
    char *record;          /* with messages: the chat record the trace keeps (chat_record), after prompts_tokenize */
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

/* Every conversation rendered in model m's chat template (chat's date and
 * thinking options applied; their other fields unused), every text prompt
 * encoded with m's tokenizer (as `capture --prompt` does; a templated text
 * without added special tokens) into its ids, token ids checked against the
 * vocabulary, and every span placed and checked (within the prompt, text
 * found exactly once). How text is placed: docs/study.md, "Spans". */
int prompts_tokenize(prompt_list *l, const char *file, const kv_model *m, const prompt_chat *chat, kv_err *err);

/* The prompt as a source for one run of its text (templated, with its chat
 * record, when it came as messages); ids-only prompts give an empty one. */
prompt_source prompt_item_source(const prompt_item *it);

/* The prompt's answer span (token range after prompts_tokenize); NULL: none. */
const trace_span *prompt_answer(const prompt_item *it);

void prompts_free(prompt_list *l);

/* internal to capture/: the spans and answer of one prompt object (spans.c) */
int prompts_spans_parse(void *json_obj, prompt_item *it, const char *file, kv_err *err);
int prompts_spans_place(prompt_item *it, const char *file, const kv_model *m, kv_err *err);
/* internal to capture/: a JSON value that is a non-empty string without NUL bytes */
bool prompts_is_text(void *json_value);

#endif
