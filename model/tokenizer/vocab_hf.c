/* vocab_hf: a Hugging Face tokenizer.json (the `tokenizers` library's
 * format) into kv_vocab (see hf.h), parsed with jansson.
 *
 * Only BPE models are read. A ByteLevel pre-tokenizer (Llama 3, Qwen: GPT-2
 * style byte-level BPE) gives VOCAB_BYTE_BPE, its encoder built by bpe_hf.c. Otherwise the vocabulary is
 * SentencePiece-style ("▁" for spaces, "<0xHH>" byte fallback: Llama 2,
 * Mistral): VOCAB_SPM with its merges by rank, added tokens, normaliser,
 * pre-tokenizer, template and decoder in v->hf (spm_hf.h), encoded by
 * tokenizer.c as the `tokenizers` library's BPE model does. Special added tokens are
 * control tokens, other added tokens user tokens; ids the file does not name
 * (vocabularies padded to a multiple of 64) are unused empty pieces. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileopen.h"
#include "model/formats/hf.h"
#include "model/tokenizer/bpe_hf.h"
#include "model/tokenizer/spm_hf.h"
#include "model/tokenizer/tokjson_check.h"

#define NO_SCORE 0.0f /* scores are unused: merges go by rank (spm_hf.h) */

typedef struct {
    const char *path;
    kv_vocab *v;
    kv_err *err;
} tok_ctx;

/* True if `pt` (a pre_tokenizer, maybe a Sequence) contains ByteLevel. */
static bool has_byte_level(json_t *pt)
{
    if (!json_is_object(pt)) return false;
    json_t *type = json_object_get(pt, "type");
    if (json_is_string(type) && strcmp(json_string_value(type), "ByteLevel") == 0) return true;
    json_t *seq = json_object_get(pt, "pretokenizers");
    size_t i;
    json_t *x;
    json_array_foreach(seq, i, x) if (has_byte_level(x)) return true;
    return false;
}

/* Token `id` from the file: in range, not set twice with different text. */
static int set_token(const tok_ctx *x, json_int_t id, const char *piece, uint8_t type)
{
    if (id < 0 || id >= x->v->n)
        return kv_fail(x->err, KV_EINPUT, "%s: token '%.64s' has id %" PRId64 ", outside the "
                       "model's vocabulary [0, %" PRId32 ")", x->path, piece, (int64_t)id, x->v->n);
    const char *had = x->v->pieces[id]; /* an added token may repeat its vocab entry */
    if (had && strcmp(had, piece) != 0)
        return kv_fail(x->err, KV_EINPUT, "%s: id %" PRId64 " is given to two tokens, '%.64s' and "
                       "'%.64s'", x->path, (int64_t)id, had, piece);
    return vocab_set(x->v, (int32_t)id, piece, strlen(piece), NO_SCORE, type, x->err);
}

static int read_pieces(const tok_ctx *x, json_t *model, json_t *added, bool spm)
{
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return kv_fail(x->err, KV_EINPUT, "%s: model.vocab is not an object", x->path);
    const char *piece;
    json_t *id;
    int rc = KV_OK;
    json_object_foreach(vocab, piece, id) {
        if (!json_is_integer(id))
            return kv_fail(x->err, KV_EINPUT, "%s: the id of '%.64s' is not an integer", x->path,
                           piece);
        uint8_t type = spm && strlen(piece) == 6 && strncmp(piece, "<0x", 3) == 0 ? VOCAB_BYTE
                                                                                  : VOCAB_NORMAL;
        if ((rc = set_token(x, json_integer_value(id), piece, type))) return rc;
    }
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *aid = json_object_get(a, "id"), *text = json_object_get(a, "content");
        if (!json_is_integer(aid) || !json_is_string(text))
            return kv_fail(x->err, KV_EINPUT, "%s: added_tokens[%zu] has no integer id and "
                           "string content", x->path, i);
        bool special = json_is_true(json_object_get(a, "special"));
        rc = set_token(x, json_integer_value(aid), json_string_value(text),
                       special ? VOCAB_CONTROL : VOCAB_USER);
        if (rc) return rc;
    }
    for (int32_t t = 0; t < x->v->n && !rc; t++)
        if (!x->v->pieces[t]) rc = vocab_set(x->v, t, "", 0, NO_SCORE, VOCAB_UNUSED, x->err);
    return rc;
}

static int32_t find_str(const kv_vocab *v, const char *s)
{
    return vocab_find(v, s, strlen(s));
}

/* One merge "a b" or ["a", "b"] into a (NUL-terminated copies in buf) and b. */
static bool merge_pair(json_t *mg, char *buf, size_t cap, const char **a, const char **b)
{
    *a = *b = NULL;
    if (json_is_string(mg)) {
        const char *s = json_string_value(mg), *sp = strchr(s, ' ');
        if (sp && (size_t)(sp - s) < cap) {
            memcpy(buf, s, (size_t)(sp - s));
            buf[sp - s] = '\0';
            *a = buf, *b = sp + 1;
        }
    } else if (json_is_array(mg) && json_array_size(mg) == 2) {
        *a = json_string_value(json_array_get(mg, 0));
        *b = json_string_value(json_array_get(mg, 1));
    }
    return *a && *b;
}

/* The merges by rank, as the `tokenizers` library's BPE model applies them:
 * merge r joins the pair (a, b) with priority r (lower first). Every piece
 * named must be in the vocabulary, and so must the piece a merge makes. */
static int read_merges(const tok_ctx *x, json_t *merges, spm_hf *h)
{
    if (!json_is_array(merges))
        return kv_fail(x->err, KV_EINPUT, "%s: model.merges is missing or not an array", x->path);
    size_t r;
    json_t *mg;
    char buf[1024], joined[2048];
    json_array_foreach(merges, r, mg) {
        const char *a, *b;
        if (!merge_pair(mg, buf, sizeof buf, &a, &b) || r > INT32_MAX)
            return kv_fail(x->err, KV_EINPUT, "%s: merges[%zu] is not a pair of pieces", x->path, r);
        int32_t ia = find_str(x->v, a), ib = find_str(x->v, b);
        int n = snprintf(joined, sizeof joined, "%s%s", a, b);
        int32_t res = n > 0 && (size_t)n < sizeof joined ? vocab_find(x->v, joined, (size_t)n) : -1;
        if (ia < 0 || ib < 0 || res < 0)
            return kv_fail(x->err, KV_EINPUT, "%s: merges[%zu] ('%.64s' '%.64s') names a piece the "
                           "vocabulary does not have", x->path, r, a, b);
        if (spm_hf_add_merge(h, ia, ib, (int32_t)r, x->err)) return KV_EFAIL;
    }
    return KV_OK;
}

static const char SPACE[] = "\xe2\x96\x81"; /* U+2581 "▁" */

static bool is_type(json_t *o, const char *type)
{
    json_t *t = json_object_get(o, "type");
    return json_is_string(t) && strcmp(json_string_value(t), type) == 0;
}

static bool str_is(json_t *o, const char *key, const char *want)
{
    json_t *s = json_object_get(o, key);
    return json_is_string(s) && strcmp(json_string_value(s), want) == 0;
}

/* Replace {"pattern": {"String": from}, "content": to}. */
static bool replace_is(json_t *o, const char *from, const char *to)
{
    return is_type(o, "Replace") && str_is(json_object_get(o, "pattern"), "String", from) &&
           str_is(o, "content", to);
}

static int unsupported(const tok_ctx *x, const char *what, json_t *o)
{
    json_t *t = json_object_get(o, "type");
    return kv_fail(x->err, KV_EINPUT, "%s: %s %s%.64s%s is not supported for a SentencePiece-style BPE "
                   "(supported: docs/tokenize.md)", x->path, what, json_is_string(t) ? "'" : "",
                   json_is_string(t) ? json_string_value(t) : "of this form", json_is_string(t) ? "'" : "");
}

/* normalizer: none, Prepend "▁", Replace " " -> "▁", or a Sequence of those. */
static int read_normalizer(const tok_ctx *x, json_t *n, spm_hf *h)
{
    if (json_is_null(n) || !n) return KV_OK;
    if (is_type(n, "Sequence")) {
        size_t i;
        json_t *e;
        int rc = KV_OK;
        json_array_foreach(json_object_get(n, "normalizers"), i, e)
            if (!rc) rc = read_normalizer(x, e, h);
        return rc;
    }
    if (is_type(n, "Prepend") && str_is(n, "prepend", SPACE) && !h->replace_space) h->norm_prepend = true;
    else if (replace_is(n, " ", SPACE)) h->replace_space = true;
    else return unsupported(x, "normalizer", n);
    return KV_OK;
}

/* pre_tokenizer: none, or Metaspace ("▁", prepend_scheme or add_prefix_space, split). */
static int read_pretok(const tok_ctx *x, json_t *p, spm_hf *h)
{
    if (json_is_null(p) || !p) return KV_OK;
    if (!is_type(p, "Metaspace") || !str_is(p, "replacement", SPACE) || h->norm_prepend)
        return unsupported(x, "pre_tokenizer", p);
    h->replace_space = true;
    json_t *scheme = json_object_get(p, "prepend_scheme"), *split = json_object_get(p, "split");
    h->prepend = str_is(p, "prepend_scheme", "first") ? SPM_PREPEND_FIRST
               : str_is(p, "prepend_scheme", "never") ? SPM_PREPEND_NEVER
               : json_is_string(scheme) || json_is_true(json_object_get(p, "add_prefix_space"))
                   ? SPM_PREPEND_ALWAYS : SPM_PREPEND_NEVER;
    if (json_is_string(scheme) && !str_is(p, "prepend_scheme", "always") && h->prepend == SPM_PREPEND_ALWAYS)
        return unsupported(x, "pre_tokenizer", p);
    h->split = !split || json_is_true(split);
    return KV_OK;
}

/* The special ids of a TemplateProcessing's "single" before and after $A. */
static int read_template(const tok_ctx *x, json_t *pp, spm_hf *h)
{
    if (json_is_null(pp) || !pp) return KV_OK;
    if (!is_type(pp, "TemplateProcessing")) return unsupported(x, "post_processor", pp);
    json_t *specials = json_object_get(pp, "special_tokens"), *e;
    bool after = false;
    size_t i;
    json_array_foreach(json_object_get(pp, "single"), i, e) {
        json_t *sp = json_object_get(e, "SpecialToken");
        if (json_object_get(e, "Sequence")) {
            after = true;
            continue;
        }
        json_t *ids = json_object_get(json_object_get(specials, json_string_value(json_object_get(sp, "id"))
                                                      ? json_string_value(json_object_get(sp, "id")) : ""),
                                      "ids");
        size_t k;
        json_t *id;
        json_array_foreach(ids, k, id) {
            int *n = after ? &h->n_suffix : &h->n_prefix;
            json_int_t v = json_integer_value(id);
            if (!json_is_integer(id) || v < 0 || v >= x->v->n || *n == SPM_HF_TEMPLATE_MAX)
                return kv_fail(x->err, KV_EINPUT, "%s: post_processor: the special token ids of the "
                               "template are not ids of the vocabulary", x->path);
            (after ? h->suffix : h->prefix)[(*n)++] = (int32_t)v;
        }
        if (!json_is_array(ids)) return unsupported(x, "post_processor", pp);
    }
    return KV_OK;
}

/* decoder: Sequence [Replace "▁" -> " ", ByteFallback, Fuse, Strip " " (n, 0)], or Metaspace. */
static int read_decoder(const tok_ctx *x, json_t *d, spm_hf *h)
{
    if (json_is_null(d) || !d) return KV_OK;
    if (is_type(d, "Metaspace")) {
        h->strip_first_token = !str_is(d, "prepend_scheme", "never");
        return KV_OK;
    }
    json_t *e;
    size_t i;
    bool ok = is_type(d, "Sequence");
    json_array_foreach(json_object_get(d, "decoders"), i, e) {
        json_t *start = json_object_get(e, "start");
        if (is_type(e, "Strip") && str_is(e, "content", " ") && json_is_integer(start) &&
            json_integer_value(start) >= 0 && json_integer_value(start) < 64 &&
            json_integer_value(json_object_get(e, "stop")) == 0)
            h->strip_start = (int)json_integer_value(start);
        else if (is_type(e, "ByteFallback"))
            h->byte_fallback = true;
        else if (!replace_is(e, SPACE, " ") && !is_type(e, "Fuse"))
            ok = false;
    }
    return ok ? KV_OK : unsupported(x, "decoder", d);
}

/* Everything of a SentencePiece-style tokenizer.json beyond the pieces. */
static int read_spm_hf(const tok_ctx *x, json_t *root, json_t *model, spm_hf *h)
{
    int rc = read_merges(x, json_object_get(model, "merges"), h);
    if (!rc) rc = read_normalizer(x, json_object_get(root, "normalizer"), h);
    if (!rc) rc = read_pretok(x, json_object_get(root, "pre_tokenizer"), h);
    if (!rc) rc = read_template(x, json_object_get(root, "post_processor"), h);
    if (!rc) rc = read_decoder(x, json_object_get(root, "decoder"), h);
    h->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(root, "added_tokens"), i, a)
        if (!rc) rc = spm_hf_add_token(h, json_string_value(json_object_get(a, "content")),
                                       (int32_t)json_integer_value(json_object_get(a, "id")), x->err);
    spm_hf_finish(h);
    return rc;
}

static void special_ids(kv_vocab *v, json_t *model, bool spm)
{
    v->bos = find_str(v, spm ? "<s>" : "<|begin_of_text|>");
    v->eos = find_str(v, spm ? "</s>" : "<|end_of_text|>");
    if (!spm && v->eos < 0) v->eos = find_str(v, "<|endoftext|>");
    json_t *unk = json_object_get(model, "unk_token");
    v->unk = json_is_string(unk) ? find_str(v, json_string_value(unk)) : -1;
    if (v->unk >= 0) v->types[v->unk] = VOCAB_UNKNOWN;
}

static int read_tokenizer(const tok_ctx *x, json_t *root, bool *has)
{
    json_t *model = json_object_get(root, "model");
    json_t *type = json_object_get(model, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0) return KV_OK;
    bool spm = !has_byte_level(json_object_get(root, "pre_tokenizer"));
    kv_vocab *v = x->v;
    int rc = read_pieces(x, model, json_object_get(root, "added_tokens"), spm);
    if (!rc) rc = vocab_finish(v, x->path, x->err);
    if (!rc && spm) rc = spm_hf_new(&v->hf, x->err);
    if (!rc && spm) rc = read_spm_hf(x, root, model, v->hf);
    if (!rc && !spm) rc = bpe_from_json(root, v, x->path, &v->bpe, x->err);
    if (rc) return rc;
    v->kind = spm ? VOCAB_SPM : VOCAB_BYTE_BPE;
    special_ids(v, model, spm);
    /* add_bos means: apply the post-processor's template (spm_hf.h, bpe.h) */
    v->add_bos = true;
    v->add_space_prefix = false; /* spm_hf's normaliser and pre-tokenizer say it */
    *has = true;
    return KV_OK;
}

/* The vocabulary size a tokenizer.json implies: its largest id + 1. */
static int64_t file_size(json_t *root)
{
    int64_t n = 0;
    const char *k;
    json_t *id, *a;
    json_object_foreach(json_object_get(json_object_get(root, "model"), "vocab"), k, id)
        if (json_is_integer(id) && json_integer_value(id) >= n) n = json_integer_value(id) + 1;
    size_t i;
    json_array_foreach(json_object_get(root, "added_tokens"), i, a) {
        id = json_object_get(a, "id");
        if (json_is_integer(id) && json_integer_value(id) >= n) n = json_integer_value(id) + 1;
    }
    return n > INT32_MAX ? 0 : n;
}

int hf_read_tokenizer(const char *path, int64_t V, kv_vocab *v, bool *has, kv_err *err)
{
    *has = false;
    int rc0 = kv_input_check(path, false, err);
    if (rc0) return rc0;
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return kv_fail(err, KV_EINPUT, "%s: malformed JSON at line %d: %.200s", path, je.line,
                       je.text);
    tok_ctx x = {path, v, err};
    int rc = tokjson_check(root, path, err); /* the shape, once: the readers trust it */
    if (!rc && V <= 0 && (V = file_size(root)) <= 0) rc = kv_fail(err, KV_EINPUT, "%s: names no tokens", path);
    if (!rc) rc = vocab_init(v, (int32_t)V, err);
    if (!rc) rc = read_tokenizer(&x, root, has);
    if (!rc && *has) rc = hf_read_chat(path, v, err);
    if (rc || !*has) vocab_free(v);
    json_decref(root);
    return rc;
}
