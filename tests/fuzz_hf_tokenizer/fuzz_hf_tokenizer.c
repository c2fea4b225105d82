/* fuzz_hf_tokenizer: libFuzzer harness for a Hugging Face tokenizer.json
 * (model/tokenizer/vocab_hf.c) and the vocabulary code under it (vocab.c,
 * tokenizer.c).
 *
 * Input: bytes 0-1 (little-endian) give the model's vocab_size V =
 * value % 4096 + 1; the rest is the file, read through an in-memory file
 * (tests/fuzz_file.h). A failure must be one well-formed line naming the
 * file, and leave no vocabulary behind. A vocabulary that is read must hold
 * what the JSON says: the harness parses the same bytes with jansson, and
 * every model.vocab entry and added token has its id's text (no id given two
 * texts); BOS, EOS and UNK are ids in range or -1; every piece is found
 * again by its text (fz_check_vocab); a SentencePiece vocabulary encodes
 * (or refuses with a well-formed line); a byte-level one (bpe_hf.c,
 * pretok.c, bpe_encode.c) encodes three texts, or refuses with a
 * well-formed line, to tokens with ordered spans that decode back to the
 * text when nothing normalises or drops it; all V ids decode. ASan (with leak checking) and UBSan report the
 * rest. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/formats/hf.h"

#define FUZZ_NAME "fuzz_hf_tokenizer"
#define WHERE fuzz_path
#include "tests/fuzz_file.h"
#include "tests/fuzz_check.h"
#include "tests/fuzz_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_piece(const kv_vocab *v, json_t *id, const char *piece)
{
    CHECK(json_is_integer(id), "a non-integer id was read");
    json_int_t i = json_integer_value(id);
    CHECK(i >= 0 && i < v->n, "id %lld accepted outside [0, %d)", (long long)i, (int)v->n);
    CHECK(strcmp(v->pieces[i], piece) == 0, "id %lld is '%s' in the file, '%s' when read",
          (long long)i, piece, v->pieces[i]);
}

/* A byte-level vocabulary encodes text[0..len) (bpe_encode.c under the
 * file's pre-tokenizer, normaliser and added tokens) or refuses it with a
 * well-formed line (invalid UTF-8, a byte without a token, PCRE2's limits):
 * ids are tokens, offsets ordered spans inside the text, and, when exact
 * (no normaliser, nothing that drops text), the ids decode to the text. */
static void bpe_encode_check(const kv_vocab *v, const char *text, size_t len, bool exact)
{
    int32_t *ids = NULL;
    int64_t n = 0, *off = NULL;
    kv_err err = {0};
    int rc = tokenizer_encode_offsets(v, text, len, !exact, &ids, &off, &n, &err);
    if (rc) {
        fz_check_message(&err, rc, "");
        CHECK(!ids && !off, "a failed encode left its ids");
        return;
    }
    int64_t last = 0;
    for (int64_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0 && ids[i] < v->n && v->types[ids[i]] != VOCAB_UNUSED, "encoded id %d", (int)ids[i]);
        CHECK(off[2 * i] >= last && off[2 * i] <= off[2 * i + 1] && off[2 * i + 1] <= (int64_t)len,
              "token %lld: span [%lld, %lld) after %lld in %zu bytes", (long long)i, (long long)off[2 * i],
              (long long)off[2 * i + 1], (long long)last, len);
        last = off[2 * i];
    }
    size_t dlen = 0;
    char *back = tokenizer_decode_len(v, ids, n, &dlen);
    CHECK(back, "decoding the encoded ids");
    CHECK(!exact || (dlen == len && memcmp(back, text, len) == 0), "'%.*s' decodes as '%.*s'", (int)len, text,
          (int)dlen, back);
    free(back);
    free(ids);
    free(off);
}

/* The vocabulary against the JSON itself. */
static void check_against_json(const kv_vocab *v, json_t *root)
{
    json_t *model = json_object_get(root, "model");
    const char *piece;
    json_t *id;
    json_object_foreach(json_object_get(model, "vocab"), piece, id) check_piece(v, id, piece);
    size_t k;
    json_t *a;
    json_array_foreach(json_object_get(root, "added_tokens"), k, a) {
        json_t *content = json_object_get(a, "content");
        CHECK(json_is_string(content), "added token without content was read");
        check_piece(v, json_object_get(a, "id"), json_string_value(content));
    }
}

static void check_vocab_read(const kv_vocab *v, const uint8_t *body, size_t len, bool exact)
{
    CHECK(v->kind == VOCAB_SPM || v->kind == VOCAB_BYTE_BPE, "kind %d", (int)v->kind);
    const int32_t special[] = {v->bos, v->eos, v->unk};
    for (int i = 0; i < 3; i++)
        CHECK(special[i] >= -1 && special[i] < v->n, "special id %d", (int)special[i]);
    for (int32_t i = 0; i < v->n; i++)
        CHECK(!isnan(v->scores[i]) && v->types[i] <= VOCAB_BYTE, "token %d: score %g, type %d",
              (int)i, v->scores[i], (int)v->types[i]);
    fz_check_vocab(v);
    static const char text[] = "Once upon a time, the caf\xc3\xa9 \xe4\xb8\xad\n\xff";
    if (v->kind == VOCAB_SPM) {
        fz_encode_decode(v, text, sizeof text - 1);
        fz_encode_decode(v, (const char *)body, len < 64 ? len : 64);
    } else {
        bpe_encode_check(v, text, sizeof text - 2, exact); /* valid UTF-8 */
        bpe_encode_check(v, text, sizeof text - 1, exact); /* the \xff: refused */
        bpe_encode_check(v, (const char *)body, len < 64 ? len : 64, exact);
    }
    int32_t *all = malloc((size_t)v->n * sizeof *all);
    CHECK(all, "out of memory");
    for (int32_t i = 0; i < v->n; i++) all[i] = i;
    size_t dlen = 0;
    char *back = tokenizer_decode_len(v, all, v->n, &dlen);
    CHECK(back && strlen(back) <= dlen, "decoding every id");
    free(back);
    free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    const int64_t V = (data[0] | (int64_t)data[1] << 8) % 4096 + 1;
    const uint8_t *body = data + 2;
    const size_t len = size - 2;
    fuzz_file_set(body, len);
    kv_vocab v;
    memset(&v, 0, sizeof v);
    bool has = true;
    kv_err err = {0};
    int rc = hf_read_tokenizer(fuzz_path, V, &v, &has, &err);
    if (rc) {
        check_err(rc, &err, "hf_read_tokenizer");
        CHECK(!has && !v.pieces, "a failed read left a vocabulary");
        return 0;
    }
    if (!has) {
        CHECK(!v.pieces, "no vocabulary, but pieces");
        return 0;
    }
    CHECK(v.n == V, "%d tokens for a vocab_size of %lld", (int)v.n, (long long)V);
    json_t *root = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, NULL);
    CHECK(root, "a file jansson cannot parse was read");
    check_against_json(&v, root);
    json_t *norm = json_object_get(root, "normalizer");
    const bool exact = (!norm || json_is_null(norm)) && !memmem(body, len, "Removed", 7) &&
                       !memmem(body, len, "strip", 5);
    json_decref(root);
    check_vocab_read(&v, body, len, exact);
    vocab_free(&v);
    return 0;
}
