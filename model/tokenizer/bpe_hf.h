/* bpe_hf: a Hugging Face tokenizer.json's byte-level BPE (model type BPE,
 * ByteLevel in the pre-tokenizer) into a bpe_model: merges, the
 * pre-tokenizer (Sequence / Split with behaviour Isolated / ByteLevel), the
 * normaliser (none or NFC), added tokens, the post-processor (ByteLevel,
 * TemplateProcessing, Sequence of them). Anything else is refused by name
 * (KV_EINPUT, one line naming the file). */
#ifndef KV_BPE_HF_H
#define KV_BPE_HF_H

#include <jansson.h>

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/vocab.h"

/* root: the whole file; v: its pieces, already read (ids, types). */
int bpe_from_json(json_t *root, const kv_vocab *v, const char *path, bpe_model **out, kv_err *err);

#endif
