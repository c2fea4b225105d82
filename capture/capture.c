/* The capture driver: the backend opened before any work, the model and
 * its tokens, one run (run.h) over chunked prefill and generation, the
 * trace out. --dry-run is decided here, once: the run gets no output. */
#include "capture/capture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/kvzip.h"
#include "capture/run.h"
#include "model/int8_product.h"
#include "model/weights.h"
#include "core/outfile.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "core/rng.h"
#include "model/model.h"
#include "model/tokenizer/tokenizer.h"

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

static int check_full_attention(const capture_opts *o, const model_config *c, int64_t T, kv_err *err)
{
    double gib = (double)c->n_layers * (double)c->n_heads * (double)T * (double)T * 4.0 / (1u << 30);
    if (o->attention == ATTN_FULL && gib > o->max_attention_gib)
        return kv_fail(err, KV_EUSAGE,
                       "capture: --attention full would store %.1f GiB (L*H*T*T floats) > --max-attention-gib %g; "
                       "raise it or use --attention colsum", gib, o->max_attention_gib);
    return KV_OK;
}

static void print_text(const kv_model *m, const int32_t *tokens, int64_t T)
{
    if (!m->has_vocab) return;
    char *text = tokenizer_decode(&m->vocab, tokens, T);
    if (text) printf("%s\n", text);
    free(text);
}

/* Prefill in chunks of B (one ends at `until`, where eviction stops, when
 * given), then generate one token at a time, each chosen from the logits of
 * the last row processed. */
static int run_model(const capture_opts *o, kv_run *r, int32_t *tokens, int64_t V, int64_t P, int64_t T,
                     int64_t until, kv_err *err)
{
    kv_rng rng;
    rng_init(&rng, o->seed, 0x5a3b1e, 0, 0);
    kv_progress prog;
    progress_start(&prog, "capture", T, o->quiet);
    progress_stage_until(&prog, "prefill", P);   /* generation, one token per step, goes at its own rate */
    int rc = KV_OK;
    int64_t last_rows = 0; /* rows of the step whose logits run_logits holds */
    for (int64_t p0 = 0; !rc && p0 < P; p0 += last_rows) {
        const int64_t end = p0 < until && until < p0 + o->chunk ? until : p0 + o->chunk;
        last_rows = (end < P ? end : P) - p0;
        rc = run_step(r, last_rows, err);
        progress_update(&prog, p0 + last_rows);
    }
    progress_stage(&prog, "generate");
    for (int64_t t = P; !rc && t < T; t++) {
        tokens[t] = pick_token(run_logits(r) + (last_rows - 1) * V, V, o->temperature, &rng);
        run_known(r, t + 1);
        last_rows = 1;
        rc = run_step(r, 1, err);
        progress_update(&prog, t + 1);
    }
    progress_end(&prog);
    return rc;
}


/* What the trace records (and the run computes). */
static trace_create_opts trace_wants(const capture_opts *o)
{
    trace_create_opts t = {.storage = o->dtype, .force = o->force};
    t.want[TRACE_QUERIES] = o->record_queries;
    t.want[TRACE_COLSUM] = o->attention == ATTN_COLSUM || o->attention == ATTN_FULL;
    t.want[TRACE_ATTN_FULL] = o->attention == ATTN_FULL;
    t.want[TRACE_LOGITS] = o->logits;
    t.want[TRACE_LOGPROBS] = !o->no_logprobs;
    t.want[TRACE_KVZIP] = o->kvzip;
    /* the full-cache reference sim reads instead of recomputing: a full run with its queries */
    t.want[TRACE_ATTN_OUT] = t.want[TRACE_ATTN_LSE] = t.want[TRACE_ATTN_MAX] = o->record_queries && !o->evict.iface;
    t.want[TRACE_EVICT_RETAINED] = t.want[TRACE_EVICT_STEP_END] = o->evict.iface && o->retained;
    if (o->prov) t.annotate = prov_write_h5, t.annotate_ctx = o->prov;
    return t;
}

/* Before a large run: its cost in one line on stderr (unless --quiet) when
 * it will likely take over a minute or a GiB. Floating-point operations: 2
 * per weight per token, plus attention's 4 T^2/2 L H D; memory: the weights
 * as held (wbytes: weights_bytes, with --compute int8 their packed copy too: an upper bound, the file's
 * pages of each matrix leave once it is packed) and the KV cache (float32);
 * the trace: what its writer will
 * allocate for every dataset the run records (trace_create_bytes: whole chunks), and W_o. The
 * minutes assume 50 GFLOP/s, a modest CPU; a GPU is far faster. */
static void print_cost(const capture_opts *o, const model_config *c, double wbytes, int64_t T)
{
    const double L = (double)c->n_layers, H = (double)c->n_heads, K = (double)c->n_kv_heads, D = (double)c->head_dim;
    const double dim = (double)c->dim, V = (double)c->vocab_size, t = (double)T;
    const double weights = L * (dim * (2 * H * D + 2 * K * D) + 3 * dim * (double)c->ffn_dim) + 2 * V * dim;
    const double flops = 2 * weights * t + 2 * L * H * D * t * t;
    const double cache = o->evict.iface ? 2 * L * K * D * (double)(o->budget + o->chunk) : 2 * L * K * D * t;
    const double memory = wbytes + 4 * cache;
    const trace_meta tm = {.n_layers = c->n_layers, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
                           .head_dim = c->head_dim, .n_tokens = T, .prompt_len = T, .vocab_size = c->vocab_size,
                           .storage = o->dtype};
    trace_create_opts topts = trace_wants(o);
    topts.expected_tokens = T;
    double file = o->dry_run ? 0 : trace_create_bytes(&tm, &topts, T) + (o->record_wo ? 4 * L * dim * H * D : 0);
    const double gib = 1024.0 * 1024.0 * 1024.0, minutes = flops / 50e9 / 60;
    if (!o->stats && (o->quiet || (minutes < 1 && memory < gib && file < gib))) return; /* --stats: always */
    fprintf(stderr, "kvtrace: capture: %lld positions: about %.3g TFLOP (~%.0f min at 50 GFLOP/s), peak memory "
            "~%.2f GiB, trace ~%.4g MiB\n", (long long)T, flops / 1e12, minutes, memory / gib, file / (1024.0 * 1024.0));
}

int capture_evict_until(const capture_opts *o, const trace_span *spans, int64_t n_spans, int64_t P, int64_t *until,
                        kv_err *err)
{
    *until = o->evict_until;
    if (o->evict_until_span) {
        int64_t i = 0;
        while (i < n_spans && strcmp(spans[i].name, o->evict_until_span) != 0) i++;
        if (i == n_spans)
            return kv_fail(err, KV_EUSAGE, "--evict-until %s: the prompt has no span '%s'%s", o->evict_until_span,
                           o->evict_until_span, o->prompts ? "" : " (spans come with --prompts FILE.jsonl)");
        if ((*until = spans[i].start) < 1)
            return kv_fail(err, KV_EUSAGE, "--evict-until %s: the span starts at position 0, before anything could "
                           "be evicted", o->evict_until_span);
    }
    if (*until > P)
        return kv_fail(err, KV_EUSAGE, "--evict-until %lld is past the prompt's %lld positions", (long long)*until,
                       (long long)P);
    return KV_OK;
}

/* The run over tokens [T] of the loaded model, and its outputs (with
 * --kvzip the reconstruction pass after it: kvzip.h). */
static int capture_tokens(const capture_opts *o, const alloc_config *ac, const backend_iface *be, void *bctx,
                          const kv_model *m, int32_t *tokens, int64_t P, int64_t T, const char *text, const char *chat,
                          double load_s, kv_err *err)
{
    run_opts ro = {.model = m, .model_path = o->model, .backend = be, .backend_ctx = bctx, .tokens = tokens,
                   .threads = o->threads, .T = T, .P = P, .chunk = o->chunk, .evict = &o->evict, .budget = o->budget,
                   .alloc = ac->iface ? ac : NULL,
                   .output = o->dry_run ? NULL : o->output, .verb = "capture", .trace = trace_wants(o),
                   .beyond_context = o->beyond_context, .prompt_text = text, .prompt_chat = chat,
                   .record_wo = o->record_wo, .last_logits_only = o->no_logprobs, .compute_int8 = o->compute == 1,
                   .spans = o->spans, .n_spans = o->n_spans};
    int32_t *tmpl = NULL;
    int64_t n_tmpl = 0;
    int rc = o->kvzip && !o->dry_run ? kvzip_template(m, o->model, &tmpl, &n_tmpl, err) : KV_OK;
    ro.extra = tmpl ? n_tmpl + T : 0;
    if (!rc) rc = capture_evict_until(o, o->spans, o->n_spans, P, &ro.evict_until, err);
    kv_run *r = NULL;
    if (!rc) rc = run_open(&r, &ro, err);
    double packed = 0;
    if (o->compute == 1) int8_model_matrices(m, NULL, &packed);
    if (!rc) print_cost(o, &m->cfg, weights_bytes(m) + packed, T);
    double started = kv_now_seconds();
    if (!rc) rc = run_model(o, r, tokens, m->cfg.vocab_size, P, T, ro.evict_until, err);
    if (!rc && tmpl) rc = kvzip_record(r, &m->cfg, tmpl, n_tmpl, tokens, T, err);
    free(tmpl);
    if (!rc) rc = run_settle(r, err); /* the recording drained */
    if (!rc && o->stats) run_print_stats(r, load_s, kv_now_seconds() - started);
    if (!rc) rc = run_finish(r, err);
    if (!rc && o->print_text) print_text(m, tokens, T);
    run_free(r);
    return rc;
}

int capture_provenance(prov_record *p, const char *model, const char *tokenizer, const prompt_source *ps,
                       kv_err *err)
{
    int rc = prov_add_model(p, model, err);
    if (!rc && tokenizer) rc = prov_add_file(p, "tokenizer", tokenizer, NULL, err);
    const char *kind = ps->text ? "text" : ps->text_file ? "file" : ps->tokens_file ? "ids" : ps->messages_file ? "messages"
                     : "bos";
    if (!rc) rc = prov_set_text(&p->prompt, kind, err);
    if (!rc && ps->text_file) rc = prov_add_file(p, "prompt_file", ps->text_file, NULL, err);
    if (!rc && ps->messages_file) rc = prov_add_file(p, "messages", ps->messages_file, NULL, err);
    if (!rc && ps->tokens_file) rc = prov_add_file(p, "tokens", ps->tokens_file, NULL, err);
    return rc;
}

int capture_head_scores(const char *path, const model_config *c, double **scores, kv_err *err)
{
    *scores = kv_calloc((size_t)(c->n_layers * c->n_kv_heads), sizeof **scores, "head scores", err);
    int rc = *scores ? alloc_head_scores_read(path, c->n_layers, c->n_kv_heads, *scores, err) : err->code;
    if (rc) free(*scores), *scores = NULL;
    return rc;
}

/* The allocator with its head ranking: --head-scores read for model shape
 * c into *scores (headkv, duo), recorded in the provenance. */
static int capture_alloc(const capture_opts *o, const model_config *c, alloc_config *ac, double **scores,
                         kv_err *err)
{
    *ac = o->alloc, *scores = NULL;
    if (!o->head_scores) return KV_OK;
    int rc = capture_head_scores(o->head_scores, c, scores, err);
    if (!rc) ac->head_scores = *scores;
    if (!rc && o->prov && !o->dry_run) rc = prov_add_file(o->prov, "head_scores", o->head_scores, NULL, err);
    return rc;
}

/* The run over the loaded model on the open backend instance bctx (closed
 * here): the prompt's tokens (ids[n_ids] as given, or o->prompt through the
 * tokenizer), with `provenance` the record's inputs, the trace out. */
static int run_loaded(const capture_opts *o, void *bctx, const kv_model *model, const int32_t *ids, int64_t n_ids,
                      bool provenance, double load_s, kv_err *err)
{
    const backend_iface *be = backend_or_default(o->backend);
    int32_t *tokens = NULL;
    char *text = NULL, *chat = NULL;
    int64_t P = 0, T = 0;
    int rc = KV_OK;
    if (ids) { /* the prompt's ids as given, then room for the generated ones */
        P = n_ids, T = n_ids + o->generate;
        if (!(tokens = kv_calloc((size_t)T, sizeof *tokens, "tokens", err))) rc = err->code;
        for (int64_t i = 0; !rc && i < n_ids; i++) tokens[i] = ids[i];
    } else {
        rc = run_sequence(&o->prompt, model, o->model, o->generate, &tokens, &P, &T, &text, &chat, err);
    }
    if (!rc) rc = check_full_attention(o, &model->cfg, T, err);
    if (!rc && provenance && o->prov && !o->dry_run)
        rc = capture_provenance(o->prov, o->model, o->tokenizer, &o->prompt, err);
    alloc_config ac;
    double *scores = NULL;
    if (!rc) rc = capture_alloc(o, &model->cfg, &ac, &scores, err);
    if (!rc) rc = capture_tokens(o, &ac, be, bctx, model, tokens, P, T, text, chat, load_s, err);
    free(scores);
    backend_close(be, bctx);
    free(tokens);
    free(text), free(chat);
    return rc;
}

/* What the run asks of its backend. */
static backend_request request_of(const capture_opts *o)
{
    return (backend_request){.evict = o->evict.iface != NULL, .attention_full = o->attention == ATTN_FULL,
                             .weights = o->weights < 0 ? 0 : o->weights,
                             .threads = kv_threads(o->threads), .int8 = o->compute == 1};
}

int capture_loaded(const capture_opts *o, const kv_model *model, const int32_t *ids, int64_t n_ids, kv_err *err)
{
    const backend_iface *be = backend_or_default(o->backend);
    const backend_request req = request_of(o);
    void *bctx = NULL;
    int rc = backend_open(be, &req, &bctx, err);
    return rc ? rc : run_loaded(o, bctx, model, ids, n_ids, false, 0.0, err);
}

int capture_run(const capture_opts *o, kv_err *err)
{
    const backend_iface *be = backend_or_default(o->backend);
    const backend_request req = request_of(o);
    void *bctx = NULL;
    const char *inputs[] = {o->model, o->tokenizer, o->prompt.text_file, o->prompt.tokens_file, o->head_scores};
    int rc = o->dry_run ? KV_OK : outfile_check_inputs(o->output, inputs, 5, err);
    if (!rc) rc = backend_open(be, &req, &bctx, err); /* refused options, no usable GPU: before any work */
    if (rc) return rc;
    kv_model model;
    memset(&model, 0, sizeof model);
    double load_started = kv_now_seconds();
    /* --weights: the host model's type where the kernels widen 16-bit weights
     * themselves (the CPU; default: the file's); a device mirror converts
     * a float32 host model (docs/cuda.md) */
    const model_wtype host_w = be->kernels->matmul16 ? (model_wtype)o->weights : MODEL_W_F32;
    rc = model_load_as(o->model, o->tokenizer, host_w, &model, err);
    double load_s = kv_now_seconds() - load_started;
    if (!rc) rc = run_loaded(o, bctx, &model, NULL, 0, true, load_s, err);
    else backend_close(be, bctx);
    model_free(&model);
    return rc;
}
