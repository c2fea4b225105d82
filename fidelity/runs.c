/* The model runs of `kvtrace fidelity`: one full-cache walk (recorded as a
 * trace for sim) and one evicting walk per configuration, advanced together
 * chunk by chunk over the same tokens, each position's distributions compared
 * as soon as both exist (fid_row_compare), so memory is the model, the full
 * run's cache and O(configurations x (N + B)) cache rows plus O(T) numbers
 * per configuration: never a run's logits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "capture/capture.h"
#include "capture/run.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "fidelity/answer.h"
#include "fidelity/fidelity.h"
#include "fidelity/kl.h"
#include "model/model.h"

typedef struct {
    kv_run *run;             /* on the CPU, evicting inside, not recorded */
    int64_t done;            /* positions it has walked */
    double nll;              /* Σ −log q(next) */
    double answer;           /* Σ log q(next) over the answer's tokens */
    int64_t answer_rank;     /* the rank of the answer's first token */
} evict_run;

typedef struct {
    kv_model own;            /* loaded here unless the caller gave one (fidelity --prompts) */
    const kv_model *m;       /* own, or the caller's */
    void *cpu;               /* the CPU backend's instance: --threads threads for the model runs */
    int32_t *tokens;         /* [T] */
    char *text;              /* the prompt's text (recorded in the trace), NULL: given as ids or BOS alone */
    char *chat;              /* a chat prompt's record (recorded in the trace), else NULL */
    int64_t T, P;
    kv_run *full;            /* on the CPU, full cache, recorded as the trace sim replays; it walks the prompt in
                                chunks of the chunks' greatest common divisor, so that every evicting run's chunk
                                ends where one of its steps does */
    int64_t full_chunk;
    float *ring;             /* with several chunks: the full run's logits of the last ring_rows positions,
                                position t at row t % ring_rows ([ring_rows][V]); NULL: run_logits(full) */
    int64_t ring_rows, full_p0;   /* the largest chunk; the first position of the full run's last step */
    evict_run *runs;         /* [n] */
    double *head_scores;     /* [L][K] --head-scores (headkv, duo); NULL: none given */
    alloc_config *acs;       /* [n] each configuration's allocator, with the head ranking */
    int n;
    double nll_full, answer_full;
    int64_t answer_rank_full;
    int64_t n_pred;          /* positions with a next token */
    int64_t ans0, ans1;      /* the answer's token range [ans0, ans1); empty: none */
} fid_state;

static void state_free(fid_state *s)
{
    for (int i = 0; s->runs && i < s->n; i++) run_free(s->runs[i].run);
    free(s->runs);
    free(s->acs);
    free(s->head_scores);
    run_free(s->full);
    free(s->ring);
    free(s->tokens);
    free(s->text), free(s->chat);
    model_free(&s->own);
    backend_close(&BACKEND_CPU, s->cpu);
}

/* Whether a configuration reads W_o (the plan's inputs): the full trace then records /wo, so that
 * the offline replay projects with the same W_o as the model run. */
static bool reads_wo(const fidelity_opts *o)
{
    return plan_run_inputs(o->policies, o->n_policies, NULL, 0).wo;
}

/* A run of the sequence on the CPU: the full one recorded into trace_path
 * (queries, keys, values, log-probabilities; fc NULL), or configuration fc's
 * evicting one. */
static int open_run(const fidelity_opts *o, fid_state *s, const fid_config *r0, const fid_config *fc,
                    const char *trace_path, kv_run **r, kv_err *err)
{
    run_opts ro = {.model = s->m, .model_path = o->seq.model, .backend_ctx = s->cpu, .tokens = s->tokens, .T = s->T, .P = s->P,
                   .threads = o->sim_threads,
                   .chunk = fc ? fc->chunk : s->full_chunk, .evict = fc ? fc->pc : NULL, .budget = fc ? fc->budget : 0,
                   .alloc = fc ? &s->acs[fc - r0] : NULL, .output = trace_path, .verb = "fidelity",
                   .trace = {.storage = TRACE_F32}, .beyond_context = o->seq.beyond_context,
                   .prompt_text = trace_path ? s->text : NULL,
                   .prompt_chat = trace_path ? s->chat : NULL, .record_wo = trace_path && reads_wo(o)};
    ro.trace.want[TRACE_QUERIES] = ro.trace.want[TRACE_LOGPROBS] = trace_path != NULL;
    if (trace_path && o->prov) ro.trace.annotate = prov_write_h5, ro.trace.annotate_ctx = o->prov;
    return run_open(r, &ro, err);
}

/* The sequence of prompt ids given in memory (fidelity --prompts), room for q->generate more; the
 * prompt's text, when given, is the text these ids encode. */
static int given_sequence(const fid_sequence *q, int32_t **tokens, int64_t *P, int64_t *T, char **text, char **chat,
                          kv_err *err)
{
    *P = q->n_ids, *T = q->n_ids + q->generate;
    if (!(*tokens = kv_calloc((size_t)*T, sizeof(int32_t), "sequence", err))) return err->code;
    memcpy(*tokens, q->ids, sizeof(int32_t) * (size_t)q->n_ids);
    if (q->prompt.text && !(*text = strdup(q->prompt.text))) /* the ids' text, kept in the trace as capture does */
        return kv_fail(err, KV_EFAIL, "out of memory for the prompt's text");
    if (q->prompt.record && !(*chat = strdup(q->prompt.record)))
        return kv_fail(err, KV_EFAIL, "out of memory for the prompt's chat record");
    return KV_OK;
}

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* The full run's chunk (the chunks' greatest common divisor) and, with several chunks, the ring of its logits. */
static int full_walk(const fidelity_opts *o, fid_state *s, kv_err *err)
{
    s->full_chunk = o->chunks[0], s->ring_rows = o->chunks[0];
    for (int k = 1; k < o->n_chunks; k++) {
        s->full_chunk = gcd(s->full_chunk, o->chunks[k]);
        s->ring_rows = o->chunks[k] > s->ring_rows ? o->chunks[k] : s->ring_rows;
    }
    if (o->n_chunks < 2) return KV_OK;
    const size_t V = (size_t)s->m->cfg.vocab_size;
    s->ring = kv_calloc((size_t)s->ring_rows * V, sizeof *s->ring, "the full run's logits of the largest chunk", err);
    return s->ring ? KV_OK : err->code;
}

/* Model, tokens, the full run and its trace, one evicting run per configuration. */
static int setup(const fidelity_opts *o, fid_state *s, const char *trace_path, fid_results *r, kv_err *err)
{
    s->m = o->loaded ? o->loaded : &s->own;
    const backend_request cpu = {.threads = kv_threads(o->sim_threads)};
    int rc = backend_open(&BACKEND_CPU, &cpu, &s->cpu, err);
    if (!rc && !o->loaded) rc = model_load(o->seq.model, o->seq.tokenizer, &s->own, err);
    if (!rc && o->seq.ids) rc = given_sequence(&o->seq, &s->tokens, &s->P, &s->T, &s->text, &s->chat, err);
    else if (!rc) rc = run_sequence(&o->seq.prompt, s->m, o->seq.model, o->seq.generate, &s->tokens, &s->P, &s->T,
                                &s->text, &s->chat, err);
    if (!rc && o->prov) rc = capture_provenance(o->prov, o->seq.model, o->seq.tokenizer, &o->seq.prompt, err);
    if (!rc && o->head_scores) rc = capture_head_scores(o->head_scores, &s->m->cfg, &s->head_scores, err);
    if (!rc && o->head_scores && o->prov) rc = prov_add_file(o->prov, "head_scores", o->head_scores, NULL, err);
    if (!rc) rc = full_walk(o, s, err);
    if (!rc) rc = open_run(o, s, NULL, NULL, trace_path, &s->full, err);
    if (rc) return rc;
    s->ans0 = o->seq.answer_start, s->ans1 = o->seq.answer_end;
    s->n = r->n;
    if (!(s->runs = kv_calloc((size_t)s->n, sizeof *s->runs, "fidelity runs", err)) ||
        !(s->acs = kv_calloc((size_t)s->n, sizeof *s->acs, "fidelity runs", err)))
        return err->code;
    for (int i = 0; !rc && i < s->n; i++) {
        fid_config *fc = &r->c[i];
        s->acs[i] = *fc->ac;
        if (plan_reads_head_scores(fc->ac)) s->acs[i].head_scores = s->head_scores;
        rc = open_run(o, s, r->c, fc, NULL, &s->runs[i].run, err);
        if (!rc && (!(fc->kl = kv_calloc((size_t)s->T, sizeof(double), "per-position KL", err)) ||
                    !(fc->agree = kv_calloc((size_t)s->T, sizeof(uint8_t), "per-position agreement", err))))
            rc = err->code;
    }
    r->T = s->T, r->prompt_len = s->P, r->V = s->m->cfg.vocab_size;
    return rc;
}

/* The full run's next-token logits at position t (one of its last ring_rows positions). */
static const float *full_row(const fid_state *s, int64_t t)
{
    const int64_t V = s->m->cfg.vocab_size;
    return s->ring ? s->ring + (t % s->ring_rows) * V : run_logits(s->full) + (t - s->full_p0) * V;
}

/* Rows [p0, p0+n) of configuration i against the full run's logits. */
static void compare_rows(fid_state *s, fid_config *fc, int i, int64_t p0, int64_t n)
{
    const int64_t V = s->m->cfg.vocab_size;
    evict_run *e = &s->runs[i];
    for (int64_t r = 0; r < n; r++) {
        const int64_t t = p0 + r;
        const int32_t next = t + 1 < s->T ? s->tokens[t + 1] : -1;
        fid_row row;
        fid_row_compare(full_row(s, t), run_logits(e->run) + r * V, V, next, &row);
        if (next >= 0) {
            e->nll -= row.logp_q;
            if (i == 0) s->nll_full -= row.logp_p, s->n_pred++;
        }
        if (t + 1 == s->ans0 && s->ans1 > s->ans0) { /* the rank of the answer's first token */
            e->answer_rank = fid_token_rank(run_logits(e->run) + r * V, V, s->tokens[t + 1]);
            if (i == 0) s->answer_rank_full = fid_token_rank(full_row(s, t), V, s->tokens[t + 1]);
        }
        if (t + 1 >= s->ans0 && t + 1 < s->ans1) { /* log p(answer token | everything before it) */
            e->answer += row.logp_q;
            if (i == 0) s->answer_full += row.logp_p;
        }
        if (t < fc->budget) continue; /* earlier positions cannot be affected */
        fc->kl[fc->n_positions] = row.kl;
        fc->agree[fc->n_positions++] = row.argmax_p == row.argmax_q;
    }
}

/* The next step of a walk at position `done` in chunks of B: the rest of B-chunk of the prompt, then one. */
static int64_t step_len(const fid_state *s, int64_t done, int64_t B)
{
    return done < s->P ? (s->P - done < B ? s->P - done : B) : 1;
}

/* The full walk's step [p0, p0+n) (whose greedy token continues the sequence past the prompt), then every
 * evicting walk whose own chunk ends where this step does, on the same tokens. */
static int step(fid_state *s, fid_results *r, int64_t p0, int64_t n, kv_err *err)
{
    const int64_t V = s->m->cfg.vocab_size, end = p0 + n;
    int rc = run_step(s->full, n, err);
    s->full_p0 = p0;
    if (!rc && s->ring)
        for (int64_t q = 0; q < n; q++)
            memcpy(s->ring + ((p0 + q) % s->ring_rows) * V, run_logits(s->full) + q * V, sizeof(float) * (size_t)V);
    if (!rc && end < s->T && end >= s->P) { /* teacher forcing: the full model's greedy next token */
        s->tokens[end] = fid_argmax(run_logits(s->full) + (n - 1) * V, V);
        run_known(s->full, end + 1);
    }
    for (int i = 0; !rc && i < s->n; i++) {
        evict_run *e = &s->runs[i];
        const int64_t len = step_len(s, e->done, r->c[i].chunk);
        if (e->done + len != end) continue;   /* its chunk ends at a later step of the full walk */
        rc = run_step(e->run, len, err);
        if (!rc) compare_rows(s, &r->c[i], i, e->done, len), e->done = end;
    }
    return rc;
}

static void summarise(fid_state *s, fid_results *r)
{
    const double np = s->n_pred > 0 ? (double)s->n_pred : 1.0;
    r->ppl_full = exp(s->nll_full / np);
    r->answer_logprob_full = s->answer_full;
    r->answer_rank_full = s->answer_rank_full;
    r->answer_tokens = s->ans1 - s->ans0;
    for (int i = 0; i < r->n; i++) {
        fid_config *fc = &r->c[i];
        double sum = 0.0, mx = 0.0;
        int64_t agree = 0;
        for (int64_t j = 0; j < fc->n_positions; j++) {
            sum += fc->kl[j], agree += fc->agree[j];
            mx = fc->kl[j] > mx ? fc->kl[j] : mx;
        }
        const double m = fc->n_positions > 0 ? (double)fc->n_positions : 1.0;
        fc->kl_mean = sum / m, fc->kl_max = mx;
        fc->greedy_agree = fc->n_positions > 0 ? (double)agree / m : 1.0;
        double *tmp = malloc(sizeof(double) * (size_t)(fc->n_positions > 0 ? fc->n_positions : 1));
        KV_ASSERT(tmp != NULL);
        memcpy(tmp, fc->kl, sizeof(double) * (size_t)fc->n_positions);
        fc->kl_p95 = fid_p95(tmp, fc->n_positions);
        free(tmp);
        fc->ppl_evict = exp(s->runs[i].nll / np);
        fc->answer_logprob = s->runs[i].answer;
        fc->answer_rank = s->runs[i].answer_rank;
        fc->cache_peak = run_cache_peak(s->runs[i].run);
        fc->rows_peak = run_rows_peak(s->runs[i].run);
    }
}

/* With an answer: the greedy continuation after the question of the full run, then of each
 * configuration, one run at a time (answer.h). */
static int continuations(const fidelity_opts *o, fid_state *s, fid_results *r, kv_err *err)
{
    if (s->ans1 <= s->ans0) return KV_OK;
    const fid_answer_ctx c = {.m = s->m, .model_path = o->seq.model, .cpu = s->cpu, .prompt = s->tokens,
                              .ans0 = s->ans0, .ans1 = s->ans1, .chunk = o->seq.chunk,
                              .beyond_context = o->seq.beyond_context};
    fid_continuation out;
    int rc = fid_continue(&c, NULL, NULL, 0, &out, err);
    r->continuation_full = out.text, r->exact_match_full = out.match;
    for (int i = 0; !rc && i < r->n; i++) {
        fid_answer_ctx ci = c;
        ci.chunk = r->c[i].chunk;
        rc = fid_continue(&ci, r->c[i].pc, &s->acs[i], r->c[i].budget, &out, err);
        r->c[i].continuation = out.text, r->c[i].exact_match = out.match;
    }
    return rc;
}

int fid_run_models(const fidelity_opts *o, const char *trace_path, fid_results *r, kv_err *err)
{
    fid_state s;
    memset(&s, 0, sizeof s);
    int rc = setup(o, &s, trace_path, r, err);
    kv_progress prog;
    progress_start(&prog, "fidelity", s.T, o->quiet || rc);
    progress_stage(&prog, "model runs");
    for (int64_t p0 = 0; !rc && p0 < s.T;) {
        const int64_t n = step_len(&s, p0, s.full_chunk);
        rc = step(&s, r, p0, n, err);
        p0 += n;
        progress_update(&prog, p0);
    }
    if (!rc && s.ans1 > s.ans0) progress_stage(&prog, "answer continuations");
    if (!rc) rc = continuations(o, &s, r, err);
    progress_end(&prog);
    if (!rc) summarise(&s, r);
    if (!rc) rc = run_finish(s.full, err);
    state_free(&s);
    return rc;
}
