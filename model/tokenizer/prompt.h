/* prompt: where a run's prompt comes from (`--prompt TEXT`, `--prompt-file
 * F`, `--tokens F`, or none of them: BOS alone) and its token ids for a
 * model: text is encoded with the model's vocabulary (tokenizer.h), BOS
 * first; a token file is read as it is (token_file.h). */
#ifndef KV_PROMPT_H
#define KV_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "model/model.h"

typedef struct {
    const char *text;        /* --prompt TEXT ... */
    const char *text_file;   /* ... or --prompt-file F, text from a file ... */
    const char *tokens_file; /* ... or --tokens F, token ids; none of them: BOS alone */
} prompt_source;

/* The whole of a text file, NUL-terminated, into *text (malloc'ed), *len bytes. */
int prompt_read_text(const char *path, char **text, size_t *len, kv_err *err);

/* How many of the three sources are given (a command line takes at most one). */
int prompt_sources(const prompt_source *p);

/* The prompt's token ids for model m (model_path names it in messages);
 * *ids is malloc'ed, *n >= 1. */
int prompt_tokens(const prompt_source *p, const kv_model *m, const char *model_path, int32_t **ids, int64_t *n,
                  kv_err *err);

#endif
