/* capture --kvzip's reconstruction pass (kvzip.h). */
#include "capture/kvzip.h"

#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/tokenizer/tokenizer.h"

/* kvzip_press.py's prompt (its first chunk) and the suffix it uses for a model without a chat template */
static const char KVZIP_PROMPT[] = "\n\nRepeat the previous context exactly.";
static const char KVZIP_SUFFIX[] = "\n";

int kvzip_template(const kv_model *m, const char *model_path, int32_t **ids, int64_t *n, kv_err *err)
{
    *ids = NULL, *n = 0;
    if (!m->has_vocab)
        return kv_fail(err, KV_EUSAGE, "%s: --kvzip needs the model's tokenizer to encode the reconstruction "
                       "prompt, and the model has none (give --tokenizer)", model_path);
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    int rc = tokenizer_encode(&m->vocab, KVZIP_PROMPT, strlen(KVZIP_PROMPT), false, &a, &na, err);
    if (!rc) rc = tokenizer_encode(&m->vocab, KVZIP_SUFFIX, strlen(KVZIP_SUFFIX), false, &b, &nb, err);
    if (!rc && !(*ids = kv_calloc((size_t)(na + nb), sizeof(int32_t), "kvzip template", err))) rc = err->code;
    if (!rc) {
        memcpy(*ids, a, sizeof(int32_t) * (size_t)na);
        memcpy(*ids + na, b, sizeof(int32_t) * (size_t)nb);
        *n = na + nb;
    }
    free(a), free(b);
    return rc;
}

typedef struct {
    int64_t H, T;
    float *best; /* [L][H][T] */
} kvzip_acc;

/* p [n][pos0+n]: every row's weights on the keys below T, maxed into the head's row */
static int on_attention(void *ctx, int64_t layer, int64_t head, int64_t pos0, int64_t n, const float *p, kv_err *err)
{
    (void)err;
    kvzip_acc *a = ctx;
    float *best = a->best + (layer * a->H + head) * a->T;
    for (int64_t i = 0; i < n; i++) {
        const float *row = p + i * (pos0 + n);
        for (int64_t j = 0; j < a->T; j++) best[j] = row[j] > best[j] ? row[j] : best[j];
    }
    return KV_OK;
}

int kvzip_record(kv_run *r, const model_config *c, const int32_t *tmpl, int64_t n_template, const int32_t *tokens,
                 int64_t T, kv_err *err)
{
    const int64_t L = c->n_layers, H = c->n_heads, R = n_template + T;
    kvzip_acc acc = {.H = H, .T = T, .best = kv_calloc((size_t)(L * H * T), sizeof(float), "KVzip rows", err)};
    int32_t *ids = kv_calloc((size_t)R, sizeof(int32_t), "kvzip prompt", err);
    int rc = acc.best && ids ? KV_OK : err->code;
    if (!rc) {
        memcpy(ids, tmpl, sizeof(int32_t) * (size_t)n_template);
        memcpy(ids + n_template, tokens, sizeof(int32_t) * (size_t)T);
        const forward_observer obs = {.ctx = &acc, .on_attention = on_attention};
        rc = run_extra(r, ids, R, &obs, err);
    }
    trace_writer *w = run_trace(r);
    for (int64_t i = 0; !rc && w && i < L * H; i++)
        rc = trace_write_rows(w, TRACE_KVZIP, i / H, i % H, 0, T, acc.best + i * T, err);
    free(acc.best), free(ids);
    return rc;
}
