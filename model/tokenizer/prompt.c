/* The prompt's token ids (prompt.h). */
#include "model/tokenizer/prompt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileopen.h"
#include "model/tokenizer/chat.h"
#include "model/tokenizer/token_file.h"
#include "model/tokenizer/tokenizer.h"

int prompt_sources(const prompt_source *p)
{
    return !!p->text + !!p->text_file + !!p->tokens_file + !!p->messages_file;
}

bool prompt_is_chat(const prompt_source *p)
{
    return p->chat.on || p->messages_file;
}

int prompt_chat_check(const prompt_source *p, const char *verb, bool study, kv_err *err)
{
    const prompt_chat *c = &p->chat;
    if (study && (c->on || c->system))
        return kv_fail(err, KV_EUSAGE, "%s: --chat and --system: a prompts file puts a prompt in the chat template by "
                       "giving \"messages\" (docs/study.md)", verb);
    if (!study && !prompt_is_chat(p) && (c->system || c->date || c->no_thinking))
        return kv_fail(err, KV_EUSAGE, "%s: --system, --chat-date and --no-thinking go with --chat or --messages", verb);
    if (c->on && p->messages_file)
        return kv_fail(err, KV_EUSAGE, "%s: --messages is a conversation in the chat template already: not with --chat",
                       verb);
    if (c->system && p->messages_file)
        return kv_fail(err, KV_EUSAGE, "%s: --system: a --messages file gives its own system message", verb);
    if (c->on && !p->text && !p->text_file)
        return kv_fail(err, KV_EUSAGE, "%s: --chat puts the prompt text in the chat template: give --prompt or "
                       "--prompt-file", verb);
    return KV_OK;
}

int prompt_conversation(const prompt_source *p, const char *text, chat_message **m, int *n, kv_err *err)
{
    if (p->messages_file) {
        int rc = kv_input_check(p->messages_file, false, err);
        if (rc) return rc;
        json_error_t je;
        json_t *a = json_load_file(p->messages_file, JSON_REJECT_DUPLICATES, &je);
        if (!a) return kv_fail(err, KV_EINPUT, "%s: malformed JSON at line %d: %.200s", p->messages_file, je.line,
                               je.text);
        rc = chat_messages_from_json(a, p->messages_file, m, n, err);
        json_decref(a);
        return rc;
    }
    *n = p->chat.system ? 2 : 1;
    *m = calloc((size_t)*n, sizeof **m);
    const char *role[2] = {"system", "user"}, *content[2] = {p->chat.system, text};
    for (int i = 0; *m && i < *n; i++) {
        const int k = *n == 2 ? i : 1;
        (*m)[i].role = strdup(role[k]), (*m)[i].content = strdup(content[k] ? content[k] : "");
        if (!(*m)[i].role || !(*m)[i].content) {
            chat_messages_free(*m, *n);
            *m = NULL;
        }
    }
    return *m ? KV_OK : kv_fail(err, KV_EFAIL, "out of memory");
}

/* prompt_chat_render with a vocabulary v (where names it). */
static int prompt_chat_render_vocab(const prompt_source *p, const char *text, const kv_vocab *v, const char *where,
                                    char **templated, char **record, kv_err *err)
{
    *templated = NULL;
    if (record) *record = NULL;
    chat_message *msgs = NULL;
    int n = 0;
    const chat_known *k = NULL;
    const chat_options o = {.date = p->chat.date, .no_thinking = p->chat.no_thinking};
    int rc = prompt_conversation(p, text, &msgs, &n, err);
    if (!rc) rc = chat_render(v, where, msgs, n, &o, templated, &k, err);
    if (!rc && record && !(*record = chat_record(k, msgs, n, &o))) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (rc) free(*templated), *templated = NULL;
    chat_messages_free(msgs, n);
    return rc;
}

int prompt_chat_render(const prompt_source *p, const char *text, const kv_model *m, const char *model_path,
                       char **templated, char **record, kv_err *err)
{
    *templated = NULL;
    if (record) *record = NULL;
    if (!m->has_vocab)
        return kv_fail(err, KV_EUSAGE, "%s has no tokenizer, so no chat template", model_path);
    return prompt_chat_render_vocab(p, text, &m->vocab, model_path, templated, record, err);
}


int prompt_read_text(const char *path, char **text, size_t *len, kv_err *err)
{
    FILE *f = kv_input_fopen(path, err);
    if (!f) return err->code;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    *text = size >= 0 ? malloc((size_t)size + 1) : NULL;
    *len = *text ? fread(*text, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!*text || *len != (size_t)size) {
        free(*text);
        *text = NULL;
        return kv_fail(err, KV_EFAIL, "%s: cannot read the prompt file", path);
    }
    (*text)[*len] = '\0';
    return KV_OK;
}

/* BOS alone, as llama2.c's run from an empty prompt. */
static int bos_alone(const kv_model *m, int32_t **ids, int64_t *n, kv_err *err)
{
    int32_t bos = m->has_vocab && m->vocab.bos >= 0 ? m->vocab.bos : 1;
    *ids = malloc(sizeof(int32_t));
    if (!*ids) return kv_fail(err, KV_EFAIL, "out of memory");
    (*ids)[0] = bos < m->cfg.vocab_size ? bos : 0;
    *n = 1;
    return KV_OK;
}

int prompt_tokens(const prompt_source *p, const kv_model *m, const char *model_path, int32_t **ids, int64_t *n,
                  kv_err *err)
{
    if (p->tokens_file) return token_file_read(p->tokens_file, m->cfg.vocab_size, ids, n, err);
    if (!p->text && !p->text_file && !p->messages_file) return bos_alone(m, ids, n, err);
    if (!m->has_vocab)
        return kv_fail(err, KV_EUSAGE, "%s has no vocabulary to encode a prompt: give --tokens FILE (or --tokenizer "
                       "FILE, a llama2.c tokenizer, for a llama2.c checkpoint or a random model)", model_path);
    if (m->vocab.kind == VOCAB_BYTE_BPE && !m->vocab.bpe)
        return kv_fail(err, KV_EUSAGE, "%s: the GGUF's byte-level BPE tokenizer has no "
                       "tokenizer.ggml.merges, so text cannot be encoded: tokenize the prompt with the model's own "
                       "tokenizer and give the ids with --tokens FILE", model_path);
    char *text = NULL, *chat = NULL;
    size_t len = 0;
    int rc = p->text_file ? prompt_read_text(p->text_file, &text, &len, err) : KV_OK;
    const char *t = text ? text : p->text;
    if (!rc && prompt_is_chat(p) && !p->templated) {
        if (t && strlen(t) != len && text)
            rc = kv_fail(err, KV_EINPUT, "%s: the prompt holds a NUL byte", p->text_file);
        if (!rc) rc = prompt_chat_render(p, t, m, model_path, &chat, NULL, err);
        t = chat, len = chat ? strlen(chat) : 0;
    } else if (!rc && !text) { /* a file that could not be read has no text to measure */
        len = strlen(t);
    }
    const bool special = m->vocab.add_bos && !prompt_is_chat(p) && !p->templated;
    if (!rc) rc = tokenizer_encode(&m->vocab, t, len, special, ids, n, err);
    free(text), free(chat);
    return rc;
}
