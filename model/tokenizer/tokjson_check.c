/* tokjson_check: the shape of a tokenizer.json (see tokjson_check.h). */
#include "model/tokenizer/tokjson_check.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 32
#define ID_LIMIT 0x7ffffffeLL /* ids lie in [0, ID_LIMIT) */

typedef struct {
    const char *path;
    kv_err *err;
} ck;

static int bad(const ck *c, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kv_fail(c->err, KV_EINPUT, "%s: %s", c->path, msg);
}

static bool is_id(json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < ID_LIMIT;
}

/* Each of keys[] in o, when present and not null, is a boolean. */
static int bools(const ck *c, json_t *o, const char *where, const char *const *keys)
{
    for (; *keys; keys++) {
        json_t *v = json_object_get(o, *keys);
        if (v && !json_is_null(v) && !json_is_boolean(v)) return bad(c, "%s.%s is not a boolean", where, *keys);
    }
    return KV_OK;
}

static int merge_entry(const ck *c, json_t *m, size_t r)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = s[0] ? strchr(s + 1, ' ') : NULL;
        if (sp && sp[1]) return KV_OK;
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
               json_is_string(json_array_get(m, 1))) {
        return KV_OK;
    }
    return bad(c, "model.merges[%zu] is not a pair of pieces (\"a b\" or [\"a\", \"b\"])", r);
}

/* The largest id named + 1 must not be far beyond the count of names. */
static int size_claim(const ck *c, json_int_t max_id, size_t named)
{
    if (max_id < 0 || (size_t)max_id < 2 * named + 65536) return KV_OK;
    return bad(c, "ids reach %lld but only %zu tokens are named: a vocabulary size the file does not back",
               (long long)max_id, named);
}

static int check_model(const ck *c, json_t *model, json_t *added)
{
    static const char *const flags[] = {"byte_fallback", "ignore_merges", "fuse_unk", NULL};
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges"), *v;
    if (!json_is_object(vocab)) return bad(c, "model.vocab is not an object");
    json_int_t max_id = -1;
    const char *piece;
    json_object_foreach(vocab, piece, v) {
        if (!is_id(v)) return bad(c, "model.vocab['%.64s'] is not an id in [0, 2^31 - 1)", piece);
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    if (!json_is_array(merges)) return bad(c, "model.merges is missing");
    size_t i;
    json_array_foreach(merges, i, v) if (merge_entry(c, v, i)) return KV_EINPUT;
    if (bools(c, model, "model", flags)) return KV_EINPUT;
    if (added && !json_is_null(added) && !json_is_array(added)) return bad(c, "added_tokens is not an array");
    static const char *const aflags[] = {"special", "lstrip", "rstrip", "single_word", "normalized", NULL};
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_object(v) || !is_id(id) || !json_is_string(json_object_get(v, "content")))
            return bad(c, "added_tokens[%zu] has no id in [0, 2^31 - 1) and string content", i);
        if (bools(c, v, "added_tokens[]", aflags)) return KV_EINPUT;
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    return size_claim(c, max_id, json_object_size(vocab) + json_array_size(added));
}

static int check_split(const ck *c, json_t *s)
{
    static const char *const flags[] = {"invert", NULL};
    json_t *pat = json_object_get(s, "pattern");
    if (!json_is_string(json_object_get(pat, "Regex")) && !json_is_string(json_object_get(pat, "String")))
        return bad(c, "a Split pre-tokenizer's pattern is not {\"Regex\": R} or {\"String\": S}");
    if (!json_is_string(json_object_get(s, "behavior")))
        return bad(c, "a Split pre-tokenizer's behavior is not a string");
    return bools(c, s, "Split", flags);
}

/* special_tokens[name].ids: integer ids. */
static int template_token(const ck *c, json_t *specials, const char *name)
{
    json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids"), *id;
    if (!name || !json_is_array(ids))
        return bad(c, "post_processor names special token '%.64s', which its special_tokens does not define",
                   name ? name : "(none)");
    size_t k;
    json_array_foreach(ids, k, id) if (!is_id(id))
        return bad(c, "post_processor special token '%.64s' has an id that is not in [0, 2^31 - 1)", name);
    return KV_OK;
}

static int check_template(const ck *c, json_t *t)
{
    json_t *single = json_object_get(t, "single"), *specials = json_object_get(t, "special_tokens"), *item;
    if (!json_is_array(single)) return bad(c, "post_processor.single is not an array");
    if (!json_is_object(specials)) return bad(c, "post_processor.special_tokens is not an object");
    size_t i;
    int seqs = 0;
    json_array_foreach(single, i, item) {
        json_t *st = json_object_get(item, "SpecialToken"), *sq = json_object_get(item, "Sequence");
        if (sq && json_is_string(json_object_get(sq, "id")) && !st) {
            seqs++;
            continue;
        }
        if (!st || sq || template_token(c, specials, json_string_value(json_object_get(st, "id"))))
            return c->err->code ? c->err->code
                                : bad(c, "post_processor.single[%zu] is not a SpecialToken or a Sequence", i);
    }
    return seqs == 1 ? KV_OK : bad(c, "post_processor.single holds %d sequences, not 1", seqs);
}

typedef struct {
    const char *field, *list; /* the field's name and its Sequence's list key */
} comp_kind;

/* One component (and, in a Sequence, those under it). */
static int check_comp(const ck *c, const comp_kind *k, json_t *n, int depth)
{
    static const char *const bl_flags[] = {"add_prefix_space", "trim_offsets", "use_regex", NULL};
    if (depth > MAX_DEPTH) return bad(c, "%s: Sequences nested more than %d deep", k->field, MAX_DEPTH);
    json_t *type = json_object_get(n, "type");
    if (!json_is_object(n) || !json_is_string(type))
        return bad(c, "%s is not an object with a string 'type'", k->field);
    const char *t = json_string_value(type);
    if (strcmp(t, "Sequence") == 0) {
        json_t *list = json_object_get(n, k->list), *sub;
        if (!json_is_array(list)) return bad(c, "%s: a Sequence's %s is not an array", k->field, k->list);
        size_t i;
        json_array_foreach(list, i, sub) if (check_comp(c, k, sub, depth + 1)) return KV_EINPUT;
        return KV_OK;
    }
    if (strcmp(t, "ByteLevel") == 0) return bools(c, n, k->field, bl_flags);
    if (strcmp(k->field, "pre_tokenizer") == 0 && strcmp(t, "Split") == 0) return check_split(c, n);
    if (strcmp(k->field, "post_processor") == 0 && strcmp(t, "TemplateProcessing") == 0)
        return check_template(c, n);
    return KV_OK;
}

/* Whether the pre-tokenizer n is or holds ByteLevel; *other: it holds a type
 * that is neither ByteLevel, Metaspace nor Sequence (n checked). */
static bool byte_level(json_t *n, const char **other)
{
    const char *t = json_string_value(json_object_get(n, "type"));
    if (!t) return false;
    if (strcmp(t, "ByteLevel") == 0) return true;
    bool found = false;
    if (strcmp(t, "Sequence") != 0 && strcmp(t, "Metaspace") != 0 && !*other) *other = t;
    size_t i;
    json_t *sub;
    json_array_foreach(json_object_get(n, "pretokenizers"), i, sub) found |= byte_level(sub, other);
    return found;
}

int tokjson_check(json_t *root, const char *path, kv_err *err)
{
    const ck c = {path, err};
    if (!json_is_object(root)) return bad(&c, "is not a JSON object");
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model) || !json_is_string(json_object_get(model, "type")))
        return bad(&c, "model is not an object with a string 'type'");
    if (strcmp(json_string_value(json_object_get(model, "type")), "BPE") != 0) return KV_OK;
    int rc = check_model(&c, model, json_object_get(root, "added_tokens"));
    static const comp_kind kinds[] = {{"normalizer", "normalizers"}, {"pre_tokenizer", "pretokenizers"},
                                      {"post_processor", "processors"}, {"decoder", "decoders"}};
    for (int i = 0; i < 4 && !rc; i++) {
        json_t *n = json_object_get(root, kinds[i].field);
        if (n && !json_is_null(n)) rc = check_comp(&c, &kinds[i], n, 0);
    }
    const char *other = NULL;
    if (!rc && !byte_level(json_object_get(root, "pre_tokenizer"), &other) && other)
        rc = bad(&c, "pre-tokenizer type '%.64s' without ByteLevel is not supported", other);
    return rc;
}
