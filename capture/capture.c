/* The capture driver: tokens in, chunked prefill, generation, trace out. */
#include "capture/capture.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "capture/capture_device.h"
#include "capture/evict.h"
#include "model/forward.h"
#include "model/model.h"
#include "capture/recorder.h"
#include "model/tokenizer/token_file.h"
#include "model/tokenizer/tokenizer.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/version.h"

/* The prompt's token ids, BOS first: from --tokens, --prompt, --prompt-file, or BOS alone. */
int capture_prompt_tokens(const capture_opts *o, const kv_model *m, int32_t **ids, int64_t *n, kv_err *err)
{
    if (o->tokens_file) return token_file_read(o->tokens_file, m->cfg.vocab_size, ids, n, err);
    if ((o->prompt || o->prompt_file) && !m->has_vocab)
        return kv_fail(err, KV_EUSAGE, "%s has no vocabulary to encode a prompt: give --tokens FILE%s",
                       o->model, strncmp(o->model, "random:", 7) ? " (or --tokenizer for a llama2.c checkpoint)" : "");
    if ((o->prompt || o->prompt_file) && m->vocab.kind == VOCAB_BYTE_BPE)
        return kv_fail(err, KV_EUSAGE, "%s: the tokenizer is byte-level BPE (as Llama 3's and Qwen's), "
                       "which kvtrace cannot encode yet: tokenize the prompt with the model's own tokenizer "
                       "and give the ids with --tokens FILE", o->model);
    char *text = NULL;
    size_t len = 0;
    if (o->prompt_file) {
        FILE *f = fopen(o->prompt_file, "rb");
        if (!f) return kv_fail(err, KV_EFAIL, "%s: cannot open the prompt file", o->prompt_file);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = size >= 0 ? malloc((size_t)size + 1) : NULL;
        len = text ? fread(text, 1, (size_t)size, f) : 0;
        fclose(f);
        if (!text || len != (size_t)size) {
            free(text);
            return kv_fail(err, KV_EFAIL, "%s: cannot read the prompt file", o->prompt_file);
        }
        text[len] = '\0';
    }
    int rc;
    if (o->prompt || text) {
        rc = tokenizer_encode(&m->vocab, text ? text : o->prompt, text ? len : strlen(o->prompt), m->vocab.add_bos, ids,
                              n, err);
    } else { /* BOS alone, as llama2.c's run from an empty prompt */
        int32_t bos = m->has_vocab && m->vocab.bos >= 0 ? m->vocab.bos : 1;
        *ids = malloc(sizeof(int32_t));
        if (!*ids) return kv_fail(err, KV_EFAIL, "out of memory");
        (*ids)[0] = bos < m->cfg.vocab_size ? bos : 0;
        *n = 1;
        rc = KV_OK;
    }
    free(text);
    return rc;
}

/* Greedy (ties: the lowest id) or temperature sampling from logits[V]. */
static int32_t pick_token(const float *logits, int64_t V, double temperature, kv_rng *rng)
{
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return (int32_t)best;
    double sum = 0.0;
    for (int64_t i = 0; i < V; i++) sum += exp(((double)logits[i] - logits[best]) / temperature);
    double u = rng_uniform(rng) * sum, acc = 0.0;
    for (int64_t i = 0; i < V; i++) {
        acc += exp(((double)logits[i] - logits[best]) / temperature);
        if (u < acc) return (int32_t)i;
    }
    return (int32_t)best;
}

static void fill_meta(const capture_opts *o, const kv_model *m, int64_t prompt_len, trace_meta *meta)
{
    const model_config *c = &m->cfg;
    memset(meta, 0, sizeof *meta);
    snprintf(meta->creator, sizeof meta->creator, "kvtrace %s capture", KVTRACE_VERSION);
    snprintf(meta->model_name, sizeof meta->model_name, "%s", c->name[0] ? c->name : o->model);
    snprintf(meta->architecture, sizeof meta->architecture, "%s", c->architecture);
    snprintf(meta->rope_style, sizeof meta->rope_style, "%s", c->rope == ROPE_NEOX ? "neox" : "interleaved");
    snprintf(meta->capture_mode, sizeof meta->capture_mode, "%s", o->evict.iface ? "evict" : "full");
    if (o->evict.iface) {
        snprintf(meta->evict_policy, sizeof meta->evict_policy, "%s", o->evict.iface->name);
        snprintf(meta->evict_params, sizeof meta->evict_params, "%s", o->evict.canonical);
        meta->evict_budget = o->budget, meta->evict_chunk = o->chunk;
    }
    meta->n_layers = c->n_layers, meta->n_heads = c->n_heads, meta->n_kv_heads = c->n_kv_heads;
    meta->head_dim = c->head_dim, meta->vocab_size = c->vocab_size, meta->rope_theta = c->rope_theta;
    meta->prompt_len = prompt_len, meta->capture_chunk = o->chunk;
    snprintf(meta->rope_scaling, sizeof meta->rope_scaling, "%s", c->rope_scaling);
    meta->rope_freq_factors = m->rope_div;
}

/* The walk is full causal attention: a sliding-window model is only right
 * while the window covers every position. */
static int check_window(const capture_opts *o, const model_config *c, int64_t T, kv_err *err)
{
    if (c->sliding_window > 0 && T > c->sliding_window)
        return kv_fail(err, KV_EUSAGE, "%s: the model uses sliding-window attention (window %lld) "
                       "and the sequence has %lld tokens: kvtrace records full causal attention, "
                       "so it refuses sequences longer than the window", o->model,
                       (long long)c->sliding_window, (long long)T);
    return KV_OK;
}

static int check_full_attention(const capture_opts *o, const model_config *c, int64_t T, kv_err *err)
{
    double gib = (double)c->n_layers * (double)c->n_heads * (double)T * (double)T * 4.0 / (1u << 30);
    if (o->attention == ATTN_FULL && gib > o->max_attention_gib)
        return kv_fail(err, KV_EUSAGE,
                       "capture: --attention full would store %.1f GiB (L*H*T*T floats) > --max-attention-gib %g; "
                       "raise it or use --attention colsum", gib, o->max_attention_gib);
    return KV_OK;
}

typedef struct {
    kv_model model;
    int32_t *tokens;   /* [T] */
    trace_writer *w;
    forward_state fw;
    recorder rec;
    evict_engine ev;   /* with --evict */
    capture_device dev; /* with --device cuda */
    int32_t *snap;     /* [L][K][N] with --retained */
} capture_run_state;

/* After each chunk of an evicting run: the /evict/retained snapshot. */
static int after_chunk(const capture_opts *o, capture_run_state *s, kv_err *err)
{
    if (!o->evict.iface || !o->retained) return KV_OK;
    evict_snapshot(&s->ev, &s->fw, s->snap);
    return trace_write_retained(s->w, s->fw.steps - 1, s->fw.len - 1, s->snap, err);
}

/* Prefill in chunks of B, then generate one token at a time, each chosen
 * from the logits of the last row processed. */
static int run_model(const capture_opts *o, capture_run_state *s, int64_t P, int64_t T, kv_err *err)
{
    const int64_t V = s->model.cfg.vocab_size;
    forward_observer obs = o->device_cuda ? capture_device_observer(&s->dev) : recorder_observer(&s->rec);
    const forward_observer *hooks = o->dry_run ? NULL : &obs;
    kv_rng rng;
    rng_init(&rng, o->seed, 0x5a3b1e, 0, 0);
    kv_progress prog;
    progress_start(&prog, "capture", T, o->quiet);
    int rc = KV_OK;
    int64_t last_rows = 0; /* rows of the chunk whose logits fw.logits holds */
    for (int64_t p0 = 0; !rc && p0 < P; p0 += o->chunk) {
        last_rows = P - p0 < o->chunk ? P - p0 : o->chunk;
        rc = forward_chunk(&s->fw, s->tokens + p0, last_rows, hooks, err);
        if (!rc) rc = after_chunk(o, s, err);
        progress_update(&prog, p0 + last_rows);
    }
    for (int64_t t = P; !rc && t < T; t++) {
        s->tokens[t] = pick_token(s->fw.logits + (last_rows - 1) * V, V, o->temperature, &rng);
        if (o->device_cuda) capture_device_known(&s->dev, t + 1); /* the recorder is the writer thread's */
        else s->rec.known = t + 1;
        last_rows = 1;
        rc = forward_chunk(&s->fw, s->tokens + t, 1, hooks, err);
        if (!rc) rc = after_chunk(o, s, err);
        progress_update(&prog, t + 1);
    }
    progress_end(&prog);
    return rc;
}

/* The walk's state: caches of T rows, or N + B with eviction (and its engine). */
static int start_walk(const capture_opts *o, capture_run_state *s, int64_t T, kv_err *err)
{
    const model_config *c = &s->model.cfg;
    if (o->device_cuda) return capture_device_start(&s->dev, o, &s->model, T, &s->fw, err);
    if (!o->evict.iface) return forward_init(&s->fw, &s->model, &FORWARD_CPU, T, o->chunk, err);
    const int64_t cap = evict_cache_rows(&o->evict, o->budget, o->chunk, T);
    int rc = forward_init_cache(&s->fw, &s->model, &FORWARD_CPU, T, cap, o->chunk, err);
    if (!rc) rc = evict_init(&s->ev, &o->evict, o->budget, c, s->fw.max_chunk, s->fw.cap, err);
    if (!rc && o->retained &&
        !(s->snap = kv_calloc((size_t)(c->n_layers * c->n_kv_heads * o->budget), sizeof(int32_t), "snapshot", err)))
        rc = err->code;
    if (!rc) s->fw.ev = &s->ev.hooks;
    return rc;
}

/* --stats: throughput, GEMM and attention rates, the largest cache (rows of
 * one layer and kv head) and the process's peak RSS (benchmarks). */
static void print_stats(const capture_run_state *s, int64_t T, double load_s, double secs)
{
    const forward_state *f = &s->fw;
    int64_t peak = 0;
    for (int64_t i = 0; i < s->model.cfg.n_layers * s->model.cfg.n_kv_heads; i++)
        peak = f->cache_peak[i] > peak ? f->cache_peak[i] : peak;
    struct rusage ru;
    long rss_kib = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
    fprintf(stderr, "capture-stats: load_s %.3f tokens %lld seconds %.3f tokens_per_s %.1f gemm_gflop %.3f "
                    "gemm_s %.3f gemm_gflops %.2f attn_gflop %.3f attn_s %.3f attn_gflops %.2f "
                    "cache_rows %lld cache_peak_rows %lld peak_rss_kib %ld device_peak_gib %.3f\n",
            load_s, (long long)T, secs, (double)T / secs, f->gemm_flops * 1e-9, f->gemm_seconds,
            f->gemm_flops * 1e-9 / f->gemm_seconds, f->attn_flops * 1e-9, f->attn_seconds,
            f->attn_flops * 1e-9 / f->attn_seconds, (long long)f->cap, (long long)peak, rss_kib,
            capture_device_peak_gib(&s->dev));
}

static void print_text(const kv_model *m, const int32_t *tokens, int64_t T)
{
    if (!m->has_vocab) return;
    char *text = tokenizer_decode(&m->vocab, tokens, T);
    if (text) printf("%s\n", text);
    free(text);
}

int capture_run(const capture_opts *o, kv_err *err)
{
    capture_run_state s;
    memset(&s, 0, sizeof s);
    if (o->threads > 0) openblas_set_num_threads(o->threads);
    int rc = o->device_cuda ? capture_device_open(&s.dev, o, err) : KV_OK; /* no usable GPU: before any work */
    double load_started = kv_now_seconds();
    if (!rc) rc = model_load(o->model, o->tokenizer, &s.model, err);
    double load_s = kv_now_seconds() - load_started;
    int64_t P = 0;
    if (!rc) rc = capture_prompt_tokens(o, &s.model, &s.tokens, &P, err);
    const int64_t T = P + o->generate;
    if (!rc) rc = check_full_attention(o, &s.model.cfg, T, err);
    if (!rc) rc = check_window(o, &s.model.cfg, T, err);
    if (!rc) {
        int32_t *grown = realloc(s.tokens, sizeof(int32_t) * (size_t)T);
        if (!grown) rc = kv_fail(err, KV_EFAIL, "out of memory for %lld tokens", (long long)T);
        else s.tokens = grown;
    }
    trace_meta meta;
    trace_create_opts topts = {.storage = o->dtype, .force = o->force, .expected_tokens = T};
    topts.want[TRACE_QUERIES] = o->record_queries;
    topts.want[TRACE_COLSUM] = o->attention == ATTN_COLSUM || o->attention == ATTN_FULL;
    topts.want[TRACE_ATTN_FULL] = o->attention == ATTN_FULL;
    topts.want[TRACE_LOGITS] = o->logits;
    topts.want[TRACE_LOGPROBS] = true;
    topts.want[TRACE_EVICT_RETAINED] = topts.want[TRACE_EVICT_STEP_END] = o->evict.iface && o->retained;
    if (!rc && !o->dry_run) {
        fill_meta(o, &s.model, P, &meta);
        rc = trace_create(o->output, &meta, &topts, &s.w, err);
    }
    if (!rc) rc = start_walk(o, &s, T, err);
    recorder_wants want = {o->record_queries, topts.want[TRACE_COLSUM], topts.want[TRACE_ATTN_FULL], o->logits};
    if (!rc && !o->dry_run) rc = recorder_init(&s.rec, s.w, &s.model.cfg, want, s.tokens, T, o->chunk, err);
    s.rec.known = P;
    if (!rc && !o->dry_run && o->device_cuda) rc = capture_device_record(&s.dev, &s.rec, s.fw.max_chunk, err);
    double started = kv_now_seconds();
    if (!rc) rc = run_model(o, &s, P, T, err);
    if (!rc && !o->dry_run && o->device_cuda) rc = capture_device_finish(&s.dev, &s.rec, err); /* writes drained */
    if (!rc && o->stats) print_stats(&s, T, load_s, kv_now_seconds() - started);
    if (o->device_cuda) capture_device_free(&s.dev, &s.fw); /* the writer thread stops here */
    if (!rc && !o->dry_run) rc = recorder_finish(&s.rec, err);
    if (!rc && !o->dry_run) {
        rc = trace_finish(s.w, err);
        s.w = NULL;
    }
    if (!rc && o->print_text) print_text(&s.model, s.tokens, T);
    if (s.w) trace_abort(s.w);
    recorder_free(&s.rec);
    forward_free(&s.fw);
    evict_free(&s.ev);
    free(s.snap);
    free(s.tokens);
    model_free(&s.model);
    return rc;
}
