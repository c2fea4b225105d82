/* The answer measures of `fidelity --prompts` (answer.h, docs/fidelity.md#the-answer-measures). */
#include "fidelity/answer.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "capture/run.h"
#include "core/utf8.h"
#include "fidelity/kl.h"
#include "model/tokenizer/tokenizer.h"

int64_t fid_token_rank(const float *logits, int64_t V, int32_t id)
{
    int64_t above = 0;
    for (int64_t i = 0; i < V; i++) above += logits[i] > logits[id];
    return 1 + above;
}

int64_t fid_continuation_length(const fid_answer_ctx *c)
{
    const model_config *cfg = &c->m->cfg;
    int64_t n = c->ans1 - c->ans0 + 8, room = INT64_MAX;
    if (cfg->context_len > 0 && !c->beyond_context) room = cfg->context_len - c->ans0;
    if (cfg->sliding_window > 0 && cfg->sliding_window - c->ans0 < room) room = cfg->sliding_window - c->ans0;
    return n < room ? n : room;
}

static const char *skip_space(const char *s)
{
    while (*s && isspace((unsigned char)*s)) s++;
    return s;
}

bool fid_answer_matches(const char *text, const char *answer)
{
    const char *a = skip_space(answer);
    size_t n = strlen(a);
    while (n > 0 && isspace((unsigned char)a[n - 1])) n--;
    return n > 0 && strncmp(skip_space(text), a, n) == 0;
}

/* text[0..len) with every byte that is not well-formed UTF-8 replaced by U+FFFD (a continuation may
 * stop inside a character, and the CSVs are UTF-8), malloc'd; NULL when out of memory. */
static char *utf8_repaired(const char *text, size_t len)
{
    char *out = malloc(3 * len + 1), *o = out;
    if (!out) return NULL;
    for (size_t at = 0; at < len;) {
        int64_t bad = kv_utf8_invalid(text + at, len - at);
        size_t good = bad < 0 ? len - at : (size_t)bad;
        memcpy(o, text + at, good), o += good, at += good;
        if (at < len) memcpy(o, "\xEF\xBF\xBD", 3), o += 3, at++;
    }
    *o = '\0';
    return out;
}

/* The run's steps: the prefill in chunks of B, then one greedy token a step until `gen` are decided. */
static int decode(kv_run *r, const fid_answer_ctx *c, int32_t *tokens, int64_t gen, int64_t *n_out, kv_err *err)
{
    const int64_t V = c->m->cfg.vocab_size, P = c->ans0, T = P + gen;
    const int32_t eos = c->m->has_vocab ? c->m->vocab.eos : -1;
    int64_t done = 0, known = P;
    while (known < T) {
        const int64_t n = done < P ? (P - done < c->chunk ? P - done : c->chunk) : 1;
        int rc = run_step(r, n, err);
        if (rc) return rc;
        done += n;
        if (done < P) continue;
        const int32_t next = fid_argmax(run_logits(r) + (n - 1) * V, V);
        if (next == eos) break;
        tokens[known++] = next;
        run_known(r, known);
    }
    *n_out = known - P;
    return KV_OK;
}

int fid_continue(const fid_answer_ctx *c, const policy_config *pc, const alloc_config *ac, int64_t budget,
                 fid_continuation *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    const int64_t gen = fid_continuation_length(c), T = c->ans0 + gen;
    int32_t *tokens = kv_calloc((size_t)T, sizeof *tokens, "continuation", err);
    if (!tokens) return err->code;
    memcpy(tokens, c->prompt, sizeof *tokens * (size_t)c->ans0);
    run_opts ro = {.model = c->m, .model_path = c->model_path, .backend_ctx = c->cpu, .tokens = tokens, .T = T,
                   .P = c->ans0, .chunk = c->chunk, .evict = pc, .budget = pc ? budget : 0, .alloc = pc ? ac : NULL,
                   .verb = "fidelity", .trace = {.storage = TRACE_F32}, .beyond_context = c->beyond_context};
    kv_run *r = NULL;
    int64_t n = 0;
    int rc = run_open(&r, &ro, err);
    if (!rc) rc = decode(r, c, tokens, gen, &n, err);
    run_free(r);
    char *answer = rc ? NULL : tokenizer_decode(&c->m->vocab, c->prompt + c->ans0, c->ans1 - c->ans0);
    size_t len = 0;
    char *raw = rc ? NULL : tokenizer_decode_len(&c->m->vocab, tokens + c->ans0, n, &len);
    if (raw) out->text = utf8_repaired(raw, len);
    free(raw);
    if (!rc && (!answer || !out->text)) rc = kv_fail(err, KV_EFAIL, "out of memory decoding the continuation");
    if (!rc) out->match = fid_answer_matches(out->text, answer);
    free(answer), free(tokens);
    return rc;
}
