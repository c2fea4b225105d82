/* bpe: a byte-level BPE tokenizer (GPT-2's scheme, as Llama 3, Qwen and
 * DeepSeek use it), filled by a loader (tokenizer.json: bpe_hf.c).
 *
 * Encoding, as the Hugging Face `tokenizers` library does it: added tokens
 * (special or not) are matched first, longest at each position; the text
 * between them is normalised (NFC via utf8proc when the tokenizer asks),
 * split by the pre-tokenizer (pretok.h), and each piece's bytes are mapped
 * to GPT-2's printable characters and merged: the adjacent pair with the
 * lowest merge rank first (ties: the leftmost), by a priority queue. With
 * ignore_merges a piece that is itself a token is that token. Repeated
 * pieces are looked up in a per-call cache. The post-processor's template
 * (e.g. Llama 3's BOS) wraps the ids when special tokens are asked for.
 * Text that is not valid UTF-8 is refused naming the byte offset. */
#ifndef KV_BPE_H
#define KV_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "model/tokenizer/pretok.h"

#define BPE_TEMPLATE_MAX 4

typedef struct bpe_model bpe_model;

/* The output of one encode: ids, and each token's [start, end) byte offsets
 * into the input (the template's tokens: the empty span at 0 or at len). */
typedef struct {
    int32_t *ids;
    int64_t *off; /* [2 * n] */
    int64_t n, cap;
} bpe_out;

int bpe_new(bpe_model **b, int32_t n_tokens, kv_err *err);
void bpe_free(bpe_model *b);

/* Token `id`'s piece as the vocabulary spells it (GPT-2 mapped bytes). */
int bpe_set_piece(bpe_model *b, int32_t id, const char *piece, kv_err *err);

/* After every piece: the next merge (rank = merges so far) of pieces a and
 * b; KV_EINPUT naming the merge when a, b or a+b is not a token. */
int bpe_add_merge(bpe_model *b, const char *a, const char *c, const char *where, kv_err *err);

/* An added token's options (tokenizer.json's lstrip / rstrip): the
 * whitespace before / after it is taken into its span, and so dropped;
 * normalized: under a normaliser (NFC) it is matched on the normalised text
 * (its own text normalised too), between the tokens matched on the text as
 * given, as Hugging Face does it. */
enum { BPE_LSTRIP = 1, BPE_RSTRIP = 2, BPE_NORMALIZED = 4 };

/* An added token matched in the text before splitting; flags: BPE_LSTRIP | BPE_RSTRIP | BPE_NORMALIZED. */
int bpe_add_token(bpe_model *b, const char *text, int32_t id, int flags, kv_err *err);

/* Takes ownership of p. */
void bpe_set_pretok(bpe_model *b, pretok *p);
void bpe_set_options(bpe_model *b, bool nfc, bool ignore_merges);

/* The post-processor's template: ids before and after the text. */
int bpe_set_template(bpe_model *b, const int32_t *prefix, int n_prefix, const int32_t *suffix, int n_suffix,
                     kv_err *err);

/* After everything: finds each byte's one-character token (a byte without
 * one is refused when a text holds it) and indexes the added tokens. */
int bpe_finish(bpe_model *b, const char *where, kv_err *err);

/* Offset of the first byte of text[0..len) that is not well-formed UTF-8, or -1. */
int64_t bpe_utf8_invalid(const char *text, size_t len);

/* Appends the tokens of text[0..len) to out (the caller frees out->ids and
 * out->off); the template's tokens when add_special. */
int bpe_encode(const bpe_model *b, const char *text, size_t len, bool add_special, bpe_out *out, kv_err *err);

#endif
