/* libFuzzer harness for the tokenizer inputs: --tokens files, llama2.c
 * tokenizer.bin files, and SentencePiece encoding of arbitrary bytes.
 *
 * Input: byte 0 picks the target (mod 3), bytes 1-2 a little-endian
 * parameter, the rest is the file or the text.
 *   0  token_file_parse with vocab_size = param + 1; accepted ids are in
 *      range and read back the same when written in both forms
 *   1  vocab_load_llama2c_buf with n = param; a vocabulary that loads is
 *      consistent and encodes and decodes without crashing
 *   2  tokenizer_encode of the text with a fixed vocabulary that has all
 *      256 byte tokens: ids match a naive O(n^2) merge, and decoding gives
 *      the text back (unless it holds a literal "▁", which SentencePiece
 *      cannot tell from a space)
 * Every failure must be one line naming its source. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/token_file.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

#define SP "\xe2\x96\x81"
#include "tests/spm_reference.h"
#include "tests/fuzz_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) VCHECK(c)

/* ---- target 0: --tokens files ---- */

static void reparse(const int32_t *ids, int64_t n, int64_t vocab, int json)
{
    char *text = malloc((size_t)n * 12 + 3), *p = text;
    if (json) *p++ = '[';
    for (int64_t i = 0; i < n; i++) p += sprintf(p, i ? (json ? ", %d" : "\n%d") : "%d", ids[i]);
    if (json) *p++ = ']';
    int32_t *again = NULL;
    int64_t m = 0;
    kv_err err = {0};
    CHECK(token_file_parse("again", text, (size_t)(p - text), vocab, &again, &m, &err) == KV_OK);
    CHECK(m == n && memcmp(again, ids, (size_t)n * sizeof *ids) == 0);
    free(again);
    free(text);
}

static void fuzz_token_file(const uint8_t *body, size_t len, unsigned param)
{
    int64_t vocab = (int64_t)param + 1;
    int32_t *ids = NULL;
    int64_t n = -1;
    kv_err err = {0};
    int rc = token_file_parse("fuzz.txt", (const char *)body, len, vocab, &ids, &n, &err);
    if (rc) {
        fz_check_message(&err, rc, "fuzz.txt: ");
        CHECK(rc == KV_EINPUT && !ids && n == 0);
        return;
    }
    CHECK(n >= 1 && ids);
    for (int64_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < vocab);
    reparse(ids, n, vocab, 0);
    reparse(ids, n, vocab, 1);
    free(ids);
}

static void fuzz_llama2c(const uint8_t *body, size_t len, unsigned param)
{
    kv_vocab v;
    kv_err err = {0};
    int rc = vocab_load_llama2c_buf(body, len, "fuzz.bin", (int32_t)param, &v, &err);
    if (rc) {
        fz_check_message(&err, rc, "fuzz.bin: ");
        CHECK(rc == KV_EINPUT && !v.pieces);
        return;
    }
    fz_check_vocab(&v);
    static const char text[] = "Once upon a time, the caf\xc3\xa9 \xe4\xb8\xad\n\xff";
    fz_encode_decode(&v, text, sizeof text - 1);
    fz_encode_decode(&v, (const char *)body, len < 64 ? len : 64);
    vocab_free(&v);
}

static kv_vocab fixed;

static void build_fixed(void)
{
    static const char *pieces[] = {SP, SP "t", "he", SP "the", "th", "e", "t", "h", "ab", "bc",
                                   "abc", "aa", "\xc3\xa9", "\xe4\xb8\xad", SP SP, "a", "b", "c"};
    enum { NP = sizeof pieces / sizeof *pieces };
    kv_err err = {0};
    CHECK(vocab_init(&fixed, 3 + 256 + NP, &err) == KV_OK);
    CHECK(vocab_set(&fixed, 0, "<unk>", 5, 0, VOCAB_UNKNOWN, &err) == KV_OK);
    CHECK(vocab_set(&fixed, 1, "<s>", 3, 0, VOCAB_CONTROL, &err) == KV_OK);
    CHECK(vocab_set(&fixed, 2, "</s>", 4, 0, VOCAB_CONTROL, &err) == KV_OK);
    for (int b = 0; b < 256; b++) {
        char p[8];
        snprintf(p, sizeof p, "<0x%02X>", b);
        CHECK(vocab_set(&fixed, 3 + b, p, 6, 0, VOCAB_BYTE, &err) == KV_OK);
    }
    for (int i = 0; i < NP; i++) /* scores with ties: -(i / 3) */
        CHECK(vocab_set(&fixed, 259 + i, pieces[i], strlen(pieces[i]), (float)-(i / 3), VOCAB_NORMAL,
                        &err) == KV_OK);
    fixed.bos = 1, fixed.eos = 2, fixed.unk = 0;
    CHECK(vocab_finish(&fixed, "fixed", &err) == KV_OK);
}

static int has_space_mark(const uint8_t *t, size_t len)
{
    for (size_t i = 0; i + 3 <= len; i++)
        if (memcmp(t + i, SP, 3) == 0) return 1;
    return 0;
}

static void fuzz_encode(const uint8_t *text, size_t len)
{
    if (!fixed.pieces) build_fixed();
    int32_t *ids = NULL;
    int64_t n = 0;
    kv_err err = {0};
    CHECK(tokenizer_encode(&fixed, (const char *)text, len, true, &ids, &n, &err) == KV_OK);
    int32_t *ref = malloc((3 * len + 5) * sizeof *ref);
    if (len <= 512) {
        int64_t m = naive_encode(&fixed, text, len, ref);
        CHECK(m == n && memcmp(ref, ids, (size_t)n * sizeof *ids) == 0);
    }
    free(ref);
    size_t dlen = 0;
    char *back = tokenizer_decode_len(&fixed, ids, n, &dlen);
    CHECK(back);
    if (!has_space_mark(text, len)) CHECK(dlen == len && memcmp(back, text, len) == 0);
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    unsigned param = data[1] | (unsigned)data[2] << 8;
    const uint8_t *body = data + 3;
    size_t len = size - 3;
    switch (data[0] % 3) {
    case 0: fuzz_token_file(body, len, param); break;
    case 1: fuzz_llama2c(body, len, param); break;
    default: fuzz_encode(body, len); break;
    }
    return 0;
}
