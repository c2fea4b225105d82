/* pretok: the pre-tokenizer of a byte-level BPE tokenizer, a sequence of
 * split regexes run on PCRE2 (UTF and UCP mode, JIT-compiled), as a Hugging
 * Face `Split` pre-tokenizer does it: each regex cuts every piece the previous
 * one made into its matches and the text between them (the gaps), in order;
 * behaviour Isolated keeps both, Removed drops the matches (with invert: drops
 * the gaps, keeping the matches).
 *
 * GGUF names the pre-tokenizer (tokenizer.ggml.pre) instead of storing the
 * regexes: pretok_named maps the names in use to their regexes and refuses
 * unknown names by name. */
#ifndef KV_PRETOK_H
#define KV_PRETOK_H

#include <stddef.h>

#include "core/kv_error.h"

#define PRETOK_MAX 8 /* regexes in one sequence */

typedef struct pretok pretok;

/* What the Hugging Face tokenizer a GGUF pre-tokenizer name stands for also
 * does, which GGUF does not store: Qwen 2's NFC normaliser, Llama 3's
 * ignore_merges (a piece that is itself a token is that token). */
enum { PRETOK_NFC = 1, PRETOK_IGNORE_MERGES = 2 };

/* The regexes of GGUF's tokenizer.ggml.pre `name` ("default" and "gpt2":
 * GPT-2's) and in *opts its PRETOK_* options. KV_EINPUT naming it when unknown. */
int pretok_named(pretok **p, const char *name, int *opts, const char *where, kv_err *err);

/* What a split keeps. */
typedef enum {
    PRETOK_ISOLATED,     /* the matches and the gaps (Split Isolated, invert or not) */
    PRETOK_KEEP_MATCHES, /* the matches only (Split Removed with invert) */
    PRETOK_KEEP_GAPS,    /* the gaps only (Split Removed) */
} pretok_mode;

/* The same, keeping what mode says. */
int pretok_append_mode(pretok **p, const char *pattern, pretok_mode mode, const char *where, kv_err *err);

/* Appends GPT-2's regex (a ByteLevel pre-tokenizer with use_regex). */
int pretok_append_bytelevel(pretok **p, const char *where, kv_err *err);

void pretok_free(pretok *p);

/* Called for each piece [start, end) of the text, in order; non-zero stops. */
typedef int (*pretok_fn)(void *ctx, size_t start, size_t end);

/* Splits text[0..len) (valid UTF-8) into pieces. With no regexes (p NULL)
 * the whole text is one piece. Returns fn's non-zero value, or KV_EFAIL
 * (in err) when PCRE2 fails. */
int pretok_split(const pretok *p, const char *text, size_t len, pretok_fn fn, void *ctx, kv_err *err);

#endif
