/* prompts_cwe: RULER's common-words extraction list (cli/prompts_cwe.h). */
#include "cli/prompts_cwe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/tokenizer/tokenizer.h"

enum { WORD_MIN = 4, WORD_MAX = 10 };

static const char INTRO[] = "Below is a numbered list of words. In these words, some appear more often than others. "
                            "Memorize the ones that appear most often.";

void prompt_cwe_words_free(cwe_words *w)
{
    for (int64_t i = 0; w->w && i < w->n; i++) free(w->w[i]);
    free(w->w);
    memset(w, 0, sizeof *w);
}

/* " word": a space, then WORD_MIN..WORD_MAX lowercase ASCII letters. */
static int whole_word(const char *piece)
{
    if (piece[0] != ' ') return 0;
    size_t k = 1;
    while (piece[k] >= 'a' && piece[k] <= 'z') k++;
    return piece[k] == '\0' && k - 1 >= WORD_MIN && k - 1 <= WORD_MAX;
}

int prompt_cwe_words(const kv_vocab *v, cwe_words *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    if (v->n > 0 && !(out->w = malloc(sizeof *out->w * (size_t)v->n))) return kv_fail(err, KV_EFAIL, "out of memory");
    char buf[64];
    for (int32_t id = 0; id < v->n; id++) {
        if (tokenizer_piece_text(v, -1, id, buf, sizeof buf) >= sizeof buf || !whole_word(buf)) continue;
        int dup = 0;   /* a piece spelled twice (SPM and its byte-level twin): once */
        for (int64_t j = 0; j < out->n && !dup; j++) dup = strcmp(out->w[j], buf + 1) == 0;
        if (dup) continue;
        if (!(out->w[out->n] = strdup(buf + 1))) return prompt_cwe_words_free(out), kv_fail(err, KV_EFAIL,
                                                                                              "out of memory");
        out->n++;
    }
    return KV_OK;
}

int prompt_cwe_make(const cwe_words *w, int common, int freq, int64_t u, uint64_t seed, int64_t length,
                    prompt_task *t, char **body, kv_err *err)
{
    memset(t, 0, sizeof *t);
    *body = NULL;
    const int64_t distinct = common + u, entries = (int64_t)common * freq + u * CWE_RARE_FREQ;
    int64_t *pick = malloc(sizeof *pick * (size_t)w->n), *list = malloc(sizeof *list * (size_t)entries);
    kv_rng r;   /* the words: one stream of (seed, length); the order: another, drawn per u */
    rng_init(&r, seed, TASK_CWE, (uint64_t)length, 0);
    for (int64_t i = 0; pick && i < w->n; i++) pick[i] = i;
    for (int64_t i = 0; pick && i < distinct; i++) {   /* a partial Fisher-Yates draw of distinct words */
        const int64_t j = i + (int64_t)rng_below(&r, (uint64_t)(w->n - i)), x = pick[i];
        pick[i] = pick[j], pick[j] = x;
    }
    int64_t e = 0;
    for (int64_t i = 0; pick && list && i < distinct; i++)
        for (int k = 0; k < (i < common ? freq : CWE_RARE_FREQ); k++) list[e++] = pick[i];
    rng_init(&r, seed, TASK_CWE, (uint64_t)length, 1 + (uint64_t)u);
    for (int64_t i = entries - 1; pick && list && i > 0; i--) {
        const int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1), x = list[i];
        list[i] = list[j], list[j] = x;
    }
    size_t len = sizeof INTRO + 1, alen = 1;
    for (int64_t i = 0; pick && list && i < entries; i++) len += strlen(w->w[list[i]]) + 24;
    for (int i = 0; pick && i < common; i++) alen += strlen(w->w[pick[i]]) + 2;
    char *s = pick && list ? malloc(len) : NULL, *a = s ? malloc(alen) : NULL;
    t->question = malloc(96), t->prefix = malloc(96);
    int rc = s && a && t->question && t->prefix ? KV_OK : kv_fail(err, KV_EFAIL, "prompts: out of memory");
    if (!rc) {
        char *p = s + sprintf(s, "%s\n", INTRO), *q = a;
        for (int64_t i = 0; i < entries; i++) p += sprintf(p, "%s%lld. %s", i ? " " : "", (long long)(i + 1),
                                                           w->w[list[i]]);
        char *seen = calloc((size_t)common, 1);
        if (!seen) rc = kv_fail(err, KV_EFAIL, "prompts: out of memory");
        for (int64_t i = 0; !rc && i < entries; i++) {   /* the common words in the order they first occur */
            int c = 0;
            while (c < common && pick[c] != list[i]) c++;
            if (c < common && !seen[c]) seen[c] = 1, q += sprintf(q, "%s%s", q == a ? "" : ", ", w->w[list[i]]);
        }
        free(seen);
        sprintf(t->question, "Question: What are the %d most common words in the above list?", common);
        sprintf(t->prefix, "Answer: The top %d words that appear most often in the list are: ", common);
    }
    free(pick), free(list);
    if (rc) {
        free(s), free(a), prompt_task_free(t);
        return rc;
    }
    t->answer = a, *body = s;
    return KV_OK;
}
