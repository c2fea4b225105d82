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

#include "capture/evict.h"
#include "model/forward.h"
#include "capture/recorder.h"
#include "core/progress.h"
#include "core/version.h"
#include "fidelity/fidelity.h"
#include "fidelity/kl.h"

typedef struct {
    forward_state fw;
    evict_engine ev;
    double nll;              /* Σ −log q(next) */
} evict_run;

typedef struct {
    kv_model model;
    int32_t *tokens;         /* [T] */
    int64_t T, P;
    trace_writer *w;
    forward_state full;
    recorder rec;
    evict_run *runs;         /* [n] */
    int n;
    double nll_full;
    int64_t n_pred;          /* positions with a next token */
} fid_state;

static void state_free(fid_state *s)
{
    for (int i = 0; s->runs && i < s->n; i++) forward_free(&s->runs[i].fw), evict_free(&s->runs[i].ev);
    free(s->runs);
    if (s->w) trace_abort(s->w);
    recorder_free(&s->rec);
    forward_free(&s->full);
    free(s->tokens);
    model_free(&s->model);
}

static int open_trace(const fidelity_opts *o, fid_state *s, const char *path, kv_err *err)
{
    const model_config *c = &s->model.cfg;
    trace_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.creator, sizeof meta.creator, "kvtrace %s fidelity", KVTRACE_VERSION);
    snprintf(meta.model_name, sizeof meta.model_name, "%s", c->name[0] ? c->name : o->seq.model);
    snprintf(meta.architecture, sizeof meta.architecture, "%s", c->architecture);
    snprintf(meta.rope_style, sizeof meta.rope_style, "%s", c->rope == ROPE_NEOX ? "neox" : "interleaved");
    snprintf(meta.capture_mode, sizeof meta.capture_mode, "full");
    snprintf(meta.rope_scaling, sizeof meta.rope_scaling, "%s", c->rope_scaling);
    meta.n_layers = c->n_layers, meta.n_heads = c->n_heads, meta.n_kv_heads = c->n_kv_heads;
    meta.head_dim = c->head_dim, meta.vocab_size = c->vocab_size, meta.rope_theta = c->rope_theta;
    meta.prompt_len = s->P, meta.capture_chunk = o->seq.chunk, meta.rope_freq_factors = s->model.rope_div;
    trace_create_opts topts = {.storage = TRACE_F32, .expected_tokens = s->T};
    topts.want[TRACE_QUERIES] = topts.want[TRACE_LOGPROBS] = true;
    int rc = trace_create(path, &meta, &topts, &s->w, err);
    recorder_wants want = {.queries = true};
    if (!rc) rc = recorder_init(&s->rec, s->w, c, want, s->tokens, s->T, o->seq.chunk, err);
    return rc;
}

/* Model, tokens, the full walk and its trace, one evicting walk per configuration. */
static int setup(const fidelity_opts *o, fid_state *s, const char *trace_path, fid_results *r, kv_err *err)
{
    int rc = model_load(o->seq.model, o->seq.tokenizer, &s->model, err);
    if (!rc) rc = capture_prompt_tokens(&o->seq, &s->model, &s->tokens, &s->P, err);
    if (rc) return rc;
    s->T = s->P + o->seq.generate;
    int32_t *grown = realloc(s->tokens, sizeof(int32_t) * (size_t)s->T);
    if (!grown) return kv_fail(err, KV_EFAIL, "fidelity: out of memory for %lld tokens", (long long)s->T);
    s->tokens = grown;
    const model_config *c = &s->model.cfg;
    if (c->sliding_window > 0 && s->T > c->sliding_window)
        return kv_fail(err, KV_EUSAGE, "%s: sliding-window attention (window %lld) is shorter than the %lld tokens",
                       o->seq.model, (long long)c->sliding_window, (long long)s->T);
    if ((rc = open_trace(o, s, trace_path, err)) ||
        (rc = forward_init(&s->full, &s->model, &FORWARD_CPU, s->T, o->seq.chunk, err)))
        return rc;
    s->n = r->n;
    if (!(s->runs = kv_calloc((size_t)s->n, sizeof *s->runs, "fidelity runs", err))) return err->code;
    for (int i = 0; !rc && i < s->n; i++) {
        fid_config *fc = &r->c[i];
        evict_run *e = &s->runs[i];
        const int64_t cap = evict_cache_rows(fc->pc, fc->budget, o->seq.chunk, s->T);
        rc = forward_init_cache(&e->fw, &s->model, &FORWARD_CPU, s->T, cap, o->seq.chunk, err);
        if (!rc) rc = evict_init(&e->ev, fc->pc, fc->budget, c, e->fw.max_chunk, e->fw.cap, err);
        if (!rc) e->fw.ev = &e->ev.hooks;
        if (!rc && (!(fc->kl = kv_calloc((size_t)s->T, sizeof(double), "per-position KL", err)) ||
                    !(fc->agree = kv_calloc((size_t)s->T, sizeof(uint8_t), "per-position agreement", err))))
            rc = err->code;
    }
    r->T = s->T, r->prompt_len = s->P, r->V = c->vocab_size;
    return rc;
}

/* Rows [p0, p0+n) of configuration i against the full run's logits. */
static void compare_rows(fid_state *s, fid_config *fc, int i, int64_t p0, int64_t n)
{
    const int64_t V = s->model.cfg.vocab_size;
    evict_run *e = &s->runs[i];
    for (int64_t r = 0; r < n; r++) {
        const int64_t t = p0 + r;
        const int32_t next = t + 1 < s->T ? s->tokens[t + 1] : -1;
        fid_row row;
        fid_row_compare(s->full.logits + r * V, e->fw.logits + r * V, V, next, &row);
        if (next >= 0) {
            e->nll -= row.logp_q;
            if (i == 0) s->nll_full -= row.logp_p, s->n_pred++;
        }
        if (t < fc->budget) continue; /* earlier positions cannot be affected */
        fc->kl[fc->n_positions] = row.kl;
        fc->agree[fc->n_positions++] = row.argmax_p == row.argmax_q;
    }
}

/* One chunk [p0, p0+n): the full walk (whose greedy token continues the
 * sequence past the prompt), then every evicting walk on the same tokens. */
static int step(fid_state *s, fid_results *r, int64_t p0, int64_t n, kv_err *err)
{
    forward_observer obs = recorder_observer(&s->rec);
    const int64_t V = s->model.cfg.vocab_size;
    int rc = forward_chunk(&s->full, s->tokens + p0, n, &obs, err);
    if (!rc && p0 + n < s->T && p0 + n >= s->P) { /* teacher forcing: the full model's greedy next token */
        s->tokens[p0 + n] = fid_argmax(s->full.logits + (n - 1) * V, V);
        s->rec.known = p0 + n + 1;
    }
    for (int i = 0; !rc && i < s->n; i++) {
        rc = forward_chunk(&s->runs[i].fw, s->tokens + p0, n, NULL, err);
        if (!rc) compare_rows(s, &r->c[i], i, p0, n);
    }
    return rc;
}

static void summarise(fid_state *s, fid_results *r)
{
    const double np = s->n_pred > 0 ? (double)s->n_pred : 1.0;
    r->ppl_full = exp(s->nll_full / np);
    for (int i = 0; i < r->n; i++) {
        fid_config *fc = &r->c[i];
        const forward_state *f = &s->runs[i].fw;
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
        for (int64_t lg = 0; lg < s->model.cfg.n_layers * s->model.cfg.n_kv_heads; lg++)
            fc->cache_peak = f->cache_peak[lg] > fc->cache_peak ? f->cache_peak[lg] : fc->cache_peak;
    }
}

int fid_run_models(const fidelity_opts *o, const char *trace_path, fid_results *r, kv_err *err)
{
    fid_state s;
    memset(&s, 0, sizeof s);
    int rc = setup(o, &s, trace_path, r, err);
    kv_progress prog;
    s.rec.known = s.P;
    progress_start(&prog, "fidelity runs", s.T, o->quiet || rc);
    for (int64_t p0 = 0; !rc && p0 < s.T;) {
        int64_t n = p0 < s.P ? (s.P - p0 < o->seq.chunk ? s.P - p0 : o->seq.chunk) : 1;
        rc = step(&s, r, p0, n, err);
        p0 += n;
        progress_update(&prog, p0);
    }
    progress_end(&prog);
    if (!rc) summarise(&s, r);
    if (!rc) rc = recorder_finish(&s.rec, err);
    if (!rc) {
        rc = trace_finish(s.w, err);
        s.w = NULL;
    }
    state_free(&s);
    return rc;
}
