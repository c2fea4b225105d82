/* The spans and answer of a prompt (capture/prompts.h): read from its JSON
 * object, then placed on its token ids. A span given as text is found in the
 * prompt's text (exactly once; the answer: at its end) as bytes [bs, be),
 * and becomes the smallest token range covering them: from the tokenizer's
 * offsets where it gives them (byte-level BPE), else by encoding the text
 * before bs and before be and comparing with the prompt's ids (SentencePiece:
 * stories260K, llama2.c tokenizers, SentencePiece tokenizer.json). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "capture/prompts.h"
#include "model/tokenizer/tokenizer.h"

static int add_span(prompt_item *it, const char *name, const char *text, int64_t start, int64_t end, kv_err *err)
{
    trace_span *s = realloc(it->spans, sizeof *s * (size_t)(it->n_spans + 1));
    if (s) it->spans = s;
    char **t = s ? realloc(it->span_text, sizeof *t * (size_t)(it->n_spans + 1)) : NULL;
    if (t) it->span_text = t;
    char *copy = text ? strdup(text) : NULL;
    if (!s || !t || (text && !copy)) {
        free(copy);
        return kv_fail(err, KV_EFAIL, "out of memory");
    }
    memset(&s[it->n_spans], 0, sizeof *s);
    snprintf(s[it->n_spans].name, sizeof s->name, "%s", name);
    s[it->n_spans].start = start, s[it->n_spans].end = end;
    t[it->n_spans++] = copy;
    return KV_OK;
}

bool prompts_is_text(void *json_value)
{
    json_t *v = json_value;
    return json_is_string(v) && json_string_length(v) > 0 && strlen(json_string_value(v)) == json_string_length(v);
}

/* {"start", "end"} or text of span `name` (what: how messages call it). */
static int parse_one(json_t *o, const char *name, prompt_item *it, const char *file, kv_err *err)
{
    json_t *text = json_object_get(o, "text"), *st = json_object_get(o, "start"), *en = json_object_get(o, "end");
    const size_t known = 1u + (text != NULL) + (st != NULL) + (en != NULL) - (strcmp(name, PROMPTS_ANSWER) == 0);
    if (json_object_size(o) != known)
        return kv_fail(err, KV_EINPUT, "%s:%d: span '%s': unknown field (a span has name, and text or start and end)",
                       file, it->line, name);
    if (text && (st || en))
        return kv_fail(err, KV_EINPUT, "%s:%d: span '%s': give text, or start and end, not both", file, it->line, name);
    if (text && !prompts_is_text(text))
        return kv_fail(err, KV_EINPUT, "%s:%d: span '%s': text must be a non-empty string without NUL", file,
                       it->line, name);
    if (text && !it->text && !it->msgs)
        return kv_fail(err, KV_EINPUT, "%s:%d: span '%s': a prompt given as tokens takes spans as start and end",
                       file, it->line, name);
    if (!text && !(json_is_integer(st) && json_is_integer(en)))
        return kv_fail(err, KV_EINPUT, "%s:%d: span '%s': needs text, or integer start and end", file, it->line, name);
    for (int i = 0; i < it->n_spans; i++)
        if (strcmp(it->spans[i].name, name) == 0)
            return kv_fail(err, KV_EINPUT, "%s:%d: two spans are named '%s'", file, it->line, name);
    return add_span(it, name, text ? json_string_value(text) : NULL, text ? 0 : json_integer_value(st),
                    text ? 0 : json_integer_value(en), err);
}

int prompts_spans_parse(void *json_obj, prompt_item *it, const char *file, kv_err *err)
{
    json_t *o = json_obj, *spans = json_object_get(o, "spans"), *answer = json_object_get(o, "answer");
    if (spans && (!json_is_array(spans) || json_array_size(spans) == 0 || json_array_size(spans) >= TRACE_MAX_SPANS))
        return kv_fail(err, KV_EINPUT, "%s:%d: 'spans' must be an array of 1 .. %d span objects", file, it->line,
                       TRACE_MAX_SPANS - 1);
    int rc = KV_OK;
    for (size_t i = 0; !rc && spans && i < json_array_size(spans); i++) {
        json_t *s = json_array_get(spans, i), *name = json_is_object(s) ? json_object_get(s, "name") : NULL;
        if (!prompts_is_text(name) || !trace_span_name_ok(json_string_value(name)))
            rc = kv_fail(err, KV_EINPUT, "%s:%d: spans[%zu] must be an object with a name of 1 .. %d of A-Z a-z 0-9 "
                         "_ . -", file, it->line, i, TRACE_SPAN_NAME_MAX);
        else if (strcmp(json_string_value(name), PROMPTS_ANSWER) == 0)
            rc = kv_fail(err, KV_EINPUT, "%s:%d: spans[%zu]: the name 'answer' is the answer's: give it as "
                         "\"answer\"", file, it->line, i);
        else rc = parse_one(s, json_string_value(name), it, file, err);
    }
    if (rc || !answer) return rc;
    if (json_is_string(answer)) {
        if (!prompts_is_text(answer))
            return kv_fail(err, KV_EINPUT, "%s:%d: 'answer' must be a non-empty string without NUL", file, it->line);
        if (!it->text && !it->msgs)
            return kv_fail(err, KV_EINPUT, "%s:%d: a prompt given as tokens takes 'answer' as start and end", file,
                           it->line);
        return add_span(it, PROMPTS_ANSWER, json_string_value(answer), 0, 0, err);
    }
    if (!json_is_object(answer))
        return kv_fail(err, KV_EINPUT, "%s:%d: 'answer' must be a text or {\"start\", \"end\"}", file, it->line);
    return parse_one(answer, PROMPTS_ANSWER, it, file, err);
}

/* Length of the common prefix of a[na] and b[nb]. */
static int64_t common(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    int64_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* Bytes [bs, be) of the text to tokens by encoding the text before each end. */
static int place_by_prefix(const prompt_item *it, const kv_model *m, size_t bs, size_t be, trace_span *s, kv_err *err)
{
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    const bool special = m->vocab.add_bos && !it->msgs; /* a templated text has its special tokens written */
    int rc = tokenizer_encode(&m->vocab, it->text, bs, special, &a, &na, err);
    if (!rc) rc = tokenizer_encode(&m->vocab, it->text, be, special, &b, &nb, err);
    if (!rc) {
        s->start = common(it->ids, it->n_ids, a, na);
        const int64_t k = common(it->ids, it->n_ids, b, nb);
        s->end = k == nb ? k : k + 1; /* the token holding byte be - 1 and more */
    }
    free(a);
    free(b);
    return rc;
}

/* The same from the tokenizer's byte offsets (tokens of no width skipped). */
static int place_by_offsets(const prompt_item *it, const int64_t *off, size_t bs, size_t be, trace_span *s)
{
    s->start = s->end = -1;
    for (int64_t i = 0; i < it->n_ids; i++) {
        if (off[2 * i + 1] <= off[2 * i] || off[2 * i + 1] <= (int64_t)bs || off[2 * i] >= (int64_t)be) continue;
        if (s->start < 0) s->start = i;
        s->end = i + 1;
    }
    return KV_OK;
}

/* Where span k's text lies in the prompt's text: [*bs, *be). */
static int find_text(const prompt_item *it, int k, const char *file, size_t *bs, size_t *be, kv_err *err)
{
    const char *t = it->span_text[k], *name = it->spans[k].name;
    const size_t n = strlen(t), len = strlen(it->text);
    if (strcmp(name, PROMPTS_ANSWER) == 0) {
        if (n > len || memcmp(it->text + len - n, t, n) != 0)
            return kv_fail(err, KV_EINPUT, "%s:%d: the answer is not at the end of the text", file, it->line);
        *bs = len - n, *be = len;
        return KV_OK;
    }
    const char *at = strstr(it->text, t);
    if (!at) return kv_fail(err, KV_EINPUT, "%s:%d: span '%s': its text is not in the prompt", file, it->line, name);
    if (strstr(at + 1, t))
        return kv_fail(err, KV_EINPUT, "%s:%d: span '%s': its text occurs more than once in the prompt (give start "
                       "and end)", file, it->line, name);
    *bs = (size_t)(at - it->text), *be = *bs + n;
    return KV_OK;
}

int prompts_spans_place(prompt_item *it, const char *file, const kv_model *m, kv_err *err)
{
    int32_t *ids = NULL;
    int64_t *off = NULL, n = 0;
    int rc = KV_OK;
    bool offsets = false;
    for (int k = 0; !rc && k < it->n_spans; k++) {
        trace_span *s = &it->spans[k];
        if (it->span_text[k]) {
            size_t bs = 0, be = 0;
            if (!ids && !off) { /* once per prompt: offsets, where the tokenizer gives them */
                kv_err quiet = {0};
                offsets = tokenizer_encode_offsets(&m->vocab, it->text, strlen(it->text), m->vocab.add_bos && !it->msgs, &ids,
                                                   &off, &n, &quiet) == KV_OK &&
                          n == it->n_ids && memcmp(ids, it->ids, sizeof *ids * (size_t)n) == 0;
                if (!ids) ids = malloc(1);
            }
            rc = find_text(it, k, file, &bs, &be, err);
            if (!rc) rc = offsets ? place_by_offsets(it, off, bs, be, s) : place_by_prefix(it, m, bs, be, s, err);
        }
        const bool answer = strcmp(s->name, PROMPTS_ANSWER) == 0;
        if (!rc && !(s->start >= 0 && s->start < s->end && s->end <= it->n_ids))
            rc = kv_fail(err, KV_EINPUT, "%s:%d: span '%s' is tokens [%lld, %lld), not a non-empty range within the "
                         "prompt's %lld tokens", file, it->line, s->name, (long long)s->start, (long long)s->end,
                         (long long)it->n_ids);
        if (!rc && answer && s->end != it->n_ids)
            rc = kv_fail(err, KV_EINPUT, "%s:%d: the answer is tokens [%lld, %lld): it must end the prompt (%lld "
                         "tokens)", file, it->line, (long long)s->start, (long long)s->end, (long long)it->n_ids);
    }
    free(ids);
    free(off);
    return rc;
}
