/* The known chat templates' renderings (chat_families.h), each written from
 * its Jinja text (docs/tokenize.md, "Chat templates"), for messages of roles
 * system, user and assistant with add_generation_prompt=True. Jinja's
 * `trim` is Python's str.strip(): Unicode white space at both ends. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/chat_families.h"

static void chat_putn(chat_out *o, const char *s, size_t n)
{
    if (o->oom) return;
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n + 1) cap *= 2;
        char *g = realloc(o->s, cap);
        if (!g) {
            o->oom = true;
            return;
        }
        o->s = g, o->cap = cap;
    }
    memcpy(o->s + o->n, s, n);
    o->n += n;
    o->s[o->n] = '\0';
}

void chat_put(chat_out *o, const char *s)
{
    chat_putn(o, s, strlen(s));
}

static bool is_role(const chat_message *m, const char *role)
{
    return strcmp(m->role, role) == 0;
}

/* Python's str.isspace() for the code point of the UTF-8 sequence of k bytes at s. */
static bool py_space(const unsigned char *s, size_t k)
{
    uint32_t c = k == 1 ? s[0] : k == 2 ? (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F)
               : k == 3 ? (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F) : 0;
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static size_t seq_len(unsigned char b)
{
    return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
}

/* Jinja's trim of s: [*b, *e) (the text is valid UTF-8, checked by chat.c). */
static void py_strip(const char *s, size_t *b, size_t *e)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, n = strlen(s);
    while (i < n && py_space(u + i, seq_len(u[i]))) i += seq_len(u[i]);
    size_t j = n;
    while (j > i) {
        size_t k = j - 1;
        while (k > i && (u[k] & 0xC0) == 0x80) k--;
        if (!py_space(u + k, j - k)) break;
        j = k;
    }
    *b = i, *e = j;
}

static void put_trimmed(chat_out *o, const char *s)
{
    size_t b, e;
    py_strip(s, &b, &e);
    chat_putn(o, s + b, e - b);
}

/* One ChatML block: <|im_start|>ROLE\nCONTENT<|im_end|>\n. */
static void chatml_block(chat_out *o, const char *role, const char *content)
{
    chat_put(o, "<|im_start|>");
    chat_put(o, role);
    chat_put(o, "\n");
    chat_put(o, content);
    chat_put(o, "<|im_end|>\n");
}

/* ChatML (SmolLM2, Qwen 2.5): the template's default system block when the
 * first message is not a system one, then every message as a block. */
int chat_render_chatml(const chat_ctx *c, chat_out *o, kv_err *err)
{
    (void)err;
    if (!is_role(&c->m[0], "system")) chatml_block(o, "system", c->default_system);
    for (int i = 0; i < c->n; i++) chatml_block(o, c->m[i].role, c->m[i].content);
    chat_put(o, "<|im_start|>assistant\n");
    return KV_OK;
}

static bool starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static bool ends_with(const char *s, const char *p)
{
    size_t n = strlen(s), k = strlen(p);
    return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* The last occurrence of p in [s, s + n), NULL if none. */
static const char *last_in(const char *s, size_t n, const char *p)
{
    const size_t k = strlen(p);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(s + i, p, k) == 0) return s + i;
    return NULL;
}

/* [*b, *e) without the newlines at its left (left) and right (right) ends. */
static void strip_nl(const char *s, size_t *b, size_t *e, bool left, bool right)
{
    while (left && *b < *e && s[*b] == '\n') (*b)++;
    while (right && *e > *b && s[*e - 1] == '\n') (*e)--;
}

/* Qwen 3's assistant message i: the reply after the last </think>, and the
 * reasoning between the last <think> and the first </think> (the
 * template's splits); the think block written only after the last user
 * query, for the last message or one that has reasoning. */
static void qwen3_assistant(const chat_ctx *c, int i, int last_query, chat_out *o)
{
    const char *s = c->m[i].content, *close = strstr(s, "</think>");
    size_t cb = 0, ce = strlen(s), rb = 0, re = 0;
    if (close) {
        cb = (size_t)(last_in(s, ce, "</think>") - s) + strlen("</think>");
        strip_nl(s, &cb, &ce, true, false);
        re = (size_t)(close - s);
        strip_nl(s, &rb, &re, false, true);
        const char *open = last_in(s, re, "<think>");
        if (open) rb = (size_t)(open - s) + strlen("<think>");
        strip_nl(s, &rb, &re, true, false);
    }
    chat_put(o, "<|im_start|>assistant\n");
    if (i > last_query && (i == c->n - 1 || re > rb)) {
        strip_nl(s, &rb, &re, true, true);
        chat_put(o, "<think>\n");
        chat_putn(o, s + rb, re - rb);
        chat_put(o, "\n</think>\n\n");
        strip_nl(s, &cb, &ce, true, false);
    }
    chat_putn(o, s + cb, ce - cb);
    chat_put(o, "<|im_end|>\n");
}

/* Qwen 3: a first system message as its block; users and later systems as
 * ChatML; assistants with their think handling; the generation prompt with
 * an empty think block under enable_thinking=False. */
int chat_render_qwen3(const chat_ctx *c, chat_out *o, kv_err *err)
{
    (void)err;
    if (is_role(&c->m[0], "system")) chatml_block(o, "system", c->m[0].content);
    int last_query = c->n - 1;
    for (int i = c->n - 1; i >= 0; i--)
        if (is_role(&c->m[i], "user") &&
            !(starts_with(c->m[i].content, "<tool_response>") && ends_with(c->m[i].content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (int i = 0; i < c->n; i++) {
        if (is_role(&c->m[i], "assistant")) {
            qwen3_assistant(c, i, last_query, o);
        } else if (is_role(&c->m[i], "user") || i > 0) {
            chatml_block(o, c->m[i].role, c->m[i].content);
        }
    }
    chat_put(o, "<|im_start|>assistant\n");
    if (c->o->no_thinking) chat_put(o, "<think>\n\n</think>\n\n");
    return KV_OK;
}

static void llama3_message(const chat_message *m, chat_out *o)
{
    chat_put(o, "<|start_header_id|>");
    chat_put(o, m->role);
    chat_put(o, "<|end_header_id|>\n\n");
    put_trimmed(o, m->content);
    chat_put(o, "<|eot_id|>");
}

/* Llama 3 and 3.1 (the 8B Instruct templates): BOS, every message as a
 * header block with its content trimmed, the assistant header. */
int chat_render_llama3(const chat_ctx *c, chat_out *o, kv_err *err)
{
    (void)err;
    chat_put(o, c->bos);
    for (int i = 0; i < c->n; i++) llama3_message(&c->m[i], o);
    chat_put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return KV_OK;
}

/* Llama 3.2: BOS, a system block that always comes (knowledge cutoff, the
 * date, then the first message's text when it is a system one, trimmed),
 * the other messages as Llama 3's, the assistant header. */
int chat_render_llama32(const chat_ctx *c, chat_out *o, kv_err *err)
{
    (void)err;
    const bool sys = is_role(&c->m[0], "system");
    chat_put(o, c->bos);
    chat_put(o, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
    chat_put(o, c->date);
    chat_put(o, "\n\n");
    if (sys) put_trimmed(o, c->m[0].content);
    chat_put(o, "<|eot_id|>");
    for (int i = sys; i < c->n; i++) llama3_message(&c->m[i], o);
    chat_put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return KV_OK;
}

/* Mistral's Tekken template (Mistral NeMo): after an optional first system
 * message, users and assistants alternate, a user first; BOS, each user as
 * [INST]...[/INST] (the system text and a blank line before the content of
 * the last message when it is a user's), each assistant's content and EOS.
 * It has no generation prompt: the reply follows [/INST]. */
int chat_render_mistral_tekken(const chat_ctx *c, chat_out *o, kv_err *err)
{
    const bool sys = is_role(&c->m[0], "system");
    for (int i = sys; i < c->n; i++) {
        const bool user = is_role(&c->m[i], "user");
        if (!user && !is_role(&c->m[i], "assistant"))
            return kv_fail(err, KV_EINPUT, "%s: message %d: the Mistral template takes only user and assistant "
                           "messages after an optional first system message", c->where, i + 1);
        if (user != ((i - sys) % 2 == 0))
            return kv_fail(err, KV_EINPUT, "%s: message %d: the Mistral template needs user and assistant messages "
                           "to alternate, a user's first", c->where, i + 1);
    }
    chat_put(o, c->bos);
    for (int i = sys; i < c->n; i++) {
        if (is_role(&c->m[i], "user")) {
            chat_put(o, "[INST]");
            if (sys && i == c->n - 1) {
                chat_put(o, c->m[0].content);
                chat_put(o, "\n\n");
            }
            chat_put(o, c->m[i].content);
            chat_put(o, "[/INST]");
        } else {
            chat_put(o, c->m[i].content);
            chat_put(o, c->eos);
        }
    }
    return KV_OK;
}
