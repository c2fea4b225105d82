/* prompt: where a run's prompt comes from (`--prompt TEXT`, `--prompt-file
 * F`, `--tokens F`, `--messages F.json`, or none of them: BOS alone) and its
 * token ids for a model: text is encoded with the model's vocabulary
 * (tokenizer.h), BOS first; a token file is read as it is (token_file.h).
 * With --chat the text is a user message put in the model's chat template,
 * as --messages' conversation is (chat.h; docs/tokenize.md, "Chat
 * templates"), and the templated text is encoded without adding special
 * tokens: the template writes them. */
#ifndef KV_PROMPT_H
#define KV_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cli_opts.h"
#include "core/kv_error.h"
#include "model/model.h"
#include "model/tokenizer/chat.h"

typedef struct {
    bool on;                 /* --chat: the text is a user message in the model's chat template */
    const char *system;      /* --system TEXT: a system message before it */
    const char *date;        /* --chat-date TEXT: the date a template writes (NULL: its default) */
    bool no_thinking;        /* --no-thinking: Qwen 3's enable_thinking=False */
} prompt_chat;

typedef struct {
    const char *text;          /* --prompt TEXT ... */
    const char *text_file;     /* ... or --prompt-file F, text from a file ... */
    const char *tokens_file;   /* ... or --tokens F, token ids ... */
    const char *messages_file; /* ... or --messages F.json, a conversation; none of them: BOS alone */
    prompt_chat chat;
    bool templated;            /* text is a rendered chat template already: encoded without adding special tokens */
    const char *record;        /* with templated: what the trace keeps of the conversation (chat_record), or NULL */
} prompt_source;

/* The command-line rows of the chat options, for a cli_opt table whose
 * struct TYPE holds a prompt_source at FIELD (core/cli_opts.h). */
#define PROMPT_CHAT_OPTIONS(TYPE, FIELD)                                \
    {CLI_ROW("chat", CLI_FLAG, TYPE, FIELD.chat.on)},                   \
    {CLI_ROW("system", CLI_TEXT, TYPE, FIELD.chat.system)},             \
    {CLI_ROW("chat-date", CLI_TEXT, TYPE, FIELD.chat.date)},            \
    {CLI_ROW("no-thinking", CLI_FLAG, TYPE, FIELD.chat.no_thinking)},   \
    {CLI_ROW("messages", CLI_TEXT, TYPE, FIELD.messages_file)}

/* The options' help lines, shared by the verbs that take them. */
#define PROMPT_CHAT_HELP                                                                                      \
    "  --chat               the prompt text is a user message, put in the model's chat template with the\n"    \
    "                       assistant's turn opened (as transformers' apply_chat_template with\n"              \
    "                       add_generation_prompt; the known templates: docs/tokenize.md)\n"                   \
    "  --system TEXT        with --chat: a system message first (else the template's default, if any)\n"      \
    "  --messages F.json    the prompt is a conversation: a JSON array of {\"role\", \"content\"} (roles\n"   \
    "                       system, user, assistant) in the chat template\n"                                  \
    "  --chat-date TEXT     the date a template writes (Llama 3.2: default \"26 Jul 2024\")\n"                 \
    "  --no-thinking        Qwen 3: the reply opens with an empty think block (enable_thinking=False)\n"

/* The chat options together with the prompt's source: --system, --chat-date
 * and --no-thinking need --chat or --messages; --chat needs text (--prompt
 * or --prompt-file); --system is not taken with --messages (the file gives
 * the system message). With study (a prompts file), --chat and --system are
 * refused (its prompts give "messages"), --chat-date and --no-thinking apply
 * to those. */
int prompt_chat_check(const prompt_source *p, const char *verb, bool study, kv_err *err);

/* Whether the prompt is put in a chat template. */
bool prompt_is_chat(const prompt_source *p);

/* The whole of a text file, NUL-terminated, into *text (malloc'ed), *len bytes. */
int prompt_read_text(const char *path, char **text, size_t *len, kv_err *err);

/* How many of the three sources are given (a command line takes at most one). */
int prompt_sources(const prompt_source *p);

/* The conversation of p (--messages, or with --chat the text `text` as the
 * user message after --system) rendered in m's chat template: *templated
 * the text (malloc'ed), *record what the trace keeps of it (chat_record,
 * malloc'ed; record may be NULL). */
int prompt_chat_render(const prompt_source *p, const char *text, const kv_model *m, const char *model_path,
                       char **templated, char **record, kv_err *err);

/* The conversation of p: --messages' file read (chat_messages_from_json), or
 * with --chat the --system message (if any) and `text` as the user's.
 * *m: chat_messages_free it. */
int prompt_conversation(const prompt_source *p, const char *text, chat_message **m, int *n, kv_err *err);

/* The prompt's token ids for model m (model_path names it in messages);
 * *ids is malloc'ed, *n >= 1. */
int prompt_tokens(const prompt_source *p, const kv_model *m, const char *model_path, int32_t **ids, int64_t *n,
                  kv_err *err);

#endif
