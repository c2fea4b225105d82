/* capture --prompts: one trace per prompt of a JSON Lines file, the model
 * loaded once, and the study's index.jsonl (docs/study.md). The file is read
 * and checked whole before any work; the directory is written all or
 * nothing (a temporary directory renamed at the end). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/capture.h"
#include "capture/prompts.h"
#include "core/kv_mpi.h"
#include "core/outfile.h"
#include "core/progress.h"
#include "model/model.h"
#include "model/model_fetch.h"
#include "model/tokenizer/tokenizer.h"
#include "study/study.h"

void prompts_free(prompt_list *l)
{
    for (int i = 0; i < l->n; i++) {
        prompt_item *it = &l->p[i];
        for (int k = 0; k < it->n_spans; k++) free(it->span_text[k]);
        free(it->text), free(it->ids), free(it->spans), free(it->span_text), free(it->record), free(it->answer_prefix);
        chat_messages_free(it->msgs, it->n_msgs);
    }
    free(l->p);
    memset(l, 0, sizeof *l);
}

const trace_span *prompt_answer(const prompt_item *it)
{
    for (int k = 0; k < it->n_spans; k++)
        if (strcmp(it->spans[k].name, PROMPTS_ANSWER) == 0) return &it->spans[k];
    return NULL;
}

static const char *const KNOWN[] = {"id", "text", "messages", "tokens", "generate", "spans", "answer",
                                     "answer_prefix"};

/* The fields: each known. */
static int check_fields(json_t *o, const char *file, int line, kv_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        size_t k = 0;
        while (k < sizeof KNOWN / sizeof *KNOWN && strcmp(key, KNOWN[k]) != 0) k++;
        if (k == sizeof KNOWN / sizeof *KNOWN)
            return kv_fail(err, KV_EINPUT, "%s:%d: unknown field '%.60s' (a prompt has id, text, messages or "
                           "tokens, and optionally generate, spans, answer, answer_prefix)", file, line, key);
    }
    return KV_OK;
}

/* The text, the messages or the token ids of one prompt object into it. */
static int prompt_body(json_t *o, prompt_item *it, const char *file, int line, kv_err *err)
{
    json_t *text = json_object_get(o, "text"), *tokens = json_object_get(o, "tokens");
    json_t *msgs = json_object_get(o, "messages");
    const int given = !!text + !!tokens + !!msgs;
    if (given != 1)
        return kv_fail(err, KV_EINPUT, "%s:%d: %s", file, line,
                       given ? "give one of 'text', 'messages' and 'tokens'" : "missing 'text' (or 'messages', "
                       "'tokens')");
    json_t *prefix = json_object_get(o, "answer_prefix");
    if (prefix && !msgs)
        return kv_fail(err, KV_EINPUT, "%s:%d: 'answer_prefix' goes with 'messages' (a text prompt holds its reply's "
                       "start itself)", file, line);
    if (prefix && !prompts_is_text(prefix))
        return kv_fail(err, KV_EINPUT, "%s:%d: 'answer_prefix' must be a non-empty string without NUL", file, line);
    if (prefix && !(it->answer_prefix = strdup(json_string_value(prefix))))
        return kv_fail(err, KV_EFAIL, "out of memory");
    if (msgs) {
        char where[4200];
        snprintf(where, sizeof where, "%s:%d", file, line);
        return chat_messages_from_json(msgs, where, &it->msgs, &it->n_msgs, err);
    }
    if (text) {
        if (!prompts_is_text(text))
            return kv_fail(err, KV_EINPUT, "%s:%d: 'text' must be a non-empty string without NUL", file, line);
        if (!(it->text = strdup(json_string_value(text)))) return kv_fail(err, KV_EFAIL, "out of memory");
        return KV_OK;
    }
    const size_t n = json_is_array(tokens) ? json_array_size(tokens) : 0;
    if (n == 0) return kv_fail(err, KV_EINPUT, "%s:%d: 'tokens' must be a non-empty array of ids", file, line);
    if (!(it->ids = malloc(sizeof *it->ids * n))) return kv_fail(err, KV_EFAIL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(tokens, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return kv_fail(err, KV_EINPUT, "%s:%d: tokens[%zu] is not a token id (an integer >= 0)", file, line, i);
        it->ids[i] = (int32_t)json_integer_value(x);
    }
    it->n_ids = (int64_t)n;
    return KV_OK;
}

static int prompt_line(const char *file, const char *buf, int line, prompt_list *l, kv_err *err)
{
    json_error_t je;
    json_t *o = json_loads(buf, JSON_REJECT_DUPLICATES, &je);
    if (!o) return kv_fail(err, KV_EINPUT, "%s:%d: not JSON (%s)", file, line, je.text);
    int rc = json_is_object(o) ? check_fields(o, file, line, err)
                               : kv_fail(err, KV_EINPUT, "%s:%d: not a JSON object", file, line);
    const char *id = json_string_value(json_object_get(o, "id"));
    json_t *gen = json_object_get(o, "generate");
    if (!rc && (!id || !study_id_ok(id)))
        rc = kv_fail(err, KV_EINPUT, "%s:%d: %s", file, line, !id ? "missing 'id'" :
                     "'id' must be 1-128 of A-Z a-z 0-9 _ . - (not starting with '.'): it names the trace file");
    for (int i = 0; !rc && i < l->n; i++)
        if (strcmp(l->p[i].id, id) == 0)
            rc = kv_fail(err, KV_EINPUT, "%s:%d: id '%s' is also on line %d", file, line, id, l->p[i].line);
    if (!rc && gen && (!json_is_integer(gen) || json_integer_value(gen) < 0 || json_integer_value(gen) > (1 << 30)))
        rc = kv_fail(err, KV_EINPUT, "%s:%d: 'generate' must be an integer in [0, 2^30]", file, line);
    prompt_item *grown = rc ? NULL : realloc(l->p, sizeof *l->p * (size_t)(l->n + 1));
    if (!rc && !grown) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc) {
        l->p = grown;
        prompt_item *it = &l->p[l->n++];
        memset(it, 0, sizeof *it);
        snprintf(it->id, sizeof it->id, "%s", id);
        it->line = line, it->generate = gen ? json_integer_value(gen) : -1;
        rc = prompt_body(o, it, file, line, err);
        if (!rc) rc = prompts_spans_parse(o, it, file, err);
    }
    json_decref(o);
    return rc;
}

typedef struct {
    const char *file;
    prompt_list *l;
} read_ctx;

static int prompt_line_cb(void *ctx, const char *text, int line, kv_err *err)
{
    read_ctx *c = ctx;
    return prompt_line(c->file, text, line, c->l, err);
}

int prompts_read(const char *file, prompt_list *l, kv_err *err)
{
    memset(l, 0, sizeof *l);
    read_ctx c = {file, l};
    int rc = study_jsonl_read(file, true, "holds no prompts", prompt_line_cb, &c, err);
    if (rc) prompts_free(l);
    return rc;
}

prompt_source prompt_item_source(const prompt_item *it)
{
    return (prompt_source){.text = it->text, .templated = it->msgs != NULL, .record = it->record};
}

/* A conversation's templated text, the answer prefix and the answer's text after it, into it->text; its record into it->record. */
static int render_messages(prompt_item *it, const char *file, const kv_model *m, const prompt_chat *chat, kv_err *err)
{
    char where[4200];
    snprintf(where, sizeof where, "%s:%d", file, it->line);
    if (!m->has_vocab) return kv_fail(err, KV_EUSAGE, "%s: the model has no tokenizer, so no chat template", where);
    const chat_options o = {.date = chat ? chat->date : NULL, .no_thinking = chat && chat->no_thinking};
    const chat_known *k = NULL;
    char *t = NULL;
    int rc = chat_render(&m->vocab, where, it->msgs, it->n_msgs, &o, &t, &k, err);
    const char *answer = NULL;
    for (int s = 0; s < it->n_spans; s++)
        if (strcmp(it->spans[s].name, PROMPTS_ANSWER) == 0) answer = it->span_text[s];
    const char *prefix = it->answer_prefix ? it->answer_prefix : "";
    const size_t n = t ? strlen(t) : 0, np = strlen(prefix), na = answer ? strlen(answer) : 0;
    char *full = rc ? NULL : malloc(n + np + na + 1);
    if (!rc && !full) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc) {
        memcpy(full, t, n), memcpy(full + n, prefix, np), memcpy(full + n + np, answer ? answer : "", na + 1);
        free(it->text), free(it->record);
        it->text = full, it->record = chat_record(k, it->msgs, it->n_msgs, &o);
        if (!it->record) rc = kv_fail(err, KV_EFAIL, "out of memory");
    }
    free(t);
    return rc;
}

int prompts_tokenize(prompt_list *l, const char *file, const kv_model *m, const prompt_chat *chat, kv_err *err)
{
    int rc = KV_OK;
    for (int i = 0; !rc && i < l->n; i++) {
        prompt_item *it = &l->p[i];
        if (it->msgs) rc = render_messages(it, file, m, chat, err);
        if (!rc && it->text) {
            const prompt_source src = prompt_item_source(it);
            free(it->ids), it->ids = NULL;
            rc = prompt_tokens(&src, m, file, &it->ids, &it->n_ids, err);
        }
        for (int64_t t = 0; !rc && t < it->n_ids; t++)
            if (it->ids[t] >= m->cfg.vocab_size)
                rc = kv_fail(err, KV_EINPUT, "%s:%d: token id %d is outside the model's vocabulary (%lld ids)", file,
                             it->line, it->ids[t], (long long)m->cfg.vocab_size);
        if (!rc) rc = prompts_spans_place(it, file, m, err);
    }
    return rc;
}

enum { INDEX_LINE_MAX = 2 * STUDY_ID_MAX + 256 };   /* one line of index.jsonl */

/* Prompt it of n into DIR/ID.h5, and its line of the index into line. */
static int capture_one(const capture_opts *o, const kv_model *m, const prompt_item *it, int i, int n, const char *dir,
                       char *line, kv_err *err)
{
    char path[4400], sha[65];
    snprintf(path, sizeof path, "%s/%s.h5", dir, it->id);
    capture_opts one = *o;
    one.output = path, one.force = false;
    one.prompt = prompt_item_source(it);
    one.spans = it->n_spans ? it->spans : NULL, one.n_spans = it->n_spans;
    if (it->generate >= 0) one.generate = it->generate;
    if (!o->quiet) fprintf(stderr, "kvtrace: capture: prompt %d/%d: %s\n", i + 1, n, it->id);
    int rc = capture_loaded(&one, m, it->text ? NULL : it->ids, it->n_ids, err); /* text: as capture --prompt */
    trace *tr = NULL;
    if (!rc) rc = trace_open(path, &tr, err);
    const int64_t T = rc ? 0 : trace_get_meta(tr)->n_tokens;
    trace_close(tr);
    if (!rc) rc = model_file_sha256(path, sha, err);
    char file[STUDY_ID_MAX + 8];
    snprintf(file, sizeof file, "%s.h5", it->id);
    FILE *f = rc ? NULL : fmemopen(line, INDEX_LINE_MAX, "w");
    if (!rc && !f) return kv_fail(err, KV_EFAIL, "capture: out of memory");
    if (!rc) rc = study_index_line(f, it->id, file, T, sha, err);
    if (f && fclose(f) != 0 && !rc) rc = kv_fail(err, KV_EFAIL, "capture: an index line over %d bytes", INDEX_LINE_MAX);
    return rc;
}

/* Under mpirun (docs/mpi.md): the prompts split across ranks by tokens (prompt + generated),
 * each rank capturing its own into rank 0's temporary directory dir; their index lines move
 * to rank 0 (lines[n]). Every rank's outcome agreed: a failure named once, on rank 0. */
static int capture_split(const capture_opts *o, const kv_model *m, const prompt_list *l, char *dir, char *lines,
                         int rc, kv_err *err)
{
    int rank, size;
    kv_mpi_world(&rank, &size);
    rc = kv_mpi_agree_err(rc, rank, size, err, NULL);
    if (!rc && kv_mpi_bcast(dir, 4096, NULL) != 0) rc = kv_fail(err, KV_EFAIL, "capture: MPI_Bcast failed");
    int *owner = rc ? NULL : kv_calloc((size_t)l->n, sizeof *owner, "capture", err);
    int64_t *cost = owner ? kv_calloc((size_t)l->n, sizeof *cost, "capture", err) : NULL;
    if (!rc && !cost) rc = err->code;
    for (int i = 0; !rc && i < l->n; i++) cost[i] = l->p[i].n_ids + (l->p[i].generate >= 0 ? l->p[i].generate : o->generate);
    if (!rc) kv_mpi_owners(cost, l->n, size, owner);
    capture_opts own = *o;
    own.quiet = o->quiet || rank != 0;
    for (int i = 0; !rc && i < l->n; i++)
        if (owner[i] == rank) rc = capture_one(&own, m, &l->p[i], i, l->n, dir, lines + (size_t)i * INDEX_LINE_MAX, err);
    if (owner) rc = kv_mpi_agree_err(rc, rank, size, err, NULL);
    for (int i = 0; !rc && i < l->n; i++)
        if (kv_mpi_to_root(owner[i], lines + (size_t)i * INDEX_LINE_MAX, INDEX_LINE_MAX, NULL) != 0)
            rc = kv_fail(err, KV_EFAIL, "capture: moving rank %d's index line to rank 0 failed", owner[i]);
    free(owner), free(cost);
    return rc;
}

/* Rank 0: index.jsonl in the prompts' order. */
static int write_index(const char *dir, const char *lines, int n, kv_err *err)
{
    char index[4400];
    snprintf(index, sizeof index, "%s/" STUDY_INDEX, dir);
    FILE *f = fopen(index, "w");
    if (!f) return kv_fail(err, KV_EFAIL, "%s: cannot create", index);
    for (int i = 0; i < n; i++) fputs(lines + (size_t)i * INDEX_LINE_MAX, f);
    return fclose(f) != 0 ? kv_fail(err, KV_EFAIL, "%s: cannot write", index) : KV_OK;
}

int capture_prompts(const capture_opts *o, kv_err *err)
{
    prompt_list l;
    const char *inputs[] = {o->prompts, o->model, o->tokenizer, o->head_scores};
    int rc = outfile_check_inputs(o->output, inputs, 4, err);
    if (!rc) rc = prompts_read(o->prompts, &l, err);
    if (rc) return rc;
    int rank, size;
    kv_mpi_world(&rank, &size);
    kv_model model;
    memset(&model, 0, sizeof model);
    kv_outfile out;
    bool started = false;
    const backend_iface *be = backend_or_default(o->backend); /* --weights as capture_run's */
    rc = model_load_as(o->model, o->tokenizer, be->kernels->matmul16 ? (model_wtype)o->weights : MODEL_W_F32, &model,
                       err);
    if (!rc) rc = prompts_tokenize(&l, o->prompts, &model, &o->prompt.chat, err);
    for (int i = 0; !rc && i < l.n; i++) { /* every prompt's --evict-until, before any work */
        kv_err why = {0};
        int64_t until;
        if (capture_evict_until(o, l.p[i].spans, l.p[i].n_spans, l.p[i].n_ids, &until, &why))
            rc = kv_fail(err, why.code, "%s:%d: prompt '%s': %s", o->prompts, l.p[i].line, l.p[i].id, why.msg);
    }
    if (!rc && o->prov) rc = capture_provenance(o->prov, o->model, o->tokenizer, &o->prompt, err);
    if (!rc && o->prov) rc = prov_set_text(&o->prov->prompt, "prompts", err);
    if (!rc && o->prov) rc = prov_add_file(o->prov, "prompts", o->prompts, NULL, err);
    if (!rc && rank == 0) rc = outdir_begin(&out, o->output, o->force, err), started = rc == KV_OK;
    char dir[4096] = "";
    if (started) snprintf(dir, sizeof dir, "%s", out.tmp_path);
    char *lines = calloc((size_t)l.n + 1, INDEX_LINE_MAX);
    if (!rc && !lines) rc = kv_fail(err, KV_EFAIL, "capture: out of memory");
    rc = capture_split(o, &model, &l, dir, lines, rc, err);   /* every rank takes part, even after a failure */
    if (!rc && rank == 0) rc = write_index(dir, lines, l.n, err);
    if (!rc && rank == 0) rc = outdir_commit(&out, err);
    else if (started) outdir_abort(&out);
    free(lines);
    model_free(&model);
    prompts_free(&l);
    return rc;
}
