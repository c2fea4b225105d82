/* bpe_model: the inside of a byte-level BPE tokenizer, shared by bpe.c (the
 * tables and how they are filled) and bpe_encode.c (encoding). Not for other
 * files: they use bpe.h. */
#ifndef KV_BPE_MODEL_H
#define KV_BPE_MODEL_H

#include "model/tokenizer/bpe.h"

typedef struct {
    char *text;
    size_t len;
    int32_t id;
    int flags; /* BPE_LSTRIP | BPE_RSTRIP */
} bpe_added;

struct bpe_model {
    int32_t n;
    char **pieces;       /* [n], NULL when unset */
    int32_t *slot;       /* piece hash: [cap] id + 1, 0 empty */
    size_t cap;
    uint64_t *mkey;      /* merge hash: [mcap] (a + 1) << 32 | (b + 1), 0 empty */
    int32_t *mrank, *mres;
    size_t mcap, n_merges;
    pretok *pre;
    bool nfc, ignore_merges;
    bpe_added *added;    /* sorted by first byte, then longest first */
    int32_t n_added, n_normalized; /* n_normalized: matched on the normalised text (BPE_NORMALIZED under NFC) */
    int32_t first[257];  /* added tokens starting with byte c: [first[c], first[c + 1]) */
    int32_t prefix[BPE_TEMPLATE_MAX], suffix[BPE_TEMPLATE_MAX];
    int n_prefix, n_suffix;
    int32_t byte_tok[256]; /* the one-character token of each byte */
    char *where;           /* the file it came from, for messages */
};

/* Id of piece s[0..len), or -1. */
int32_t bpe_find(const bpe_model *b, const char *s, size_t len);

/* Rank and result of merging tokens a and c, or -1. */
int32_t bpe_merge_rank(const bpe_model *b, int32_t a, int32_t c, int32_t *result);

/* GPT-2's printable character for byte c, as UTF-8 into out[0..2); its length. */
int bpe_byte_char(unsigned char c, char out[2]);

uint64_t bpe_hash(const char *s, size_t len);

#endif
