/* chat_families: the C renderings of the known chat templates (chat_render.c),
 * internal to chat.c. Each writes what its template writes for messages of
 * roles system/user/assistant (checked by chat.c) with add_generation_prompt. */
#ifndef KV_CHAT_FAMILIES_H
#define KV_CHAT_FAMILIES_H

#include <stdbool.h>
#include <stddef.h>

#include "core/kv_error.h"
#include "model/tokenizer/chat.h"

typedef struct {
    char *s;        /* NUL-terminated */
    size_t n, cap;
    bool oom;
} chat_out;

void chat_put(chat_out *o, const char *s);

/* What a family's rendering reads. */
typedef struct {
    const chat_message *m;
    int n;
    const chat_options *o;
    const char *bos, *eos;        /* the tokenizer's BOS and EOS texts (NULL: none) */
    const char *default_system;   /* ChatML: the system block a template writes when the first message is not one */
    const char *date;             /* the date written (the option's, else the template's default) */
    const char *where;            /* the model, in messages */
} chat_ctx;

typedef int (*chat_render_fn)(const chat_ctx *c, chat_out *o, kv_err *err);

int chat_render_chatml(const chat_ctx *c, chat_out *o, kv_err *err);
int chat_render_qwen3(const chat_ctx *c, chat_out *o, kv_err *err);
int chat_render_llama3(const chat_ctx *c, chat_out *o, kv_err *err);
int chat_render_llama32(const chat_ctx *c, chat_out *o, kv_err *err);
int chat_render_mistral_tekken(const chat_ctx *c, chat_out *o, kv_err *err);

struct chat_known {
    const char *sha256;          /* of the exact template text */
    const char *family;
    const char *origin;          /* where the template is found */
    chat_render_fn render;
    const char *default_system;  /* ChatML's default system message, else NULL */
    const char *default_date;    /* a template that writes a date: its default, else NULL */
    bool thinking;               /* the template reads enable_thinking */
    bool needs_bos, needs_eos;   /* the template writes bos_token / eos_token */
};

#endif
