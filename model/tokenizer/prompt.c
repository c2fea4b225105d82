/* The prompt's token ids (prompt.h). */
#include "core/fileopen.h"
#include "model/tokenizer/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/token_file.h"
#include "model/tokenizer/tokenizer.h"

int prompt_sources(const prompt_source *p)
{
    return !!p->text + !!p->text_file + !!p->tokens_file;
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
    if (!p->text && !p->text_file) return bos_alone(m, ids, n, err);
    if (!m->has_vocab)
        return kv_fail(err, KV_EUSAGE, "%s has no vocabulary to encode a prompt: give --tokens FILE%s", model_path,
                       strncmp(model_path, "random:", 7) ? " (or --tokenizer for a llama2.c checkpoint)" : "");
    if (m->vocab.kind == VOCAB_BYTE_BPE && !m->vocab.bpe)
        return kv_fail(err, KV_EUSAGE, "%s: the GGUF's byte-level BPE tokenizer has no "
                       "tokenizer.ggml.merges, so text cannot be encoded: tokenize the prompt with the model's own "
                       "tokenizer and give the ids with --tokens FILE", model_path);
    char *text = NULL;
    size_t len = 0;
    int rc = p->text_file ? prompt_read_text(p->text_file, &text, &len, err) : KV_OK;
    if (!rc)
        rc = tokenizer_encode(&m->vocab, text ? text : p->text, text ? len : strlen(p->text), m->vocab.add_bos, ids,
                              n, err);
    free(text);
    return rc;
}
