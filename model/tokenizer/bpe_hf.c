/* bpe_hf: tokenizer.json into a byte-level bpe_model (see bpe_hf.h). */
#include "model/tokenizer/bpe_hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *path;
    bpe_model *b;
    const kv_vocab *v;
    kv_err *err;
} hf_ctx;

static const char *type_of(json_t *o)
{
    const char *t = json_string_value(json_object_get(o, "type"));
    return t ? t : "";
}

static int unsupported(const hf_ctx *x, const char *what, const char *type)
{
    return kv_fail(x->err, KV_EINPUT, "%s: %s type '%.64s' is not supported", x->path, what, type);
}

/* A Split's pattern: {"Regex": R} or {"String": S} (a literal). */
static int split_pattern(const hf_ctx *x, json_t *pt, pretok **p)
{
    json_t *pat = json_object_get(pt, "pattern");
    const char *re = json_string_value(json_object_get(pat, "Regex"));
    const char *lit = json_string_value(json_object_get(pat, "String"));
    const char *beh = json_string_value(json_object_get(pt, "behavior"));
    if (!re && !lit) return kv_fail(x->err, KV_EINPUT, "%s: a Split pre-tokenizer has no pattern", x->path);
    const bool invert = json_is_true(json_object_get(pt, "invert"));
    pretok_mode mode;
    if (beh && strcmp(beh, "Isolated") == 0) mode = PRETOK_ISOLATED;
    else if (beh && strcmp(beh, "Removed") == 0) mode = invert ? PRETOK_KEEP_MATCHES : PRETOK_KEEP_GAPS;
    else return unsupported(x, "Split behavior", beh ? beh : "(none)");
    if (re) return pretok_append_mode(p, re, mode, x->path, x->err);
    size_t n = strlen(lit);
    char *q = malloc(n + 8);
    if (!q) return kv_fail(x->err, KV_EFAIL, "out of memory");
    snprintf(q, n + 8, "\\Q%s\\E", lit);
    int rc = strstr(lit, "\\E") ? unsupported(x, "Split string", lit)
                                 : pretok_append_mode(p, q, mode, x->path, x->err);
    free(q);
    return rc;
}

static int read_pretok(const hf_ctx *x, json_t *pt, pretok **p)
{
    const char *t = type_of(pt);
    if (strcmp(t, "Sequence") == 0) {
        size_t i;
        json_t *sub;
        json_array_foreach(json_object_get(pt, "pretokenizers"), i, sub) {
            int rc = read_pretok(x, sub, p);
            if (rc) return rc;
        }
        return KV_OK;
    }
    if (strcmp(t, "Split") == 0) return split_pattern(x, pt, p);
    if (strcmp(t, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(pt, "add_prefix_space")))
            return unsupported(x, "pre-tokenizer", "ByteLevel with add_prefix_space");
        json_t *use = json_object_get(pt, "use_regex");
        return use && !json_is_true(use) ? KV_OK : pretok_append_bytelevel(p, x->path, x->err);
    }
    return unsupported(x, "pre-tokenizer", t);
}

static int read_normalizer(const hf_ctx *x, json_t *n, bool *nfc)
{
    if (!n || json_is_null(n)) return KV_OK;
    const char *t = type_of(n);
    if (strcmp(t, "NFC") == 0) {
        *nfc = true;
        return KV_OK;
    }
    if (strcmp(t, "Sequence") != 0) return unsupported(x, "normalizer", t);
    size_t i;
    json_t *sub;
    json_array_foreach(json_object_get(n, "normalizers"), i, sub) {
        int rc = read_normalizer(x, sub, nfc);
        if (rc) return rc;
    }
    return KV_OK;
}

/* One side of a TemplateProcessing "single" template (before or after "A"). */
static int read_template(const hf_ctx *x, json_t *pp)
{
    int32_t ids[2][BPE_TEMPLATE_MAX];
    int n[2] = {0, 0}, side = 0;
    json_t *specials = json_object_get(pp, "special_tokens"), *item;
    size_t i;
    json_array_foreach(json_object_get(pp, "single"), i, item) {
        if (json_object_get(item, "Sequence")) {
            side = 1;
            continue;
        }
        const char *name = json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
        json_t *tid = json_object_get(json_object_get(specials, name ? name : ""), "ids"), *id;
        if (!name || !json_is_array(tid))
            return kv_fail(x->err, KV_EINPUT, "%s: post_processor.single[%zu] names no special token", x->path, i);
        size_t k;
        json_array_foreach(tid, k, id) {
            if (n[side] == BPE_TEMPLATE_MAX || !json_is_integer(id))
                return kv_fail(x->err, KV_EINPUT, "%s: post_processor token '%.64s' is not a short id list", x->path,
                               name);
            json_int_t t = json_integer_value(id);
            if (t < 0 || t >= x->v->n || x->v->types[t] == VOCAB_UNUSED)
                return kv_fail(x->err, KV_EINPUT, "%s: post_processor token '%.64s' has id %lld, which no token has",
                               x->path, name, (long long)t);
            ids[side][n[side]++] = (int32_t)t;
        }
    }
    return bpe_set_template(x->b, ids[0], n[0], ids[1], n[1], x->err);
}

/* fn on each member of the Sequence n's list. */
static int each_member(const hf_ctx *x, json_t *n, const char *list, int (*fn)(const hf_ctx *, json_t *))
{
    size_t i;
    json_t *sub;
    json_array_foreach(json_object_get(n, list), i, sub) {
        int rc = fn(x, sub);
        if (rc) return rc;
    }
    return KV_OK;
}

static int read_post(const hf_ctx *x, json_t *pp)
{
    if (!pp || json_is_null(pp)) return KV_OK;
    const char *t = type_of(pp);
    if (strcmp(t, "ByteLevel") == 0) return KV_OK;
    if (strcmp(t, "TemplateProcessing") == 0) return read_template(x, pp);
    if (strcmp(t, "Sequence") != 0) return unsupported(x, "post_processor", t);
    return each_member(x, pp, "processors", read_post);
}

/* The decoder: ByteLevel (or none), alone or in Sequences; decoding is GPT-2's byte map. */
static int read_decoder(const hf_ctx *x, json_t *d)
{
    if (!d || json_is_null(d)) return KV_OK;
    const char *t = type_of(d);
    if (strcmp(t, "ByteLevel") == 0) return KV_OK;
    if (strcmp(t, "Sequence") != 0) return unsupported(x, "decoder", t);
    return each_member(x, d, "decoders", read_decoder);
}

static int read_merges(const hf_ctx *x, json_t *merges)
{
    if (!json_is_array(merges)) return kv_fail(x->err, KV_EINPUT, "%s: model.merges is missing", x->path);
    size_t r;
    json_t *mg;
    json_array_foreach(merges, r, mg) {
        const char *a = NULL, *c = NULL;
        char *dup = NULL;
        if (json_is_string(mg) && (dup = strdup(json_string_value(mg)))) {
            char *sp = strchr(dup + (dup[0] != 0), ' '); /* the first space after the first character */
            if (sp) *sp = '\0', a = dup, c = sp + 1;
        } else if (json_is_array(mg) && json_array_size(mg) == 2) {
            a = json_string_value(json_array_get(mg, 0));
            c = json_string_value(json_array_get(mg, 1));
        }
        int rc = a && c ? bpe_add_merge(x->b, a, c, x->path, x->err)
                        : kv_fail(x->err, KV_EINPUT, "%s: merges[%zu] is not a pair of pieces", x->path, r);
        free(dup);
        if (rc) return rc;
    }
    return KV_OK;
}

static int read_all(const hf_ctx *x, json_t *root, const kv_vocab *v)
{
    json_t *model = json_object_get(root, "model");
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return unsupported(x, "model", "BPE with byte_fallback and a ByteLevel pre-tokenizer");
    int rc = KV_OK;
    for (int32_t i = 0; i < v->n && !rc; i++)
        if (v->types[i] != VOCAB_UNUSED) rc = bpe_set_piece(x->b, i, v->pieces[i], x->err);
    if (!rc) rc = read_merges(x, json_object_get(model, "merges"));
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(root, "added_tokens"), i, a) {
        const char *content = json_string_value(json_object_get(a, "content"));
        if (!rc && json_is_true(json_object_get(a, "single_word")))
            rc = kv_fail(x->err, KV_EINPUT, "%s: added token '%.64s' has single_word, which kvtrace does not support",
                         x->path, content ? content : "");
        json_t *norm = json_object_get(a, "normalized"); /* absent: Hugging Face's default, !special */
        bool normalized = norm ? json_is_true(norm) : !json_is_true(json_object_get(a, "special"));
        int flags = (json_is_true(json_object_get(a, "lstrip")) ? BPE_LSTRIP : 0) |
                    (json_is_true(json_object_get(a, "rstrip")) ? BPE_RSTRIP : 0) | (normalized ? BPE_NORMALIZED : 0);
        if (!rc) rc = bpe_add_token(x->b, content, (int32_t)json_integer_value(json_object_get(a, "id")), flags,
                                    x->err);
    }
    pretok *p = NULL;
    bool nfc = false;
    if (!rc) rc = read_pretok(x, json_object_get(root, "pre_tokenizer"), &p);
    bpe_set_pretok(x->b, p);
    if (!rc) rc = read_normalizer(x, json_object_get(root, "normalizer"), &nfc);
    if (!rc) rc = read_post(x, json_object_get(root, "post_processor"));
    if (!rc) rc = read_decoder(x, json_object_get(root, "decoder"));
    bpe_set_options(x->b, nfc, json_is_true(json_object_get(model, "ignore_merges")));
    return rc ? rc : bpe_finish(x->b, x->path, x->err);
}

int bpe_from_json(json_t *root, const kv_vocab *v, const char *path, bpe_model **out, kv_err *err)
{
    *out = NULL;
    bpe_model *b;
    int rc = bpe_new(&b, v->n, err);
    if (rc) return rc;
    hf_ctx x = {path, b, v, err};
    if ((rc = read_all(&x, root, v))) {
        bpe_free(b);
        return rc;
    }
    *out = b;
    return KV_OK;
}
