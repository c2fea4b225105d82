/* hf: the parts of a Hugging Face checkpoint directory that load_hf.c puts
 * together: config.json (hf_config.c) and tokenizer.json (vocab_hf.c), both
 * parsed with jansson. Internal to model/formats/. */
#ifndef KV_HF_H
#define KV_HF_H

#include <stdbool.h>

#include "model/model.h"
#include "model/tokenizer/vocab.h"
#include "core/kv_error.h"

/* What config.json says beyond model_config. */
typedef struct {
    bool tied;          /* tie_word_embeddings: no lm_head.weight needed */
    bool llama3;        /* rope_scaling of rope_type llama3: */
    double factor, low_freq_factor, high_freq_factor, original_ctx;
} hf_features;

/* config.json at `path` into c (name not set) and f. The architectures of
 * model/arch.c's table; anything else, and features the walk does not
 * compute (other rope scalings, o_proj or mlp biases, other activations,
 * partial rotary), is KV_EINPUT naming the file. */
int hf_read_config(const char *path, model_config *c, hf_features *f, kv_err *err);

/* tokenizer.json at `path` into v, for a model of vocab_size V (ids past the
 * file's tokens are unused pieces). A ByteLevel pre-tokenizer gives a
 * VOCAB_BYTE_BPE vocabulary (its merges, pre-tokenizer and template: bpe_hf.h); a SentencePiece-style BPE
 * (Metaspace / "▁" pieces, byte fallback) a VOCAB_SPM one whose scores are
 * the merges' priorities. *has false (KV_OK) for other tokenizer models.
 * V <= 0: the size the file implies (its largest id + 1). */
int hf_read_tokenizer(const char *path, int64_t V, kv_vocab *v, bool *has, kv_err *err);

/* The chat template and BOS/EOS texts from the files beside tokenizer.json at
 * `tokenizer_json` (chat_template.jinja, tokenizer_config.json) into v
 * (model/tokenizer/vocab_hf_chat.c); absent files leave them NULL. Called by
 * hf_read_tokenizer. */
int hf_read_chat(const char *tokenizer_json, kv_vocab *v, kv_err *err);

#endif
