/* A model run over a token sequence (run.h). */
#include "capture/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "capture/evict.h"
#include "capture/record_device.h"
#include "capture/recorder.h"
#include "core/parallel.h"
#include "core/utf8.h"
#include "core/version.h"
#include "model/int8_product.h"
#include "expr/expr.h"
#include "model/forward.h"

struct kv_run {
    run_opts o;
    const backend_iface *be;
    trace_writer *w;         /* NULL: nothing recorded */
    forward_state fw;
    evict_engine ev;         /* with eviction */
    bool evicting;
    int32_t *snap;           /* [L][K][W] with /evict/retained (W: the most rows a head keeps, N under uniform) */
    int64_t rows, width;     /* with eviction: each cache's rows, the snapshot's width (evict_alloc_rows) */
    recorder rec;
    bool recording;          /* rec initialised */
    record_device rd;        /* with a staging backend */
    bool staged;             /* rd initialised */
    bool settled;
    const float **wo;        /* [L] the layers' W_o, with record_wo (trace_meta.wo) */
    forward_observer obs;
    const forward_observer *hooks; /* &obs, or NULL: no recording */
};

/* The prompt's text into *text (malloc'ed; NULL for --tokens and BOS alone),
 * checked: valid UTF-8, no NUL byte. */
static int prompt_text(const prompt_source *src, char **text, kv_err *err)
{
    *text = NULL;
    size_t len = 0;
    int rc = KV_OK;
    if (src->text_file) rc = prompt_read_text(src->text_file, text, &len, err);
    else if (src->text && !(*text = strdup(src->text))) rc = kv_fail(err, KV_EFAIL, "out of memory");
    else len = src->text ? strlen(src->text) : 0;
    if (rc || !*text) return rc;
    const char *where = src->text_file ? src->text_file : "--prompt";
    const int code = src->text_file ? KV_EINPUT : KV_EUSAGE;
    const int64_t bad = kv_utf8_invalid(*text, len);
    const size_t nul = strlen(*text);
    if (bad >= 0)
        rc = kv_fail(err, code, "%s: the prompt is not valid UTF-8 at byte offset %lld (byte 0x%02X)", where,
                     (long long)bad, (unsigned char)(*text)[bad]);
    else if (nul < len)
        rc = kv_fail(err, code, "%s: the prompt holds a NUL byte at byte offset %zu (a trace keeps the prompt as "
                     "text; give such ids with --tokens)", where, nul);
    if (rc) free(*text), *text = NULL;
    return rc;
}

int run_sequence(const prompt_source *src, const kv_model *m, const char *model_path, int64_t generate,
                 int32_t **tokens, int64_t *P, int64_t *T, char **text, char **chat, kv_err *err)
{
    char *t = NULL, *c = NULL;
    int rc = src->messages_file ? KV_OK : prompt_text(src, &t, err);
    if (!rc && prompt_is_chat(src) && !src->templated) { /* the templated text is what the ids encode */
        char *user = t;
        rc = prompt_chat_render(src, user, m, model_path, &t, &c, err);
        free(user);
    } else if (!rc && src->templated && src->record && !(c = strdup(src->record))) {
        rc = kv_fail(err, KV_EFAIL, "out of memory");
    }
    const prompt_source read = {.text = t, .tokens_file = src->tokens_file, /* the file read once */
                                .templated = prompt_is_chat(src) || src->templated};
    if (!rc) rc = prompt_tokens(&read, m, model_path, tokens, P, err);
    if (text) *text = rc ? NULL : t;
    if (chat) *chat = rc ? NULL : c;
    if (!text || rc) free(t);
    if (!chat || rc) free(c);
    if (rc) return rc;
    *T = *P + generate;
    int32_t *grown = realloc(*tokens, sizeof(int32_t) * (size_t)*T);
    if (!grown) {
        if (text) free(*text), *text = NULL;
        if (chat) free(*chat), *chat = NULL;
        return kv_fail(err, KV_EFAIL, "out of memory for %lld tokens", (long long)*T);
    }
    *tokens = grown;
    return KV_OK;
}

/* The walk is full causal attention: a sliding-window model is only right
 * while the window covers every position. */
static int check_window(const run_opts *o, kv_err *err)
{
    const model_config *c = &o->model->cfg;
    if (c->sliding_window > 0 && o->T + o->extra > c->sliding_window)
        return kv_fail(err, KV_EUSAGE, "%s: the model uses sliding-window attention (window %lld) "
                       "and the sequence has %lld tokens: kvtrace records full causal attention, "
                       "so it refuses sequences longer than the window", o->model_path,
                       (long long)c->sliding_window, (long long)(o->T + o->extra));
    return KV_OK;
}

/* Positions past the trained context take RoPE angles the model never saw
 * in training (extrapolation): refused unless asked for. */
static int check_context(const run_opts *o, kv_err *err)
{
    const int64_t ctx = o->model->cfg.context_len;
    if (ctx > 0 && o->T + o->extra > ctx && !o->beyond_context && o->extra)
        return kv_fail(err, KV_EUSAGE, "%s: the sequence (%lld positions) and the KVzip reconstruction pass "
                       "(%lld) need %lld positions but the model's trained context is %lld: use a shorter prompt "
                       "(or --allow-beyond-context)", o->model_path, (long long)o->T, (long long)o->extra,
                       (long long)(o->T + o->extra), (long long)ctx);
    if (ctx > 0 && o->T > ctx && !o->beyond_context)
        return kv_fail(err, KV_EUSAGE, "%s: the sequence has %lld positions but the model's trained context is "
                       "%lld: positions past it were never trained (RoPE extrapolation); "
                       "--allow-beyond-context runs it anyway", o->model_path, (long long)o->T, (long long)ctx);
    return KV_OK;
}

static void fill_meta(const run_opts *o, bool evicting, int64_t width, const float *const *wo, trace_meta *meta)
{
    const kv_model *m = o->model;
    const model_config *c = &m->cfg;
    memset(meta, 0, sizeof *meta);
    snprintf(meta->creator, sizeof meta->creator, "kvtrace %s %s", KVTRACE_VERSION, o->verb);
    snprintf(meta->model_name, sizeof meta->model_name, "%s", c->name[0] ? c->name : o->model_path);
    snprintf(meta->architecture, sizeof meta->architecture, "%s", c->architecture);
    snprintf(meta->rope_style, sizeof meta->rope_style, "%s", c->rope == ROPE_NEOX ? "neox" : "interleaved");
    snprintf(meta->capture_mode, sizeof meta->capture_mode, "%s", evicting ? "evict" : "full");
    snprintf(meta->compute, sizeof meta->compute, "%s", o->compute_int8 ? "int8" : "");
    if (evicting) {
        snprintf(meta->evict_policy, sizeof meta->evict_policy, "%s", o->evict->iface->name);
        snprintf(meta->evict_params, sizeof meta->evict_params, "%s", o->evict->canonical);
        const char *def = expr_definition(o->evict->iface);
        if (def) snprintf(meta->evict_definition, sizeof meta->evict_definition, "%s", def);
        meta->evict_budget = o->budget, meta->evict_chunk = o->chunk, meta->evict_until = o->evict_until;
        if (o->alloc) alloc_label(o->alloc, meta->evict_allocator, sizeof meta->evict_allocator);
        meta->evict_width = width;
    }
    meta->n_layers = c->n_layers, meta->n_heads = c->n_heads, meta->n_kv_heads = c->n_kv_heads;
    meta->head_dim = c->head_dim, meta->vocab_size = c->vocab_size, meta->rope_theta = c->rope_theta;
    meta->prompt_len = o->P, meta->capture_chunk = o->chunk;
    snprintf(meta->rope_scaling, sizeof meta->rope_scaling, "%s", c->rope_scaling);
    meta->rope_freq_factors = m->rope_div;
    meta->prompt_text = o->prompt_text, meta->prompt_chat = o->prompt_chat;
    meta->spans = o->spans, meta->n_spans = o->n_spans;
    meta->wo = wo, meta->wo_dim = wo ? c->dim : 0;
}

/* The walk on the backend's view of the model: caches of T rows, or N + B
 * with eviction (and its engine, and the snapshots' buffer). */
static int start_walk(kv_run *r, kv_err *err)
{
    const run_opts *o = &r->o;
    const model_config *c = &o->model->cfg;
    const kv_model *walk = o->model;
    int rc = r->be->prepare ? r->be->prepare(o->backend_ctx, o->model, o->T, o->chunk, o->trace.want[TRACE_COLSUM],
                                             &walk, err)
                            : KV_OK;
    const int64_t n_pos = o->T + o->extra; /* --kvzip's reconstruction pass reads `extra` more */
    const int64_t cap = r->evicting ? r->rows : n_pos;
    if (!rc) rc = forward_init_cache(&r->fw, walk, r->be->kernels, o->backend_ctx, n_pos, cap, o->chunk, err);
    KV_ASSERT(!o->last_logits_only || (!o->trace.want[TRACE_LOGPROBS] && !o->trace.want[TRACE_LOGITS]));
    r->fw.last_logits_only = o->last_logits_only;
    if (rc || !r->evicting) return rc;
    rc = evict_init_alloc(&r->ev, o->evict, o->alloc, o->budget, c, r->fw.max_chunk, r->fw.cap, err);
    r->ev.rope = (rope_spec){.theta = c->rope_theta, .style = c->rope, .div = o->model->rope_div};
    r->ev.layers = o->model->layers, r->ev.dim = c->dim;
    r->ev.until = o->evict_until;
    if (!rc && r->w && o->trace.want[TRACE_EVICT_RETAINED] &&
        !(r->snap = kv_calloc((size_t)(c->n_layers * c->n_kv_heads * r->width), sizeof(int32_t), "snapshot", err)))
        rc = err->code;
    if (!rc) r->fw.ev = &r->ev.hooks;
    return rc;
}

/* The recording path: the recorder, behind device staging where the
 * backend's memory is not the host's. */
static int start_recording(kv_run *r, kv_err *err)
{
    const run_opts *o = &r->o;
    const bool *want = o->trace.want;
    recorder_wants rw = {want[TRACE_QUERIES], want[TRACE_COLSUM], want[TRACE_ATTN_FULL], want[TRACE_LOGITS],
                         want[TRACE_ATTN_OUT], want[TRACE_LOGPROBS]};
    int rc = recorder_init(&r->rec, r->w, &o->model->cfg, rw, o->tokens, o->T, o->chunk, err);
    if (rc) return rc;
    r->recording = true;
    r->rec.known = o->P;
    r->rec.threads = kv_threads(o->threads);
    r->obs = recorder_observer(&r->rec);
    if (r->be->staging) {
        rc = record_device_init(&r->rd, &r->rec, r->be, o->backend_ctx, &r->rec.cfg, r->fw.max_chunk, 2, err);
        r->staged = true; /* stopped by run_free, failed or not */
        r->obs = record_device_observer(&r->rd);
    }
    r->hooks = &r->obs;
    return rc;
}

int run_open(kv_run **out, const run_opts *o, kv_err *err)
{
    kv_run *r = *out = kv_calloc(1, sizeof *r, "model run", err);
    if (!r) return err->code;
    r->o = *o;
    r->be = backend_or_default(o->backend);
    r->evicting = o->evict && o->evict->iface;
    r->o.trace.expected_tokens = o->T;
    int rc = check_window(o, err);
    if (!rc) rc = check_context(o, err);
    KV_ASSERT(!o->evict_until || (r->evicting && o->evict_until <= o->P)); /* capture_evict_until checked it */
    if (!rc && r->evicting) { /* the allocator's checks, before the trace exists */
        /* after evict_until the cache grows by every later position: room for them, or for a chunk */
        const int64_t grow = o->evict_until && o->T - o->evict_until > o->chunk ? o->T - o->evict_until : o->chunk;
        rc = evict_alloc_rows(o->evict, o->alloc, o->budget, &o->model->cfg, grow, o->T, &r->rows, &r->width, err);
    }
    if (!rc && o->output) {
        trace_meta meta;
        if (o->record_wo && !(r->wo = kv_calloc((size_t)o->model->cfg.n_layers, sizeof *r->wo, "W_o list", err)))
            return err->code;
        for (int64_t l = 0; r->wo && l < o->model->cfg.n_layers; l++) r->wo[l] = o->model->layers[l].wo;
        fill_meta(o, r->evicting, r->width, r->wo, &meta);
        rc = trace_create(o->output, &meta, &r->o.trace, &r->w, err);
    }
    if (!rc) rc = start_walk(r, err);
    if (!rc && r->w) rc = start_recording(r, err);
    return rc;
}

int run_step(kv_run *r, int64_t n, kv_err *err)
{
    /* last_logits_only: a step needs its logits only when the next token is chosen after it */
    const int64_t end = r->fw.len + n;
    r->fw.skip_logits = !(end >= r->o.P && end < r->o.T);
    int rc = forward_chunk(&r->fw, r->o.tokens + r->fw.len, n, r->hooks, err);
    if (rc || !r->snap || !evict_step_evicts(&r->ev, r->fw.len)) return rc; /* only steps that evicted */
    evict_snapshot(&r->ev, &r->fw, r->snap);
    return trace_write_retained(r->w, r->fw.steps - 1, r->fw.len - 1, r->snap, err);
}

int run_extra(kv_run *r, const int32_t *tokens, int64_t n, const forward_observer *obs, kv_err *err)
{
    KV_ASSERT(!r->evicting && r->fw.len >= r->o.T && r->fw.len + n <= r->o.T + r->o.extra);
    int rc = KV_OK;
    r->fw.skip_logits = false;
    for (int64_t i = 0; !rc && i < n; i += r->fw.max_chunk)
        rc = forward_chunk(&r->fw, tokens + i, n - i < r->fw.max_chunk ? n - i : r->fw.max_chunk, obs, err);
    return rc;
}

trace_writer *run_trace(const kv_run *r)
{
    return r->w;
}

void run_known(kv_run *r, int64_t known)
{
    if (r->staged) r->rd.known = known; /* the recorder is the writer thread's */
    else r->rec.known = known;
}

const float *run_logits(const kv_run *r)
{
    return r->fw.logits;
}

int64_t run_cache_peak(const kv_run *r)
{
    const model_config *c = &r->o.model->cfg;
    int64_t peak = 0;
    for (int64_t i = 0; r->fw.cache_peak && i < c->n_layers * c->n_kv_heads; i++)
        peak = r->fw.cache_peak[i] > peak ? r->fw.cache_peak[i] : peak;
    return peak;
}

int64_t run_rows_peak(const kv_run *r)
{
    return r->fw.rows_peak;
}

int run_settle(kv_run *r, kv_err *err)
{
    if (r->settled) return KV_OK;
    r->settled = true;
    int rc = r->staged ? record_device_drain(&r->rd, err) : KV_OK;
    if (!rc && r->recording && r->rec.want.colsum && r->be->colsum)
        rc = r->be->colsum(r->o.backend_ctx, r->rec.colsum, err); /* the backend summed them, not the recorder */
    return rc;
}

/* This process's peak resident memory in KiB: Linux's VmHWM, the high-water mark of this image alone.
 * getrusage's ru_maxrss (the fallback) keeps across exec the peak of the process image before it, so a
 * capture started from a large harness (a Python test) would report the harness's memory. */
static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && kib < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kib = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    struct rusage ru;
    return kib >= 0 ? kib : getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

void run_print_stats(const kv_run *r, double load_s, double secs)
{
    const forward_state *f = &r->fw;
    const int64_t T = r->o.T;
    const long rss_kib = peak_rss_kib();
    const uint64_t dev_peak = r->be->peak_bytes ? r->be->peak_bytes(r->o.backend_ctx) : 0;
    fprintf(stderr, "capture-stats: load_s %.3f tokens %lld seconds %.3f tokens_per_s %.1f gemm_gflop %.3f "
                    "gemm_s %.3f gemm_gflops %.2f attn_gflop %.3f attn_s %.3f attn_gflops %.2f "
                    "cache_rows %lld cache_peak_rows %lld rows_peak %lld peak_rss_kib %ld device_peak_gib %.3f%s%s\n",
            load_s, (long long)T, secs, (double)T / secs, f->gemm_flops * 1e-9, f->gemm_seconds,
            f->gemm_flops * 1e-9 / f->gemm_seconds, f->attn_flops * 1e-9, f->attn_seconds,
            f->attn_flops * 1e-9 / f->attn_seconds, (long long)f->cap, (long long)run_cache_peak(r), (long long)f->rows_peak, rss_kib,
            (double)dev_peak / (1024.0 * 1024.0 * 1024.0), r->o.compute_int8 ? " int8_kernel " : "",
            r->o.compute_int8 ? (int8_amx() ? "amx" : "portable") : "");
}

int run_finish(kv_run *r, kv_err *err)
{
    int rc = run_settle(r, err);
    if (rc || !r->w) return rc;
    rc = recorder_finish(&r->rec, err);
    if (!rc) {
        rc = trace_finish(r->w, err);
        r->w = NULL;
    }
    return rc;
}

void run_free(kv_run *r)
{
    if (!r) return;
    kv_err ignored = {0};
    if (r->staged) record_device_finish(&r->rd, &ignored); /* the writer thread stops here */
    recorder_free(&r->rec);
    forward_free(&r->fw);
    evict_free(&r->ev);
    free(r->snap);
    free(r->wo);
    if (r->w) trace_abort(r->w);
    free(r);
}
