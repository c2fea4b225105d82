/* tokenizer: prompt text -> token ids, and token ids -> printable text.
 *
 * Encoding (kind VOCAB_SPM) follows llama.cpp's SentencePiece-BPE tokenizer
 * (llm_tokenizer_spm): the dummy-prefix "▁" (when v->add_space_prefix and
 * the text is not empty), every ' ' written as "▁", the text split into
 * UTF-8 characters, then the adjacent pair whose concatenation is a piece
 * with the highest score is merged (ties: the leftmost pair) until no pair
 * is a piece; a symbol left that is not a piece becomes its bytes' fallback
 * tokens "<0xHH>" (a byte without one: the one-byte piece, else unk).
 * A priority queue keeps it O(n log n) in the prompt length.
 *
 * Differences from llama.cpp, all on unusual input: a malformed UTF-8
 * sequence is split into single-byte symbols (llama.cpp trusts the lead
 * byte's length); special-token text such as "<s>" is encoded as plain text
 * (llama.cpp's parse_special = false behaviour).
 *
 * A SentencePiece-style tokenizer.json (v->hf, spm_hf.h) is encoded as the
 * `tokenizers` library does: added tokens first, each segment normalised
 * (and split by Metaspace), pairs merged by their merge rank (only merges
 * merge), byte fallback; add_bos means its template. Its decoding follows
 * its decoder (special tokens as text, ByteFallback, Strip).
 *
 * VOCAB_BYTE_BPE vocabularies (Llama 3, Qwen) are encoded by bpe.h, add_bos
 * meaning the post-processor's template. Decoding works for both kinds as
 * far as the piece types allow (byte-level BPE pieces are mapped back to bytes).
 */
#ifndef KV_TOKENIZER_H
#define KV_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer/vocab.h"
#include "core/kv_error.h"

/* Encodes text[0..len) (may hold any bytes, NUL included) into a malloc'd
 * array *ids of *n ids, BOS first when add_bos (KV_EINPUT if the vocabulary
 * has none). An empty text gives [BOS] (or no ids). On failure *ids = NULL,
 * *n = 0. The caller frees *ids. */
int tokenizer_encode(const kv_vocab *v, const char *text, size_t len, bool add_bos, int32_t **ids,
                     int64_t *n, kv_err *err);

/* The same for either kind, with (byte-level BPE only; else KV_EUSAGE) each
 * token's [start, end) byte offsets into the text: *offsets, [2 * n],
 * malloc'd, when offsets is not NULL. add_special: BOS / the template. */
int tokenizer_encode_offsets(const kv_vocab *v, const char *text, size_t len, bool add_special, int32_t **ids,
                             int64_t **offsets, int64_t *n, kv_err *err);

/* The text one token prints as, after token `prev` (-1: none): normal and
 * user pieces with "▁" as ' ', byte tokens as their byte, control tokens as
 * nothing (byte-level BPE: as their text, e.g. "<|eot_id|>"), unused tokens
 * as nothing, the unknown token as its piece (e.g. "<unk>"), an id
 * outside the vocabulary as nothing. After BOS a leading ' ' is dropped, as
 * llama2.c's decode does (it is the dummy prefix). Like snprintf: writes at
 * most cap - 1 bytes and a NUL (when cap > 0), returns the full length. */
size_t tokenizer_piece_text(const kv_vocab *v, int32_t prev, int32_t id, char *buf, size_t cap);

/* The text of ids[0..n), NUL-terminated and malloc'd (NULL when out of
 * memory). A byte token 0x00 puts a NUL inside: use tokenizer_decode_len
 * when that matters. */
char *tokenizer_decode(const kv_vocab *v, const int32_t *ids, int64_t n);

/* The same, with the length written to *len (when len is not NULL). */
char *tokenizer_decode_len(const kv_vocab *v, const int32_t *ids, int64_t n, size_t *len);

#endif
