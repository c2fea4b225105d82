/* tokjson_check: the shape of a Hugging Face tokenizer.json, checked once,
 * before any reader (vocab_hf.c, bpe_hf.c) takes a field from it, so that
 * the readers can trust the types they ask for.
 *
 * For a BPE model: model.vocab an object of ids, model.merges an array of
 * "a b" strings or [a, b] pairs, added_tokens objects with an id and a
 * string content; every boolean option a boolean; the normalizer,
 * pre_tokenizer, post_processor and decoder null or objects with a string
 * type (Sequences: a list of such objects, at most 32 deep); a Split's
 * pattern and behaviour, a TemplateProcessing's template (exactly one
 * sequence, special tokens it defines with integer ids). Ids lie in
 * [0, 2^31 - 1) and do not leave most of the range unnamed (a size claim the
 * file does not back is not allocated). A pre-tokenizer without ByteLevel
 * must be SentencePiece-style (none or Metaspace). Anything else is
 * KV_EINPUT, one line naming the file and the field. Other model types
 * (WordPiece, Unigram, ...) pass: the readers say they have no tokenizer. */
#ifndef KV_TOKJSON_CHECK_H
#define KV_TOKJSON_CHECK_H

#include <jansson.h>

#include "core/kv_error.h"

int tokjson_check(json_t *root, const char *path, kv_err *err);

#endif
