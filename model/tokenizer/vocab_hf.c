/* vocab_hf: a Hugging Face tokenizer.json (the `tokenizers` library's
 * format) into kv_vocab (see hf.h), parsed with jansson.
 *
 * Only BPE models are read. A ByteLevel pre-tokenizer (Llama 3, Qwen: GPT-2
 * style byte-level BPE) gives VOCAB_BYTE_BPE, its encoder built by bpe_hf.c. Otherwise the vocabulary is
 * SentencePiece-style ("▁" for spaces, "<0xHH>" byte fallback: Llama 2,
 * Mistral): VOCAB_SPM, encoded by tokenizer.c's merge loop with the merges'
 * order as scores (the piece made by merge r scores -r; a piece no merge
 * makes scores -1e30, so it is merged last). Special added tokens are
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
#include "model/tokenizer/tokjson_check.h"

#define NO_MERGE_SCORE -1e30f

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
    return vocab_set(x->v, (int32_t)id, piece, strlen(piece), NO_MERGE_SCORE, type, x->err);
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
        if (!x->v->pieces[t]) rc = vocab_set(x->v, t, "", 0, NO_MERGE_SCORE, VOCAB_UNUSED, x->err);
    return rc;
}

/* Scores from the merges: the piece that merge r makes scores -r. */
static int merge_scores(const tok_ctx *x, json_t *merges)
{
    size_t r;
    json_t *mg;
    char buf[1024];
    json_array_foreach(merges, r, mg) {
        const char *a = NULL, *b = NULL;
        if (json_is_string(mg)) {
            const char *s = json_string_value(mg), *sp = strchr(s, ' ');
            if (sp && (size_t)(sp - s) < sizeof buf) {
                memcpy(buf, s, (size_t)(sp - s));
                buf[sp - s] = '\0';
                a = buf, b = sp + 1;
            }
        } else if (json_is_array(mg) && json_array_size(mg) == 2) {
            a = json_string_value(json_array_get(mg, 0));
            b = json_string_value(json_array_get(mg, 1));
        }
        if (!a || !b)
            return kv_fail(x->err, KV_EINPUT, "%s: merges[%zu] is not a pair of pieces", x->path, r);
        char joined[2048];
        int n = snprintf(joined, sizeof joined, "%s%s", a, b);
        int32_t id = n > 0 && (size_t)n < sizeof joined ? vocab_find(x->v, joined, (size_t)n) : -1;
        if (id >= 0 && x->v->scores[id] == NO_MERGE_SCORE) x->v->scores[id] = -(float)r;
    }
    return KV_OK;
}

static int32_t find_str(const kv_vocab *v, const char *s)
{
    return vocab_find(v, s, strlen(s));
}

static void special_ids(kv_vocab *v, json_t *model, bool spm)
{
    v->bos = find_str(v, spm ? "<s>" : "<|begin_of_text|>");
    v->eos = find_str(v, spm ? "</s>" : "<|end_of_text|>");
    if (!spm && v->eos < 0) v->eos = find_str(v, "<|endoftext|>");
    json_t *unk = json_object_get(model, "unk_token");
    v->unk = json_is_string(unk) ? find_str(v, json_string_value(unk)) : -1;
    if (v->unk >= 0) v->types[v->unk] = VOCAB_UNKNOWN;
    v->add_bos = spm && v->bos >= 0;
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
    if (!rc && spm) rc = merge_scores(x, json_object_get(model, "merges"));
    if (!rc && !spm) rc = bpe_from_json(root, v, x->path, &v->bpe, x->err);
    if (rc) return rc;
    v->kind = spm ? VOCAB_SPM : VOCAB_BYTE_BPE;
    json_t *pt = json_object_get(root, "pre_tokenizer");
    json_t *scheme = json_object_get(pt, "prepend_scheme");
    v->add_space_prefix = spm && !(json_is_string(scheme) &&
                                   strcmp(json_string_value(scheme), "never") == 0);
    special_ids(v, model, spm);
    if (!spm) v->add_bos = true; /* for byte-level BPE: apply the post-processor's template */
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
    if (rc || !*has) vocab_free(v);
    json_decref(root);
    return rc;
}
