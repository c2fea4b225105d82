/* token_file: reads `--tokens` files (format in token_file.h).
 *
 * A hand-written scanner rather than a JSON library: the accepted language is
 * tiny, and every rejection must name the line and column of the offending
 * byte. Ids are accumulated with saturation, so an id of any length is
 * reported (not wrapped) as outside the vocabulary. */
#include "core/fileopen.h"
#include "model/tokenizer/token_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *where;
    const unsigned char *s;
    size_t len, pos;
    int64_t limit; /* ids must be < limit: min(vocab_size, 2^31) */
    int64_t vocab_size;
    int32_t *ids;
    int64_t n, cap;
    kv_err *err;
} tf_parser;

#define TF_FORMS "token ids separated by whitespace or commas, or one JSON array of them"

static bool tf_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool tf_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static void tf_skip_space(tf_parser *p)
{
    while (p->pos < p->len && tf_space(p->s[p->pos])) p->pos++;
}

/* "line L, column C" of byte offset pos (1-based, columns in bytes). */
static void tf_line_col(const tf_parser *p, size_t pos, long long *line, long long *col)
{
    size_t start = 0;
    *line = 1;
    for (size_t i = 0; i < pos && i < p->len; i++)
        if (p->s[i] == '\n') (*line)++, start = i + 1;
    *col = (long long)(pos - start) + 1;
}

/* Rejects the byte at p->pos (or the end of the file); `expected` says what
 * could have stood there. */
static int tf_unexpected(const tf_parser *p, const char *expected)
{
    long long line, col;
    tf_line_col(p, p->pos, &line, &col);
    char what[32];
    if (p->pos >= p->len)
        snprintf(what, sizeof what, "end of file");
    else if (p->s[p->pos] >= 0x21 && p->s[p->pos] < 0x7f)
        snprintf(what, sizeof what, "'%c'", p->s[p->pos]);
    else
        snprintf(what, sizeof what, "byte 0x%02X", p->s[p->pos]);
    /* the reminder of the format helps when nothing was understood yet */
    return kv_fail(p->err, KV_EINPUT, "%s: line %lld, column %lld: unexpected %s, expected %s%s%s%s",
                   p->where, line, col, what, expected, p->n ? "" : " (", p->n ? "" : TF_FORMS,
                   p->n ? "" : ")");
}

static int tf_push(tf_parser *p, int32_t id)
{
    if (p->n == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 256;
        int32_t *grown = realloc(p->ids, (size_t)cap * sizeof *grown);
        if (!grown)
            return kv_fail(p->err, KV_EFAIL, "%s: out of memory after %lld token ids", p->where,
                           (long long)p->n);
        p->ids = grown, p->cap = cap;
    }
    p->ids[p->n++] = id;
    return KV_OK;
}

/* One id at p->pos: '-'? digits, followed by a byte in `ends` or the end. */
static int tf_id(tf_parser *p, const char *ends)
{
    size_t start = p->pos;
    bool neg = p->s[p->pos] == '-';
    if (neg) p->pos++;
    if (p->pos >= p->len || !tf_digit(p->s[p->pos])) return tf_unexpected(p, "a digit");
    uint64_t value = 0;
    bool big = false;
    for (; p->pos < p->len && tf_digit(p->s[p->pos]); p->pos++) {
        value = value * 10 + (p->s[p->pos] - '0');
        if (value > (uint64_t)INT64_MAX / 10) big = true, value = (uint64_t)INT64_MAX / 10;
    }
    if (p->pos < p->len && !tf_space(p->s[p->pos]) && !(p->s[p->pos] && strchr(ends, p->s[p->pos])))
        return tf_unexpected(p, strchr(ends, ']') ? "',' or ']' after a token id"
                                                  : "whitespace or ',' after a token id");
    if (big || (neg && value) || (int64_t)value >= p->limit) {
        int shown = p->pos - start > 32 ? 32 : (int)(p->pos - start);
        bool in_vocab = !big && !neg && (int64_t)value < p->vocab_size; /* but not in int32 */
        return kv_fail(p->err, KV_EINPUT, "%s: token id %.*s%s at position %lld %s [0, %lld)",
                       p->where, shown, (const char *)p->s + start,
                       p->pos - start > 32 ? "..." : "", (long long)p->n,
                       in_vocab ? "is outside the 32-bit id range" : "is outside the vocabulary",
                       in_vocab ? (long long)1 << 31 : (long long)p->vocab_size);
    }
    return tf_push(p, (int32_t)value);
}

static int tf_empty_field(tf_parser *p)
{
    long long line, col;
    tf_line_col(p, p->pos, &line, &col);
    return kv_fail(p->err, KV_EINPUT,
                   "%s: line %lld, column %lld: empty field (a comma must stand between two token "
                   "ids)",
                   p->where, line, col);
}

/* Ids separated by whitespace and/or single commas. */
static int tf_plain(tf_parser *p)
{
    bool id_since_comma = false;
    size_t last_comma = 0;
    for (;;) {
        tf_skip_space(p);
        if (p->pos >= p->len) break;
        unsigned char c = p->s[p->pos];
        if (c == ',') {
            if (!id_since_comma) return tf_empty_field(p);
            id_since_comma = false;
            last_comma = p->pos++;
        } else if (c == '-' || tf_digit(c)) {
            if (tf_id(p, ",")) return p->err->code;
            id_since_comma = true;
        } else {
            return tf_unexpected(p, "a token id");
        }
    }
    if (p->n > 0 && !id_since_comma) {
        p->pos = last_comma; /* a trailing comma */
        return tf_empty_field(p);
    }
    return KV_OK;
}

/* One JSON array of integers, at p->pos == '['. */
static int tf_json(tf_parser *p)
{
    p->pos++;
    tf_skip_space(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
    } else {
        for (;;) {
            tf_skip_space(p);
            unsigned char c = p->pos < p->len ? p->s[p->pos] : 0;
            if (p->pos >= p->len || (c != '-' && !tf_digit(c))) return tf_unexpected(p, "a token id");
            if (tf_id(p, ",]")) return p->err->code;
            tf_skip_space(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == ']') {
                p->pos++;
                break;
            }
            return tf_unexpected(p, "',' or ']'");
        }
    }
    tf_skip_space(p);
    if (p->pos < p->len) return tf_unexpected(p, "nothing after the JSON array");
    return KV_OK;
}

int token_file_parse(const char *where, const char *buf, size_t len, int64_t vocab_size,
                     int32_t **ids, int64_t *n, kv_err *err)
{
    *ids = NULL;
    *n = 0;
    if (vocab_size <= 0)
        return kv_fail(err, KV_EFAIL, "%s: vocabulary size %lld is not positive", where,
                       (long long)vocab_size);
    tf_parser p = {.where = where, .s = (const unsigned char *)buf, .len = len,
                   .limit = vocab_size < ((int64_t)1 << 31) ? vocab_size : ((int64_t)1 << 31),
                   .vocab_size = vocab_size, .err = err};
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0) p.pos = 3;
    tf_skip_space(&p);
    int rc = p.pos < len && p.s[p.pos] == '[' ? tf_json(&p) : tf_plain(&p);
    if (!rc && p.n == 0)
        rc = kv_fail(err, KV_EINPUT, "%s: no token ids (%s)", where,
                     len == 0 ? "the file is empty" : "expected " TF_FORMS);
    if (rc) {
        free(p.ids);
        return rc;
    }
    *ids = p.ids;
    *n = p.n;
    return KV_OK;
}

/* The whole file, malloc'd (works for pipes too: grows geometrically). */
static int tf_slurp(const char *path, char **data, size_t *size, kv_err *err)
{
    FILE *f = kv_input_fopen(path, err);
    if (!f) return err->code;
    size_t cap = 4096, used = 0;
    char *buf = malloc(cap);
    while (buf) {
        used += fread(buf + used, 1, cap - used, f);
        if (used < cap) break;
        char *grown = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (!grown) free(buf);
        buf = grown, cap *= 2;
    }
    int bad = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf) return kv_fail(err, KV_EFAIL, "%s: out of memory reading the file", path);
    if (bad) {
        free(buf);
        return kv_fail(err, KV_EFAIL, "%s: cannot read: %s", path, strerror(bad));
    }
    *data = buf;
    *size = used;
    return KV_OK;
}

int token_file_read(const char *path, int64_t vocab_size, int32_t **ids, int64_t *n, kv_err *err)
{
    *ids = NULL;
    *n = 0;
    char *data = NULL;
    size_t size = 0;
    if (tf_slurp(path, &data, &size, err)) return err->code;
    int rc = token_file_parse(path, data, size, vocab_size, ids, n, err);
    free(data);
    return rc;
}
