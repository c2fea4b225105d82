/* fuzz_vocab: the checks of a loaded vocabulary that the tokenizer
 * harnesses share (fuzz_tokens: llama2.c tokenizer.bin; fuzz_hf_tokenizer:
 * tokenizer.json). Header-only: each harness is one program. */
#ifndef KV_FUZZ_VOCAB_H
#define KV_FUZZ_VOCAB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

#define VCHECK(c)                                                                            \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "check failed: %s (%s:%d)\n", #c, __FILE__, __LINE__);          \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

/* A failure: its code, a message starting with `where`, no control characters. */
static void fz_check_message(const kv_err *err, int rc, const char *where)
{
    VCHECK(rc != KV_OK && err->code == rc);
    VCHECK(strncmp(err->msg, where, strlen(where)) == 0);
    for (const char *p = err->msg; *p; p++) VCHECK((unsigned char)*p >= 0x20);
}

/* Every piece is found again by its text; byte tokens are byte tokens. */
static void fz_check_vocab(const kv_vocab *v)
{
    for (int32_t i = 0; i < v->n; i++) {
        size_t len = strlen(v->pieces[i]);
        VCHECK(len <= (size_t)v->max_piece_len);
        int32_t j = vocab_find(v, v->pieces[i], len);
        VCHECK(j >= i && strcmp(v->pieces[j], v->pieces[i]) == 0);
    }
    for (int b = 0; b < 256; b++)
        if (v->byte_id[b] >= 0) VCHECK(v->types[v->byte_id[b]] == VOCAB_BYTE);
}

/* Encoding gives ids in range (or a well-formed refusal), and they decode. */
static void fz_encode_decode(const kv_vocab *v, const char *text, size_t len)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    kv_err err = {0};
    int rc = tokenizer_encode(v, text, len, v->bos >= 0, &ids, &n, &err);
    if (rc) {
        fz_check_message(&err, rc, "");
        VCHECK(!ids && n == 0);
        return;
    }
    for (int64_t i = 0; i < n; i++) VCHECK(ids[i] >= 0 && ids[i] < v->n);
    size_t dlen = 0;
    char *back = tokenizer_decode_len(v, ids, n, &dlen);
    VCHECK(back && strlen(back) <= dlen);
    free(back);
    free(ids);
}

#endif
