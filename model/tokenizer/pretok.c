/* pretok: split regexes on PCRE2 (see pretok.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/tokenizer/pretok.h"

#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pretok {
    int n;
    pcre2_code *re[PRETOK_MAX];
    pretok_mode mode[PRETOK_MAX];
    char *src[PRETOK_MAX]; /* the patterns as written, and where they came from: for messages */
    char *where;
};

/* The contractions, letters, digits, other, newline and space alternatives
 * of the GPT-4 style regexes, written once. */
#define CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define TAIL " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" TAIL;
static const char QWEN2[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|" TAIL;
static const char GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" CONTRACTIONS "?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" CONTRACTIONS "?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char DSV3_CJK[] = "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+";
static const char DSV3_REST[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
    const char *name;
    const char *re[PRETOK_MAX];
    int opts; /* PRETOK_NFC | PRETOK_IGNORE_MERGES: what the model's tokenizer.json also does */
} named_pretok;

/* GGUF's tokenizer.ggml.pre names (as llama.cpp's converter writes them). */
static const named_pretok NAMED[] = {
    {"default", {GPT2}, 0},
    {"gpt2", {GPT2}, 0},
    {"gpt-2", {GPT2}, 0},
    {"llama-bpe", {LLAMA3}, PRETOK_IGNORE_MERGES},
    {"llama3", {LLAMA3}, PRETOK_IGNORE_MERGES},
    {"dbrx", {LLAMA3}, 0},
    {"smaug-bpe", {LLAMA3}, 0},
    {"qwen2", {QWEN2}, PRETOK_NFC},
    {"stablelm2", {QWEN2}, 0},
    {"deepseek-v3", {"\\p{N}{1,3}", DSV3_CJK, DSV3_REST}, 0},
    {"gpt-4o", {GPT4O}, 0},
    {"olmo", {GPT2}, 0},
    {"smollm", {"\\p{N}", GPT2}, 0}, /* SmolLM2: every digit its own piece, then GPT-2's split */
    {"mpt", {GPT2}, 0},
};
enum { N_NAMED = sizeof NAMED / sizeof NAMED[0] };

void pretok_free(pretok *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]), free(p->src[i]);
    free(p->where);
    free(p);
}

/* Appends one pattern to *p (created when NULL): a Sequence of Splits. */
static int pretok_append(pretok **p, const char *pattern, const char *where, kv_err *err)
{
    return pretok_append_mode(p, pattern, PRETOK_ISOLATED, where, err);
}

/* Unicode's White_Space, the set \s means in the Rust regex crate that
 * Hugging Face tokenizers use; PCRE2's \s also takes U+180E. */
#define WHITE_SPACE "\\t\\n\\x0b\\f\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}" \
                    "\\x{202f}\\x{205f}\\x{3000}"

/* pattern with \s written as WHITE_SPACE (in a class: its members) and \S
 * outside a class as its complement; malloc'd, NULL when out of memory. */
static char *rust_spaces(const char *pattern)
{
    size_t n = strlen(pattern), cap = n * (sizeof WHITE_SPACE + 4) + 1, k = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = pattern[i];
        if (c == '\\' && pattern[i + 1] == 'Q') { /* \Q...\E: a literal, copied as it is */
            const char *end = strstr(pattern + i, "\\E");
            size_t m = end ? (size_t)(end - pattern) + 2 - i : n - i;
            memcpy(out + k, pattern + i, m);
            k += m;
            i += m - 1;
            continue;
        }
        if (c == '\\' && i + 1 < n) {
            char e = pattern[++i];
            const char *rep = e == 's' ? (in_class ? WHITE_SPACE : "[" WHITE_SPACE "]")
                            : e == 'S' && !in_class ? "[^" WHITE_SPACE "]" : NULL;
            if (rep) k += (size_t)snprintf(out + k, cap - k, "%s", rep);
            else out[k++] = '\\', out[k++] = e;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out[k++] = c;
            if (pattern[i + 1] == '^') out[k++] = pattern[++i];
            if (pattern[i + 1] == ']') out[k++] = pattern[++i]; /* a leading ']' is a member */
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out[k++] = c;
    }
    out[k] = '\0';
    return out;
}

int pretok_append_mode(pretok **p, const char *pattern, pretok_mode mode, const char *where, kv_err *err)
{
    if (!*p && !(*p = calloc(1, sizeof **p))) return kv_fail(err, KV_EFAIL, "%s: out of memory", where);
    if ((*p)->n == PRETOK_MAX)
        return kv_fail(err, KV_EINPUT, "%s: more than %d split regexes in the pre-tokenizer", where, PRETOK_MAX);
    int code;
    PCRE2_SIZE off;
    char *rewritten = rust_spaces(pattern);
    if (!rewritten) return kv_fail(err, KV_EFAIL, "%s: out of memory", where);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                                   &off, NULL);
    free(rewritten);
    if (!re) { /* the message names the pattern as written: compile that for the offset */
        pcre2_code *orig = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                         &code, &off, NULL);
        pcre2_code_free(orig);
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return kv_fail(err, KV_EINPUT, "%s: pre-tokenizer regex '%.80s' rejected by PCRE2 at offset %zu: %s",
                       where, pattern, (size_t)off, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT (unsupported CPU) it still matches */
    char *src = strdup(pattern);
    if (!src || (!(*p)->where && !((*p)->where = strdup(where)))) {
        free(src);
        pcre2_code_free(re);
        return kv_fail(err, KV_EFAIL, "%s: out of memory", where);
    }
    (*p)->src[(*p)->n] = src;
    (*p)->mode[(*p)->n] = mode;
    (*p)->re[(*p)->n++] = re;
    return KV_OK;
}

int pretok_append_bytelevel(pretok **p, const char *where, kv_err *err)
{
    return pretok_append(p, GPT2, where, err);
}

/* Compiles n patterns (PCRE2 syntax); `where` names the source in messages.
 * A pattern PCRE2 rejects is KV_EINPUT naming the pattern and the offset. */
static int pretok_compile(pretok **p, const char *const *patterns, int n, const char *where, kv_err *err)
{
    *p = NULL;
    for (int i = 0; i < n; i++) {
        int rc = pretok_append(p, patterns[i], where, err);
        if (rc) {
            pretok_free(*p);
            *p = NULL;
            return rc;
        }
    }
    return KV_OK;
}

int pretok_named(pretok **p, const char *name, int *opts, const char *where, kv_err *err)
{
    *p = NULL;
    *opts = 0;
    for (int i = 0; i < N_NAMED; i++) {
        if (strcmp(NAMED[i].name, name) != 0) continue;
        *opts = NAMED[i].opts;
        int n = 0;
        while (n < PRETOK_MAX && NAMED[i].re[n]) n++;
        return pretok_compile(p, NAMED[i].re, n, where, err);
    }
    return kv_fail(err, KV_EINPUT, "%s: pre-tokenizer '%.64s' (tokenizer.ggml.pre) is not one kvtrace knows", where,
                   name);
}

typedef struct {
    const pretok *p;
    const char *text;
    pcre2_match_data *md;
    pretok_fn fn;
    void *ctx;
    kv_err *err;
} split_state;

/* Length of the UTF-8 character at s (valid text). */
static size_t char_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

/* A failed match: PCRE2's limits (a regex that backtracks without end) are the file's fault. */
static int match_error(const split_state *s, int level, size_t at, int m)
{
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(m, msg, sizeof msg);
    const bool limit = m == PCRE2_ERROR_MATCHLIMIT || m == PCRE2_ERROR_DEPTHLIMIT || m == PCRE2_ERROR_HEAPLIMIT ||
                       m == PCRE2_ERROR_JIT_STACKLIMIT;
    return kv_fail(s->err, limit ? KV_EINPUT : KV_EFAIL, "%s: pre-tokenizer regex '%.80s' failed at byte %zu of "
                   "the text: %s%s", s->p->where, s->p->src[level], at, (const char *)msg,
                   limit ? " (the regex backtracks too much)" : "");
}

static int split_level(split_state *s, int level, size_t start, size_t end)
{
    if (start == end) return 0;
    if (level == s->p->n) return s->fn(s->ctx, start, end);
    const PCRE2_SPTR sub = (PCRE2_SPTR)s->text + start;
    size_t len = end - start, at = 0, gap = 0;
    const bool keep_gaps = s->p->mode[level] != PRETOK_KEEP_MATCHES;
    const bool keep_matches = s->p->mode[level] != PRETOK_KEEP_GAPS;
    while (at < len) {
        int m = pcre2_match(s->p->re[level], sub, len, at, PCRE2_NO_UTF_CHECK, s->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) return match_error(s, level, start + at, m);
        /* copied out: the deeper levels reuse the match data */
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        const size_t m0 = ov[0], m1 = ov[1];
        if (m1 == m0) { /* an empty match cuts nothing: step one character */
            at = m0 + char_len(sub[m0]);
            continue;
        }
        int rc = keep_gaps ? split_level(s, level + 1, start + gap, start + m0) : 0;
        if (!rc && keep_matches) rc = split_level(s, level + 1, start + m0, start + m1);
        if (rc) return rc;
        gap = at = m1;
    }
    return keep_gaps ? split_level(s, level + 1, start + gap, end) : 0;
}

int pretok_split(const pretok *p, const char *text, size_t len, pretok_fn fn, void *ctx, kv_err *err)
{
    if (!p || p->n == 0) return len ? fn(ctx, 0, len) : 0;
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md) return kv_fail(err, KV_EFAIL, "out of memory");
    split_state s = {p, text, md, fn, ctx, err};
    int rc = split_level(&s, 0, 0, len);
    pcre2_match_data_free(md);
    return rc;
}
