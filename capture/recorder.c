#include "capture/recorder.h"

#include "core/parallel.h"
#include "core/softmax.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int recorder_init(recorder *r, trace_writer *w, const model_config *cfg, recorder_wants want,
                  const int32_t *tokens, int64_t T, int64_t max_chunk, kv_err *err)
{
    memset(r, 0, sizeof *r);
    r->w = w, r->cfg = *cfg, r->want = want, r->T = T, r->tokens = tokens, r->pending_pos = -1, r->threads = 1;
    size_t B = (size_t)max_chunk;
    size_t width = (size_t)(cfg->head_dim > 1 ? cfg->head_dim : 1);
    if (!(r->rows = kv_calloc(B * width, sizeof(float), "recorder rows", err)) ||
        !(r->logprob = kv_calloc(B, sizeof(float), "log-probabilities", err)) ||
        !(r->pending = kv_calloc((size_t)cfg->vocab_size, sizeof(float), "logits", err)) ||
        (want.colsum && !(r->colsum = kv_calloc((size_t)(cfg->n_layers * cfg->n_heads * T), sizeof(double),
                                                "column sums", err)))) {
        recorder_free(r);
        return err->code;
    }
    return KV_OK;
}

void recorder_free(recorder *r)
{
    free(r->colsum), free(r->rows), free(r->logprob), free(r->pending);
    r->colsum = NULL, r->rows = NULL, r->logprob = NULL, r->pending = NULL;
}

/* Writes head `h` of rows x[n][heads*D] to dataset d. */
static int write_head_rows(recorder *r, trace_dset d, int64_t l, int64_t h, int64_t heads, int64_t pos0,
                           int64_t n, const float *x, kv_err *err)
{
    const int64_t D = r->cfg.head_dim;
    for (int64_t i = 0; i < n; i++) memcpy(r->rows + i * D, x + (i * heads + h) * D, sizeof(float) * (size_t)D);
    return trace_write_rows(r->w, d, l, h, pos0, n, r->rows, err);
}

static int on_qkv(void *ctx, int64_t l, int64_t pos0, int64_t n, const float *q, const float *k,
                  const float *v, kv_err *err)
{
    recorder *r = ctx;
    const int64_t H = r->cfg.n_heads, K = r->cfg.n_kv_heads;
    int rc = KV_OK;
    for (int64_t g = 0; !rc && g < K; g++) {
        rc = write_head_rows(r, TRACE_KEYS, l, g, K, pos0, n, k, err);
        if (!rc) rc = write_head_rows(r, TRACE_VALUES, l, g, K, pos0, n, v, err);
    }
    for (int64_t h = 0; !rc && r->want.queries && h < H; h++)
        rc = write_head_rows(r, TRACE_QUERIES, l, h, H, pos0, n, q, err);
    return rc;
}

static int on_attention(void *ctx, int64_t l, int64_t h, int64_t pos0, int64_t n, const float *p, kv_err *err)
{
    recorder *r = ctx;
    const int64_t cols = pos0 + n;
    if (r->want.colsum) {
        double *cs = r->colsum + (l * r->cfg.n_heads + h) * r->T;
        for (int64_t i = 0; i < n; i++) softmax_accumulate(cs, p + i * cols, 1.0, pos0 + i + 1);
    }
    return r->want.full ? trace_write_rows(r->w, TRACE_ATTN_FULL, l, h, pos0, n, p, err) : KV_OK;
}

/* The walk's attention outputs out [n][H*D] and softmax statistics [2][H][n]:
 * the row maxima m (/attention/max as they are) and the log-sum-exps
 * m + log(sum), in double, written as float32. */
static int on_output(void *ctx, int64_t l, int64_t pos0, int64_t n, const float *out, const float *stats, kv_err *err)
{
    recorder *r = ctx;
    const int64_t H = r->cfg.n_heads;
    int rc = KV_OK;
    for (int64_t h = 0; !rc && h < H; h++) {
        rc = write_head_rows(r, TRACE_ATTN_OUT, l, h, H, pos0, n, out, err);
        for (int64_t i = 0; !rc && i < n; i++) /* n <= B <= B*D */
            r->rows[i] = (float)((double)stats[h * n + i] + log((double)stats[(H + h) * n + i]));
        if (!rc) rc = trace_write_rows(r->w, TRACE_ATTN_LSE, l, h, pos0, n, r->rows, err);
        if (!rc) rc = trace_write_rows(r->w, TRACE_ATTN_MAX, l, h, pos0, n, stats + h * n, err);
    }
    return rc;
}

/* log softmax(logits)[next], in double. */
static float log_prob(const float *logits, int64_t V, int32_t next)
{
    float mx = logits[0];
    for (int64_t i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    return (float)((double)logits[next] - mx - log(sum));
}

typedef struct {
    const recorder *r;
    const float *logits; /* [n][V] */
    int64_t pos0;
} logprob_job;

static void logprob_row(void *ctx, int i, int thread)
{
    (void)thread;
    const logprob_job *j = ctx;
    const int64_t V = j->r->cfg.vocab_size;
    j->r->logprob[i] = log_prob(j->logits + i * V, V, j->r->tokens[j->pos0 + i + 1]);
}

static int on_logits(void *ctx, int64_t pos0, int64_t n, const float *logits, kv_err *err)
{
    recorder *r = ctx;
    const int64_t V = r->cfg.vocab_size;
    int rc = trace_write_tokens(r->w, pos0, n, r->tokens + pos0, err);
    if (!rc && r->want.logits) rc = trace_write_rows(r->w, TRACE_LOGITS, 0, 0, pos0, n, logits, err);
    if (rc || !r->want.logprobs) return rc;
    if (r->pending_pos >= 0) { /* the previous chunk's last row: its next token is tokens[pos0] */
        float lp = log_prob(r->pending, V, r->tokens[r->pending_pos + 1]);
        rc = trace_write_rows(r->w, TRACE_LOGPROBS, 0, 0, r->pending_pos, 1, &lp, err);
        r->pending_pos = -1;
    }
    /* rows whose next token is decided (t + 1 < known) come first; each row's
     * log-probability is its own item, so threads change only the speed (a
     * 512-row chunk of a 128K vocabulary is 65M exponentials) */
    int64_t done = r->known - pos0 - 1;
    done = done < 0 ? 0 : done > n ? n : done;
    logprob_job job = {r, logits, pos0};
    kv_parallel_for((int)done, done >= 16 ? r->threads : 1, logprob_row, &job);
    if (done < n) { /* next token not decided yet (or none: the end): the chunk's last row */
        memcpy(r->pending, logits + (n - 1) * V, sizeof(float) * (size_t)V);
        r->pending_pos = pos0 + n - 1;
    }
    if (!rc && done) rc = trace_write_rows(r->w, TRACE_LOGPROBS, 0, 0, pos0, done, r->logprob, err);
    return rc;
}

bool recorder_reads_logits(const recorder *r)
{
    return r->want.logits || r->want.logprobs;
}

forward_observer recorder_observer(recorder *r)
{
    forward_observer o = {.ctx = r, .on_qkv = on_qkv, .on_attention = on_attention, .on_logits = on_logits,
                          .on_output = r->want.reference ? on_output : NULL};
    return o;
}

int recorder_finish(recorder *r, kv_err *err)
{
    int rc = KV_OK;
    if (r->pending_pos >= 0) {
        float nan = NAN; /* the last position has no next token */
        rc = trace_write_rows(r->w, TRACE_LOGPROBS, 0, 0, r->pending_pos, 1, &nan, err);
        r->pending_pos = -1;
    }
    if (rc || !r->want.colsum) return rc;
    float *row = malloc(sizeof(float) * (size_t)r->T);
    if (!row) return kv_fail(err, KV_EFAIL, "column sums: out of memory");
    for (int64_t l = 0; !rc && l < r->cfg.n_layers; l++)
        for (int64_t h = 0; !rc && h < r->cfg.n_heads; h++) {
            const double *cs = r->colsum + (l * r->cfg.n_heads + h) * r->T;
            for (int64_t t = 0; t < r->T; t++) row[t] = (float)cs[t];
            rc = trace_write_rows(r->w, TRACE_COLSUM, l, h, 0, r->T, row, err);
        }
    free(row);
    return rc;
}
