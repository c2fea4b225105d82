/* chat: a conversation put in an instruct model's chat template, as
 * transformers' apply_chat_template(messages, add_generation_prompt=True)
 * renders it (docs/tokenize.md, "Chat templates").
 *
 * Templates are recognised, not interpreted: the template text a model
 * carries (GGUF tokenizer.chat_template, or tokenizer_config.json /
 * chat_template.jinja beside a tokenizer.json) is identified by its sha256 in
 * a table of known templates, each rendered by C code written for its family
 * (chat_render.c). A template not in the table is refused, naming its sha256.
 * The rendered text holds the template's special tokens as text (BOS
 * included where the template writes it): encode it without adding special
 * tokens. */
#ifndef KV_CHAT_H
#define KV_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/kv_error.h"
#include "model/tokenizer/vocab.h"

typedef struct {
    const char *role;    /* system, user or assistant */
    const char *content; /* UTF-8, may be empty */
} chat_message;

/* What the template reads besides the messages. */
typedef struct {
    const char *date;  /* the date a template writes (Llama 3.2's "Today Date"); NULL: the template's default */
    bool no_thinking;  /* Qwen 3: enable_thinking=False (an empty think block opens the reply) */
} chat_options;

typedef struct chat_known chat_known;


/* The n messages rendered with vocabulary v's template (v->chat_template)
 * into *text (malloc'ed, NUL-terminated), the generation prompt appended.
 * Checked: at least one message, roles system/user/assistant, UTF-8
 * without NUL, the family's own rules (e.g. Mistral's alternation), and
 * options the template does not read (a date, no_thinking) refused. *known:
 * the template. `where` names the model in messages. */
int chat_render(const kv_vocab *v, const char *where, const chat_message *msgs, int n, const chat_options *o,
                char **text, const chat_known **known, kv_err *err);

/* A JSON array of {"role", "content"} objects (exactly those two string
 * fields, no NUL) into *m (malloc'ed, strings copied), *n messages; `where`
 * names it in messages ("FILE" or "FILE:LINE"). json: a json_t *. */
int chat_messages_from_json(void *json, const char *where, chat_message **m, int *n, kv_err *err);
void chat_messages_free(chat_message *m, int n);

/* What a trace keeps of a rendered conversation (docs/trace-format.md,
 * /prompt_chat): a JSON object {family, template_sha256, messages, date,
 * enable_thinking} as malloc'ed text; NULL when out of memory. */
char *chat_record(const chat_known *k, const chat_message *m, int n, const chat_options *o);

/* The families, for `kvtrace tokenize --help` and the docs: one line each. */
void chat_print_known(void *file);

#endif
