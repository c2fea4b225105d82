/* The table of known chat templates and the checks around rendering one
 * (chat.h). A row is added only with the real template text it was
 * written from, and its comparison with transformers in
 * tests/real/test_chat_templates.py. */
#include "model/tokenizer/chat.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "model/tokenizer/chat_families.h"

static const char SMOLLM_SYSTEM[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
static const char QWEN_SYSTEM[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

static const chat_known KNOWN[] = {
    {"872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788", "chatml",
     "SmolLM2-135M/360M/1.7B-Instruct (its GGUF's tokenizer.chat_template)", chat_render_chatml,
     .default_system = SMOLLM_SYSTEM},
    {"cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f", "chatml",
     "Qwen2.5 Instruct (tokenizer_config.json)", chat_render_chatml, .default_system = QWEN_SYSTEM},
    {"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5", "qwen3",
     "Qwen3 (tokenizer_config.json), with its thinking block", chat_render_qwen3, .thinking = true},
    {"b48c47f6443892716176eb200bf4ef108f64e06ca26ed0fa8ebc0a4b3992fcb2", "llama3",
     "Meta-Llama-3-8B-Instruct (tokenizer_config.json)", chat_render_llama3, .needs_bos = true},
    {"ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122", "llama3",
     "Llama 3 8B Instruct with add_generation_prompt, as packaged with the Llama 3.1 tokenizer "
     "(tokenizer_config.json)", chat_render_llama3, .needs_bos = true},
    {"5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4", "llama3.2",
     "Llama-3.2-1B/3B-Instruct (tokenizer_config.json)", chat_render_llama32, .default_date = "26 Jul 2024",
     .needs_bos = true},
    {"7a29791b46bd731f43fbe4994f23c7b689daaa36c4d0294485fab19825a2ec5d", "mistral-tekken",
     "Mistral-Nemo-Instruct-2407 (tokenizer_config.json)", chat_render_mistral_tekken, .needs_bos = true,
     .needs_eos = true},
};
enum { N_KNOWN = sizeof KNOWN / sizeof *KNOWN };

static void sha256_hex(const char *text, char hex[65])
{
    unsigned char md[32];
    unsigned int n = 0;
    hex[0] = '\0';
    if (!EVP_Digest(text, strlen(text), md, &n, EVP_sha256(), NULL) || n != 32) return;
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static const chat_known *chat_find(const char *text, const char *where, kv_err *err)
{
    char hex[65];
    sha256_hex(text, hex);
    for (int i = 0; i < N_KNOWN; i++)
        if (strcmp(KNOWN[i].sha256, hex) == 0) return &KNOWN[i];
    kv_fail(err, KV_EINPUT, "%s: its chat template (sha256 %s) is not one kvtrace knows (families: chatml, qwen3, "
            "llama3, llama3.2, mistral-tekken; docs/tokenize.md lists each template's sha256)", where, hex);
    return NULL;
}

void chat_print_known(void *file)
{
    for (int i = 0; i < N_KNOWN; i++)
        fprintf(file, "  %-15s %s  %s\n", KNOWN[i].family, KNOWN[i].sha256, KNOWN[i].origin);
}

static int check_text(const char *s, const char *where, int i, const char *what, kv_err *err)
{
    const int64_t bad = kv_utf8_invalid(s, strlen(s));
    if (bad >= 0)
        return kv_fail(err, KV_EINPUT, "%s: message %d: its %s is not valid UTF-8 at byte offset %lld", where, i + 1,
                       what, (long long)bad);
    return KV_OK;
}

static int check_messages(const chat_message *m, int n, const char *where, kv_err *err)
{
    if (n < 1) return kv_fail(err, KV_EINPUT, "%s: a conversation needs at least one message", where);
    for (int i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content)
            return kv_fail(err, KV_EINPUT, "%s: message %d has no %s", where, i + 1, m[i].role ? "content" : "role");
        if (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") && strcmp(m[i].role, "assistant"))
            return kv_fail(err, KV_EINPUT, "%s: message %d: role '%.40s' is not system, user or assistant", where,
                           i + 1, m[i].role);
        int rc = check_text(m[i].content, where, i, "content", err);
        if (rc) return rc;
    }
    return KV_OK;
}

/* The BOS or EOS text the template writes: the tokenizer's own (from
 * tokenizer_config.json), else the piece of its id. */
static const char *special_text(const kv_vocab *v, const char *own, int32_t id)
{
    return own ? own : id >= 0 && id < v->n ? v->pieces[id] : NULL;
}

static int check_options(const chat_known *k, const chat_options *o, const char *where, kv_err *err)
{
    if (o->date && !k->default_date)
        return kv_fail(err, KV_EUSAGE, "%s: its chat template (%s) writes no date: --chat-date does not apply", where,
                       k->family);
    if (o->date && (!*o->date || kv_utf8_invalid(o->date, strlen(o->date)) >= 0 || strchr(o->date, '\n')))
        return kv_fail(err, KV_EUSAGE, "--chat-date must be one line of UTF-8 text");
    if (o->no_thinking && !k->thinking)
        return kv_fail(err, KV_EUSAGE, "%s: its chat template (%s) has no thinking block: --no-thinking does not "
                       "apply", where, k->family);
    return KV_OK;
}

int chat_render(const kv_vocab *v, const char *where, const chat_message *msgs, int n, const chat_options *o,
                char **text, const chat_known **known, kv_err *err)
{
    *text = NULL;
    if (!v->chat_template)
        return kv_fail(err, KV_EUSAGE, "%s has no chat template (tokenizer.chat_template in a GGUF; chat_template "
                       "in tokenizer_config.json or chat_template.jinja beside tokenizer.json): --chat needs one",
                       where);
    const chat_known *k = chat_find(v->chat_template, where, err);
    if (!k) return err->code;
    int rc = check_messages(msgs, n, where, err);
    if (!rc) rc = check_options(k, o, where, err);
    if (rc) return rc;
    chat_ctx c = {.m = msgs, .n = n, .o = o, .bos = special_text(v, v->chat_bos, v->bos),
                  .eos = special_text(v, v->chat_eos, v->eos), .default_system = k->default_system,
                  .date = o->date ? o->date : k->default_date, .where = where};
    if ((k->needs_bos && !c.bos) || (k->needs_eos && !c.eos))
        return kv_fail(err, KV_EINPUT, "%s: its chat template (%s) writes the %s token, which the tokenizer does not "
                       "name", where, k->family, !c.bos ? "BOS" : "EOS");
    chat_out out = {0};
    chat_put(&out, ""); /* an empty rendering is still a string */
    rc = k->render(&c, &out, err);
    if (!rc && out.oom) rc = kv_fail(err, KV_EFAIL, "out of memory rendering the chat template");
    if (rc) {
        free(out.s);
        return rc;
    }
    *text = out.s, *known = k;
    return KV_OK;
}

void chat_messages_free(chat_message *m, int n)
{
    for (int i = 0; m && i < n; i++) free((char *)m[i].role), free((char *)m[i].content);
    free(m);
}

static int field(json_t *o, const char *key, const char *where, size_t i, const char **dst, kv_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return kv_fail(err, KV_EINPUT, "%s: message %zu: '%s' must be a string without NUL", where, i + 1, key);
    if (!(*dst = strdup(json_string_value(v)))) return kv_fail(err, KV_EFAIL, "out of memory");
    return KV_OK;
}

int chat_messages_from_json(void *json, const char *where, chat_message **m, int *n, kv_err *err)
{
    json_t *a = json;
    *m = NULL, *n = 0;
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 100000)
        return kv_fail(err, KV_EINPUT, "%s: the messages must be a non-empty JSON array of {\"role\", \"content\"}",
                       where);
    const size_t count = json_array_size(a);
    chat_message *out = calloc(count, sizeof *out);
    if (!out) return kv_fail(err, KV_EFAIL, "out of memory");
    int rc = KV_OK;
    for (size_t i = 0; !rc && i < count; i++) {
        json_t *o = json_array_get(a, i);
        if (!json_is_object(o) || json_object_size(o) != 2 || !json_object_get(o, "role") ||
            !json_object_get(o, "content"))
            rc = kv_fail(err, KV_EINPUT, "%s: message %zu must be an object of exactly \"role\" and \"content\"",
                         where, i + 1);
        if (!rc) rc = field(o, "role", where, i, &out[i].role, err);
        if (!rc) rc = field(o, "content", where, i, &out[i].content, err);
    }
    if (rc) {
        chat_messages_free(out, (int)count);
        return rc;
    }
    *m = out, *n = (int)count;
    return KV_OK;
}

char *chat_record(const chat_known *k, const chat_message *m, int n, const chat_options *o)
{
    json_t *msgs = json_array(), *r = NULL;
    for (int i = 0; msgs && i < n; i++)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", m[i].role, "content", m[i].content));
    if (msgs) r = json_pack("{s:s, s:s, s:O}", "family", k->family, "template_sha256", k->sha256, "messages", msgs);
    if (r && k->default_date) json_object_set_new(r, "date", json_string(o->date ? o->date : k->default_date));
    if (r && k->thinking) json_object_set_new(r, "enable_thinking", json_boolean(!o->no_thinking));
    char *s = r ? json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(msgs), json_decref(r);
    return s;
}
