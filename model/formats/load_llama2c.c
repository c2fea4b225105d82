/* load_llama2c: a llama2.c legacy ("version 0") checkpoint into kv_model.
 *
 * The file is 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 * vocab_size, seq_len; a negative vocab_size means an unshared classifier
 * follows) and float32 weights in llama2.c's order, each matrix W[out][in]
 * as model.h wants it:
 *   token_embedding [V][dim], rms_att [L][dim], wq [L][dim][dim],
 *   wk [L][K*D][dim], wv [L][K*D][dim], wo [L][dim][dim], rms_ffn [L][dim],
 *   w1 [L][ffn][dim], w2 [L][dim][ffn], w3 [L][ffn][dim], rms_final [dim],
 *   freq_cis_real [seq_len][D/2], freq_cis_imag [seq_len][D/2],
 *   wcls [V][dim] (only when vocab_size < 0).
 * The weights are read in one block owned by the model; the per-tensor
 * pointers point into it. llama2.c runs with RMSNorm epsilon 1e-5, RoPE
 * theta 10000, interleaved pairs. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileopen.h"
#include "model/arch.h"
#include "model/formats/format.h"
#include "model/model.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "llama2.c checkpoints are read as is");

#define HEADER_BYTES 28
#define VERSIONED_MAGIC 0x616b3432u /* "ak42": llama2.c's version 1 and 2 exports */

/* Element counts of the sections, in file order. */
typedef struct {
    uint64_t embd, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq, wcls;
} sections;

static uint64_t sections_total(const sections *s)
{
    return s->embd + s->rms_att + s->wq + s->wk + s->wv + s->wo + s->rms_ffn + s->w1 + s->w2 +
           s->w3 + s->rms_final + 2 * s->freq + s->wcls;
}

/* The header into cfg; checked by model_config_check (which bounds every product below). */
static int read_header(const char *path, const uint8_t *h, int32_t *seq_len, bool *shared,
                       model_config *c, kv_err *err)
{
    int32_t v[7];
    memcpy(v, h, sizeof v);
    if ((uint32_t)v[0] == VERSIONED_MAGIC)
        return kv_fail(err, KV_EINPUT, "%s: a versioned llama2.c export (magic 'ak42'); kvtrace "
                       "reads the legacy format (export.py --version 0)", path);
    if (v[0] <= 0 || v[3] <= 0 || v[0] % v[3] != 0)
        return kv_fail(err, KV_EINPUT, "%s: header dim %" PRId32 " and n_heads %" PRId32 " do not "
                       "give a whole head size (not a llama2.c checkpoint?)", path, v[0], v[3]);
    if (v[5] == 0 || v[5] == INT32_MIN || v[6] <= 0)
        return kv_fail(err, KV_EINPUT, "%s: header vocab_size %" PRId32 ", seq_len %" PRId32
                       " (not a llama2.c checkpoint?)", path, v[5], v[6]);
    *c = (model_config){.dim = v[0], .ffn_dim = v[1], .n_layers = v[2], .n_heads = v[3],
                        .n_kv_heads = v[4], .head_dim = v[0] / v[3],
                        .vocab_size = v[5] < 0 ? -(int64_t)v[5] : v[5], .context_len = v[6],
                        .rope_theta = 10000.0, .norm_eps = 1e-5, .rope = ROPE_INTERLEAVED};
    const char *base = strrchr(path, '/');
    snprintf(c->name, sizeof c->name, "%s", base ? base + 1 : path);
    const model_arch *llama = arch_find("llama"); /* llama2.c runs llama only */
    KV_ASSERT(llama);
    arch_apply(llama, c);
    *seq_len = v[6];
    *shared = v[5] > 0;
    return model_config_check(c, path, err);
}

static sections section_sizes(const model_config *c, int64_t seq_len, bool shared)
{
    uint64_t L = (uint64_t)c->n_layers, dim = (uint64_t)c->dim, ffn = (uint64_t)c->ffn_dim;
    uint64_t kvd = (uint64_t)(c->n_kv_heads * c->head_dim), V = (uint64_t)c->vocab_size;
    return (sections){.embd = V * dim, .rms_att = L * dim, .wq = L * dim * dim,
                      .wk = L * kvd * dim, .wv = L * kvd * dim, .wo = L * dim * dim,
                      .rms_ffn = L * dim, .w1 = L * ffn * dim, .w2 = L * dim * ffn,
                      .w3 = L * ffn * dim, .rms_final = dim,
                      .freq = (uint64_t)seq_len * (uint64_t)c->head_dim / 2,
                      .wcls = shared ? 0 : V * dim};
}

/* Points the model's tensors into w (the weights in file order). */
static void place_weights(kv_model *m, float *w, const sections *s)
{
    const model_config *c = &m->cfg;
    uint64_t L = (uint64_t)c->n_layers;
    float *tok = w;                        /* [V][dim] */
    float *rms_att = tok + s->embd;        /* [L][dim] */
    float *wq = rms_att + s->rms_att;      /* [L][dim][dim] */
    float *wk = wq + s->wq;                /* [L][K*D][dim] */
    float *wv = wk + s->wk;                /* [L][K*D][dim] */
    float *wo = wv + s->wv;                /* [L][dim][dim] */
    float *rms_ffn = wo + s->wo;           /* [L][dim] */
    float *w1 = rms_ffn + s->rms_ffn;      /* [L][ffn][dim] */
    float *w2 = w1 + s->w1;                /* [L][dim][ffn] */
    float *w3 = w2 + s->w2;                /* [L][ffn][dim] */
    float *rms_final = w3 + s->w3;         /* [dim] */
    float *wcls = rms_final + s->rms_final + 2 * s->freq; /* [V][dim], unless shared */
    m->tok_embd = tok;
    m->output_norm = rms_final;
    m->output = s->wcls ? wcls : tok;
    for (uint64_t l = 0; l < L; l++) {
        model_layer *y = &m->layers[l];
        y->attn_norm = rms_att + l * (s->rms_att / L);
        y->wq = wq + l * (s->wq / L);
        y->wk = wk + l * (s->wk / L);
        y->wv = wv + l * (s->wv / L);
        y->wo = wo + l * (s->wo / L);
        y->ffn_norm = rms_ffn + l * (s->rms_ffn / L);
        y->w_gate = w1 + l * (s->w1 / L);
        y->w_down = w2 + l * (s->w2 / L);
        y->w_up = w3 + l * (s->w3 / L);
    }
}

static int read_weights(const char *path, FILE *f, kv_model *m, const sections *s, kv_err *err)
{
    uint64_t n = sections_total(s);
    float *w = model_alloc(m, (size_t)n, "llama2.c weights", err); /* [n] file order */
    if (!w) return KV_EFAIL;
    if (fread(w, sizeof *w, (size_t)n, f) != (size_t)n)
        return kv_fail(err, KV_EFAIL, "%s: read error: %s", path, strerror(errno));
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(w[i]))
            return kv_fail(err, KV_EINPUT, "%s: weight %" PRIu64 " (byte offset %" PRIu64 ") is %s",
                           path, i, HEADER_BYTES + 4 * i, isnan(w[i]) ? "NaN" : "infinite");
    int rc = model_alloc_layers(m, err);
    if (!rc) place_weights(m, w, s);
    return rc;
}

static int load_checkpoint(const char *path, FILE *f, kv_model *m, kv_err *err)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        return kv_fail(err, KV_EINPUT, "%s: not a regular file", path);
    uint64_t size = (uint64_t)st.st_size;
    uint8_t h[HEADER_BYTES];
    if (size < HEADER_BYTES || fread(h, 1, sizeof h, f) != sizeof h)
        return kv_fail(err, KV_EINPUT, "%s: truncated: %" PRIu64 " bytes, a llama2.c checkpoint "
                       "starts with a %d-byte header", path, size, HEADER_BYTES);
    int32_t seq_len = 0;
    bool shared = true;
    int rc = read_header(path, h, &seq_len, &shared, &m->cfg, err);
    if (rc) return rc;
    sections s = section_sizes(&m->cfg, seq_len, shared);
    uint64_t want = HEADER_BYTES + 4 * sections_total(&s);
    if (size != want)
        return kv_fail(err, KV_EINPUT, "%s: %s: the header (dim %" PRId64 ", hidden %" PRId64
                       ", %" PRId64 " layers, %" PRId64 "/%" PRId64 " heads, vocab %" PRId64
                       "%s, seq_len %" PRId32 ") implies %" PRIu64 " bytes, the file has %" PRIu64,
                       path, size < want ? "truncated" : "unexpected trailing bytes",
                       m->cfg.dim, m->cfg.ffn_dim, m->cfg.n_layers, m->cfg.n_heads,
                       m->cfg.n_kv_heads, m->cfg.vocab_size, shared ? "" : " unshared", seq_len,
                       want, size);
    return read_weights(path, f, m, &s, err);
}

bool model_probe_llama2c(const model_source *s)
{
    (void)s;
    return true; /* the last row: any file no other format claimed */
}

int model_load_llama2c(const model_source *s, kv_model *m, kv_err *err)
{
    const char *path = s->spec, *tokenizer = s->tokenizer;
    FILE *f = kv_input_fopen(path, err);
    if (!f) return err->code;
    int rc = load_checkpoint(path, f, m, err);
    fclose(f);
    if (rc || !tokenizer) return rc;
    if ((rc = vocab_load_llama2c(tokenizer, (int32_t)m->cfg.vocab_size, &m->vocab, err)))
        return rc;
    m->has_vocab = true;
    return KV_OK;
}
