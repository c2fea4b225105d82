/* vocab: a SentencePiece-style vocabulary, as every model loader fills it.
 *
 * Pieces are stored in one canonical form whatever the source: UTF-8 with
 * spaces written as U+2581 "▁" (as in GGUF; llama2.c's tokenizer.bin uses
 * ' ', converted on load), byte-fallback tokens as "<0xHH>" with type
 * VOCAB_BYTE, control tokens (BOS/EOS) with type VOCAB_CONTROL. */
#ifndef KV_VOCAB_H
#define KV_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"

typedef enum {
    VOCAB_NORMAL = 1,
    VOCAB_UNKNOWN = 2,
    VOCAB_CONTROL = 3,
    VOCAB_USER = 4,
    VOCAB_UNUSED = 5,
    VOCAB_BYTE = 6,
} vocab_type;

typedef enum {
    VOCAB_SPM,          /* SentencePiece BPE (tokenizer.ggml.model = llama): encodes */
    VOCAB_BYTE_BPE,     /* byte-level BPE (gpt2: Llama 3, Qwen): encoded by `bpe` (bpe.h) */
} vocab_kind;

struct bpe_model;
struct spm_hf;

typedef struct {
    vocab_kind kind;
    int32_t n;               /* number of tokens */
    char **pieces;           /* [n] canonical pieces, NUL-terminated */
    float *scores;           /* [n] merge priority (higher merges first) */
    uint8_t *types;          /* [n] vocab_type */
    int32_t bos, eos, unk;   /* -1 when absent */
    bool add_bos;            /* prepend BOS when encoding a prompt */
    bool add_space_prefix;   /* the dummy-prefix "▁" before the text */
    int32_t byte_id[256];    /* id of "<0xHH>", -1 when absent (set by vocab_finish) */
    int32_t *by_piece;       /* [n] ids sorted by piece, for lookup (set by vocab_finish) */
    int32_t max_piece_len;   /* bytes (set by vocab_finish) */
    struct bpe_model *bpe;   /* VOCAB_BYTE_BPE: merges, pre-tokenizer, added tokens (owned) */
    struct spm_hf *hf;       /* VOCAB_SPM from a tokenizer.json: merge ranks, text rules (owned), else NULL */
    char *chat_template;     /* the chat template's text (owned; NULL: none): model/tokenizer/chat.h */
    char *chat_bos, *chat_eos; /* the BOS/EOS texts tokenizer_config.json names (owned; NULL: the ids' pieces) */
} kv_vocab;

/* Allocates n empty tokens (kind SPM, bos/eos/unk -1, add_bos and
 * add_space_prefix true). */
int vocab_init(kv_vocab *v, int32_t n, kv_err *err);

/* Token `id`: `len` bytes of piece (already canonical; may contain no NUL). */
int vocab_set(kv_vocab *v, int32_t id, const char *piece, size_t len, float score, uint8_t type,
              kv_err *err);

/* After every vocab_set: validates (ids in range, pieces set) and builds the
 * lookup tables. `where` names the source file in messages. */
int vocab_finish(kv_vocab *v, const char *where, kv_err *err);

void vocab_free(kv_vocab *v);

/* Id of a canonical piece, or -1. */
int32_t vocab_find(const kv_vocab *v, const char *piece, size_t len);

/* llama2.c tokenizer.bin: uint32 max_token_length, then per token float32
 * score, uint32 length, bytes. `n` tokens (the checkpoint's vocab size).
 * BOS = 1, EOS = 2 as llama2.c; " " becomes "▁"; "<0xHH>" pieces are bytes. */
int vocab_load_llama2c(const char *path, int32_t n, kv_vocab *v, kv_err *err);

/* The same from the `size` bytes at `data` (the whole file); `where` names
 * it in messages. Lengths are checked against the bytes that remain before
 * anything is allocated for them. On failure *v is freed (zeroed). */
int vocab_load_llama2c_buf(const void *data, size_t size, const char *where, int32_t n,
                           kv_vocab *v, kv_err *err);

#endif
