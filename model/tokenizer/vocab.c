/* vocab: the SentencePiece-style vocabulary every loader fills (see vocab.h),
 * and the llama2.c tokenizer.bin reader.
 *
 * Lookup is a binary search over `by_piece`, the ids sorted by piece bytes
 * (then by id). When a piece occurs twice the highest id wins, as in
 * llama.cpp, whose piece -> id map keeps the last insertion. */
#include "core/fileopen.h"
#include "model/tokenizer/vocab.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/spm_hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 "▁", the canonical space */

int vocab_init(kv_vocab *v, int32_t n, kv_err *err)
{
    memset(v, 0, sizeof *v);
    if (n <= 0) return kv_fail(err, KV_EINPUT, "vocabulary size %d is not positive", (int)n);
    v->kind = VOCAB_SPM;
    v->n = n;
    v->bos = v->eos = v->unk = -1;
    v->add_bos = true;
    v->add_space_prefix = true;
    for (int b = 0; b < 256; b++) v->byte_id[b] = -1;
    v->pieces = kv_calloc((size_t)n, sizeof *v->pieces, "vocabulary pieces", err);
    v->scores = kv_calloc((size_t)n, sizeof *v->scores, "vocabulary scores", err);
    v->types = kv_calloc((size_t)n, sizeof *v->types, "vocabulary types", err);
    if (!v->pieces || !v->scores || !v->types) {
        vocab_free(v);
        return KV_EFAIL;
    }
    return KV_OK;
}

int vocab_set(kv_vocab *v, int32_t id, const char *piece, size_t len, float score, uint8_t type,
              kv_err *err)
{
    if (id < 0 || id >= v->n)
        return kv_fail(err, KV_EFAIL, "vocab_set: token id %d outside [0, %d)", (int)id, (int)v->n);
    if (len > INT32_MAX)
        return kv_fail(err, KV_EINPUT, "token %d: piece of %zu bytes is too long", (int)id, len);
    if (len && memchr(piece, '\0', len))
        return kv_fail(err, KV_EINPUT, "token %d: piece contains a NUL byte", (int)id);
    if (score != score) return kv_fail(err, KV_EINPUT, "token %d: score is NaN", (int)id);
    if (type > VOCAB_BYTE)
        return kv_fail(err, KV_EINPUT, "token %d: unknown token type %u", (int)id, (unsigned)type);
    char *copy = malloc(len + 1);
    if (!copy) return kv_fail(err, KV_EFAIL, "token %d: out of memory", (int)id);
    if (len) memcpy(copy, piece, len);
    copy[len] = '\0';
    free(v->pieces[id]);
    v->pieces[id] = copy;
    v->scores[id] = score;
    v->types[id] = type;
    return KV_OK;
}

/* strcmp-like order of a NUL-terminated piece against key[0..len). */
static int piece_cmp(const char *piece, const char *key, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char p = (unsigned char)piece[i], k = (unsigned char)key[i];
        if (p == 0) return -1; /* the piece ends first (the key may hold a NUL) */
        if (p != k) return p < k ? -1 : 1;
    }
    return piece[len] ? 1 : 0;
}

typedef struct {
    const char *piece;
    int32_t id;
} piece_ref;

static int piece_ref_cmp(const void *a, const void *b)
{
    const piece_ref *x = a, *y = b;
    int c = strcmp(x->piece, y->piece);
    if (c) return c;
    return (x->id > y->id) - (x->id < y->id);
}

/* Value of an upper-case hex byte piece "<0xHH>", or -1. */
static int byte_piece_value(const char *p)
{
    static const char hex[] = "0123456789ABCDEF";
    if (strlen(p) != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    const char *hi = memchr(hex, p[3], 16), *lo = memchr(hex, p[4], 16);
    if (!hi || !lo) return -1;
    return (int)((hi - hex) * 16 + (lo - hex));
}

static int check_special(const kv_vocab *v, int32_t id, const char *name, const char *where,
                         kv_err *err)
{
    if (id < -1 || id >= v->n)
        return kv_fail(err, KV_EINPUT, "%s: %s token id %d outside the vocabulary [0, %d)", where,
                       name, (int)id, (int)v->n);
    return KV_OK;
}

int vocab_finish(kv_vocab *v, const char *where, kv_err *err)
{
    if (!v->pieces || v->n <= 0)
        return kv_fail(err, KV_EFAIL, "%s: vocabulary was not initialised", where);
    for (int32_t i = 0; i < v->n; i++)
        if (!v->pieces[i]) return kv_fail(err, KV_EINPUT, "%s: token %d has no piece", where, (int)i);
    if (check_special(v, v->bos, "BOS", where, err) || check_special(v, v->eos, "EOS", where, err) ||
        check_special(v, v->unk, "unknown", where, err))
        return err->code;
    piece_ref *refs = kv_calloc((size_t)v->n, sizeof *refs, "vocabulary index", err);
    free(v->by_piece);
    v->by_piece = kv_calloc((size_t)v->n, sizeof *v->by_piece, "vocabulary index", err);
    if (!refs || !v->by_piece) {
        free(refs);
        return err->code;
    }
    v->max_piece_len = 0;
    for (int b = 0; b < 256; b++) v->byte_id[b] = -1;
    for (int32_t i = 0; i < v->n; i++) {
        refs[i] = (piece_ref){v->pieces[i], i};
        size_t len = strlen(v->pieces[i]);
        if ((int32_t)len > v->max_piece_len) v->max_piece_len = (int32_t)len;
        int b = v->types[i] == VOCAB_BYTE ? byte_piece_value(v->pieces[i]) : -1;
        if (b >= 0) v->byte_id[b] = i; /* the last one wins, as vocab_find */
    }
    qsort(refs, (size_t)v->n, sizeof *refs, piece_ref_cmp);
    for (int32_t i = 0; i < v->n; i++) v->by_piece[i] = refs[i].id;
    free(refs);
    return KV_OK;
}

void vocab_free(kv_vocab *v)
{
    if (v->pieces)
        for (int32_t i = 0; i < v->n; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->scores);
    free(v->types);
    free(v->by_piece);
    bpe_free(v->bpe);
    spm_hf_free(v->hf);
    free(v->chat_template), free(v->chat_bos), free(v->chat_eos);
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->unk = -1;
}

int32_t vocab_find(const kv_vocab *v, const char *piece, size_t len)
{
    if (!v->by_piece || len > (size_t)v->max_piece_len) return -1;
    /* the last index whose piece is <= key: among equal pieces, the highest id */
    int32_t lo = 0, hi = v->n; /* invariant: [0, lo) <= key, [hi, n) > key */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (piece_cmp(v->pieces[v->by_piece[mid]], piece, len) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) return -1;
    int32_t id = v->by_piece[lo - 1];
    return piece_cmp(v->pieces[id], piece, len) == 0 ? id : -1;
}

/* ---- llama2.c tokenizer.bin ---- */

static uint32_t get_u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A llama2.c piece in canonical form: ' ' becomes "▁" except in BOS/EOS and
 * byte pieces. Returns the type the piece gets. `out` holds 3 * len bytes. */
static uint8_t llama2c_piece(int32_t id, const unsigned char *p, uint32_t len, char *out,
                             size_t *out_len)
{
    memcpy(out, p, len);
    out[len] = '\0';
    *out_len = len;
    if (id == 1 || id == 2) return VOCAB_CONTROL;
    if (byte_piece_value(out) >= 0) return VOCAB_BYTE;
    if (id == 0 && strcmp(out, "<unk>") == 0) return VOCAB_UNKNOWN;
    size_t o = 0;
    for (uint32_t i = 0; i < len; i++) {
        if (p[i] == ' ') {
            memcpy(out + o, SPACE_MARK, 3);
            o += 3;
        } else {
            out[o++] = (char)p[i];
        }
    }
    *out_len = o;
    return VOCAB_NORMAL;
}

/* Fills v (already initialised with n tokens) from the tokens after the header. */
static int llama2c_tokens(const unsigned char *data, size_t size, const char *where, kv_vocab *v,
                          kv_err *err)
{
    size_t off = 4;
    char *buf = NULL;
    size_t cap = 0;
    for (int32_t i = 0; i < v->n; i++) {
        if (size - off < 8) {
            free(buf);
            return kv_fail(err, KV_EINPUT, "%s: truncated at token %d of %d (offset %zu of %zu)",
                           where, (int)i, (int)v->n, off, size);
        }
        float score;
        uint32_t bits = get_u32le(data + off); /* little-endian, like the lengths */
        memcpy(&score, &bits, 4);
        uint32_t len = get_u32le(data + off + 4);
        off += 8;
        if (len > size - off) {
            free(buf);
            return kv_fail(err, KV_EINPUT,
                           "%s: token %d has length %u but only %zu bytes remain (length field "
                           "at offset %zu)",
                           where, (int)i, (unsigned)len, size - off, off - 4);
        }
        if (memchr(data + off, '\0', len) || score != score) {
            free(buf);
            return kv_fail(err, KV_EINPUT, "%s: token %d has %s (offset %zu)", where, (int)i,
                           score != score ? "a NaN score" : "a NUL byte in its piece", off - 8);
        }
        if ((size_t)len * 3 + 1 > cap) {
            cap = (size_t)len * 3 + 1;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return kv_fail(err, KV_EFAIL, "%s: out of memory", where);
            }
            buf = nb;
        }
        size_t plen;
        uint8_t type = llama2c_piece(i, data + off, len, buf, &plen);
        off += len;
        if (vocab_set(v, i, buf, plen, score, type, err)) {
            free(buf);
            return err->code;
        }
    }
    free(buf);
    if (off != size)
        return kv_fail(err, KV_EINPUT,
                       "%s: %zu bytes left after the %d tokens the model's vocabulary has (the "
                       "tokenizer holds more tokens than the model)",
                       where, size - off, (int)v->n);
    return KV_OK;
}

int vocab_load_llama2c_buf(const void *data, size_t size, const char *where, int32_t n,
                           kv_vocab *v, kv_err *err)
{
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->unk = -1;
    if (n <= 0) return kv_fail(err, KV_EINPUT, "%s: vocabulary size %d is not positive", where, (int)n);
    if (size < 4) return kv_fail(err, KV_EINPUT, "%s: truncated header (%zu bytes)", where, size);
    /* each token takes at least 8 bytes: refuse before allocating n tokens */
    if ((size - 4) / 8 < (size_t)n)
        return kv_fail(err, KV_EINPUT,
                       "%s: %zu bytes cannot hold the %d tokens of the model's vocabulary "
                       "(truncated or the wrong tokenizer)",
                       where, size, (int)n);
    if (vocab_init(v, n, err)) return err->code;
    int rc = llama2c_tokens(data, size, where, v, err);
    if (!rc) {
        v->unk = v->types[0] == VOCAB_UNKNOWN ? 0 : -1;
        v->bos = n > 1 ? 1 : -1;
        v->eos = n > 2 ? 2 : -1;
        rc = vocab_finish(v, where, err);
    }
    if (rc) vocab_free(v);
    return rc;
}

int vocab_load_llama2c(const char *path, int32_t n, kv_vocab *v, kv_err *err)
{
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->unk = -1;
    FILE *f = kv_input_fopen(path, err);
    if (!f) return err->code;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
        (uint64_t)st.st_size > SIZE_MAX - 1) {
        fclose(f);
        return kv_fail(err, KV_EINPUT, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    unsigned char *data = malloc(size + 1);
    if (!data) {
        fclose(f);
        return kv_fail(err, KV_EFAIL, "%s: out of memory reading %zu bytes", path, size);
    }
    size_t got = fread(data, 1, size, f);
    int bad = ferror(f) ? errno : 0;
    fclose(f);
    int rc;
    if (got != size || bad)
        rc = kv_fail(err, KV_EFAIL, "%s: cannot read: %s", path, bad ? strerror(bad) : "short read");
    else
        rc = vocab_load_llama2c_buf(data, size, path, n, v, err);
    free(data);
    return rc;
}
