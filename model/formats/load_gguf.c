/* load_gguf: a GGUF of an architecture in model/arch.c's table that llama.cpp
 * writes GGUFs for (llama, qwen2, qwen3), in llama.cpp's names and layout,
 * into kv_model.
 *
 * Config from the ARCH.* keys, weights from token_embd / output_norm /
 * output / blk.N.* with every shape checked against the config, vocabulary
 * from tokenizer.ggml.*. ggml dims [ne0, ne1] hold W[ne1][ne0] row-major,
 * which is model.h's W[out][in]: ne0 is the input width.
 *
 * RoPE as llama.cpp runs each architecture (the row's gguf_rope): llama GGUFs
 * are converted for interleaved pairs (ROPE_TYPE_NORM; Q and K need no
 * un-permuting), qwen2 and qwen3 keep HF's rotate-half rows (ROPE_TYPE_NEOX).
 * A model with qkv_bias (qwen2) adds blk.N.attn_{q,k,v}.bias, one with
 * qk_norm (qwen3) blk.N.attn_{q,k}_norm.weight; an explicit
 * ARCH.attention.key_length (qwen3) gives head_dim. A rope_freqs.weight tensor [D/2]
 * (Llama 3.1+) holds per-frequency divisors, applied as llama.cpp's
 * freq_factors. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/utf8.h"
#include "model/arch.h"
#include "model/formats/format.h"
#include "model/formats/ggml_types.h"
#include "model/formats/gguf.h"
#include "model/model.h"
#include "model/weights.h"
#include "model/tokenizer/bpe.h"

#define ABSENT_ID 0xFFFFFFFFu /* a special-token id that is not set */

/* Shapes named by what they measure (model.h), short for the table below. */
enum { S_ONE = MODEL_DIM_NONE, S_DIM = MODEL_DIM_HIDDEN, S_Q = MODEL_DIM_Q, S_KV = MODEL_DIM_KV, S_FFN = MODEL_DIM_FFN,
       S_HEAD = MODEL_DIM_HEAD };
/* Which models have a tensor: all, or those with a feature (model.h). */
enum { A_ALL = MODEL_NEED_ALL, A_BIAS = MODEL_NEED_QKV_BIAS, A_QKNORM = MODEL_NEED_QK_NORM };

static const struct {
    const char *name;  /* blk.N.<name> */
    size_t field;      /* offsetof(model_layer, ...) */
    int ne0, ne1;      /* ggml dims: ne0 = input width, ne1 = output rows (S_ONE: 1-D) */
    int need;
} LAYER_TENSORS[] = {
    {"attn_norm.weight", offsetof(model_layer, attn_norm), S_DIM, S_ONE, A_ALL},
    {"attn_q.weight", offsetof(model_layer, wq), S_DIM, S_Q, A_ALL},
    {"attn_k.weight", offsetof(model_layer, wk), S_DIM, S_KV, A_ALL},
    {"attn_v.weight", offsetof(model_layer, wv), S_DIM, S_KV, A_ALL},
    {"attn_output.weight", offsetof(model_layer, wo), S_Q, S_DIM, A_ALL},
    {"attn_q.bias", offsetof(model_layer, bq), S_Q, S_ONE, A_BIAS},
    {"attn_k.bias", offsetof(model_layer, bk), S_KV, S_ONE, A_BIAS},
    {"attn_v.bias", offsetof(model_layer, bv), S_KV, S_ONE, A_BIAS},
    {"attn_q_norm.weight", offsetof(model_layer, q_norm), S_HEAD, S_ONE, A_QKNORM},
    {"attn_k_norm.weight", offsetof(model_layer, k_norm), S_HEAD, S_ONE, A_QKNORM},
    {"ffn_norm.weight", offsetof(model_layer, ffn_norm), S_DIM, S_ONE, A_ALL},
    {"ffn_gate.weight", offsetof(model_layer, w_gate), S_DIM, S_FFN, A_ALL},
    {"ffn_up.weight", offsetof(model_layer, w_up), S_DIM, S_FFN, A_ALL},
    {"ffn_down.weight", offsetof(model_layer, w_down), S_FFN, S_DIM, A_ALL},
};


static void shape_str(char *buf, size_t cap, const uint64_t *ne, uint32_t n_dims)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64, d ? ", " : "", ne[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Tensor `name` of ggml shape [ne0] (ne1 == 0) or [ne0, ne1], checked and
 * noted as read (*out: the tensor). */
static int check_tensor(const gguf_file *g, kv_model *m, const char *name, int64_t ne0, int64_t ne1,
                        const gguf_tensor **out, kv_err *err)
{
    const gguf_tensor *t = *out = gguf_find_tensor(g, name);
    if (!t) return kv_fail(err, KV_EINPUT, "%s: missing tensor %s", gguf_where(g), name);
    uint64_t want[GGUF_MAX_DIMS] = {(uint64_t)ne0, ne1 ? (uint64_t)ne1 : 1, 1, 1};
    if (memcmp(t->ne, want, sizeof want) != 0) {
        char got[128], exp[64];
        shape_str(got, sizeof got, t->ne, t->n_dims);
        shape_str(exp, sizeof exp, want, ne1 ? 2 : 1);
        return kv_fail(err, KV_EINPUT, "%s: tensor %s has shape %s, expected %s from the "
                       "metadata", gguf_where(g), name, got, exp);
    }
    int rc = model_tensor_read(m, t->name, err);
    return rc ? rc : gguf_tensor_readable(g, t, err); /* before allocating for it */
}

/* Tensor `name` of ggml shape [ne0] (ne1 == 0) or [ne0, ne1] as float32 owned by m. */
static int load_tensor(const gguf_file *g, kv_model *m, const char *name, int64_t ne0,
                       int64_t ne1, float **out, kv_err *err)
{
    const gguf_tensor *t;
    int rc = check_tensor(g, m, name, ne0, ne1, &t, err);
    if (rc) return rc;
    float *dst = model_alloc(m, (size_t)t->n_elems, name, err); /* [ne1][ne0] */
    if (!dst) return KV_EFAIL;
    *out = dst;
    return gguf_tensor_read_f32(g, t, dst, t->n_elems, err);
}

/* gguf_tensor_read_f32 as weights_from_file reads a tensor. */
static int read_f32(const void *g, const void *t, float *dst, uint64_t n, kv_err *err)
{
    return gguf_tensor_read_f32(g, t, dst, n, err);
}

/* ggml's type id of a float weight type. */
static uint32_t ggml_of(model_wtype t)
{
    return t == MODEL_W_F32 ? 0u : t == MODEL_W_F16 ? 1u : 30u; /* F32, F16, BF16 */
}

/* A weight matrix of ggml shape [ne0, ne1] in the model's type (m->wtype):
 * in place in g's data where the tensor is already of that type (GGUF data
 * is contiguous and aligned), else read as float32 (and rounded, for 16
 * bits): weights_from_file; with MODEL_W_GGML the file's blocks in place, of
 * whatever type each matrix has. Non-finite weights are refused always. */
static int load_matrix(const gguf_file *g, kv_model *m, const char *name, int64_t ne0, int64_t ne1,
                       model_mat **out, bool *in_place, kv_err *err)
{
    const gguf_tensor *t;
    int rc = check_tensor(g, m, name, ne0, ne1, &t, err);
    if (rc) return rc;
    if (m->wtype == MODEL_W_GGML) {
        *in_place = true;
        return weights_ggml_keep(m, gguf_where(g), name, t->data, t->type, (size_t)t->n_elems, out, err);
    }
    return weights_from_file(m, gguf_where(g), name, t->data, t->type == ggml_of(m->wtype), (size_t)t->n_elems,
                             read_f32, g, t, out, in_place, err);
}

/* The type the matrices are held in: the one asked for, or (MODEL_W_KEEP)
 * the file's, read from blk.0.attn_q.weight: F16 or BF16 stay 16-bit, a
 * quantised type keeps every matrix in its own type (MODEL_W_GGML). */
static model_wtype resolve_type(const gguf_file *g, model_wtype want)
{
    const gguf_tensor *t = gguf_find_tensor(g, "blk.0.attn_q.weight");
    if (want != MODEL_W_KEEP || !t) return want == MODEL_W_KEEP ? MODEL_W_F32 : want;
    if (t->type == ggml_of(MODEL_W_F16)) return MODEL_W_F16;
    if (t->type == ggml_of(MODEL_W_BF16)) return MODEL_W_BF16;
    return ggml_type_get(t->type)->blck > 1 ? MODEL_W_GGML : MODEL_W_F32;
}

/* rope_freqs.weight [D/2]: positive finite divisors into m->rope_div. */
static int load_rope_freqs(const gguf_file *g, kv_model *m, kv_err *err)
{
    const int64_t half = m->cfg.head_dim / 2;
    float *f = NULL;
    int rc = load_tensor(g, m, "rope_freqs.weight", half, 0, &f, err);
    if (!rc) m->rope_div = model_alloc_raw(m, (size_t)half, sizeof(double), "rope", err);
    if (!rc && !m->rope_div) rc = KV_EFAIL;
    for (int64_t p = 0; p < half && !rc; p++) {
        if (!(f[p] > 0))
            return kv_fail(err, KV_EINPUT, "%s: rope_freqs.weight[%" PRId64 "] = %g is not a "
                           "positive divisor", gguf_where(g), p, (double)f[p]);
        m->rope_div[p] = f[p];
    }
    if (!rc) snprintf(m->cfg.rope_scaling, sizeof m->cfg.rope_scaling, "rope_freqs.weight");
    return rc;
}

/* A quantised tensor's blocks kept beside its float32 copy (W_o: model.h); NULL for a float type. */
static int keep_blocks(const gguf_file *g, kv_model *m, const char *name, model_mat **out, kv_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    *out = NULL;
    if (!t || ggml_type_get(t->type)->blck == 1) return KV_OK;
    weights_ggml *b = model_alloc_raw(m, 1, sizeof *b, name, err);
    if (!b) return KV_EFAIL;
    *b = (weights_ggml){.data = t->data, .type = t->type, .mapped = true};
    *out = b;
    return KV_OK;
}

static int load_weights(const gguf_file *g, kv_model *m, bool *in_place, kv_err *err)
{
    const model_config *c = &m->cfg;
    m->wtype = resolve_type(g, m->wtype_want);
    int rc = load_matrix(g, m, "token_embd.weight", c->dim, c->vocab_size, &m->tok_embd, in_place, err);
    if (!rc) rc = load_tensor(g, m, "output_norm.weight", c->dim, 0, &m->output_norm, err);
    m->output = m->tok_embd; /* tied unless the file has its own */
    if (!rc && gguf_find_tensor(g, "output.weight"))
        rc = load_matrix(g, m, "output.weight", c->dim, c->vocab_size, &m->output, in_place, err);
    if (!rc && gguf_find_tensor(g, "rope_freqs.weight")) rc = load_rope_freqs(g, m, err);
    if (!rc) rc = model_alloc_layers(m, err);
    for (int64_t l = 0; l < c->n_layers && !rc; l++) {
        for (size_t i = 0; i < sizeof LAYER_TENSORS / sizeof LAYER_TENSORS[0] && !rc; i++) {
            if (!model_has(c, LAYER_TENSORS[i].need)) continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%" PRId64 ".%s", l, LAYER_TENSORS[i].name);
            void **slot = (void **)((char *)&m->layers[l] + LAYER_TENSORS[i].field);
            const int64_t ne0 = model_dim_size(c, LAYER_TENSORS[i].ne0), ne1 = model_dim_size(c, LAYER_TENSORS[i].ne1);
            /* the matrices of the model's type: every one but W_o (float32, model.h) */
            if (ne1 && LAYER_TENSORS[i].field != offsetof(model_layer, wo))
                rc = load_matrix(g, m, name, ne0, ne1, slot, in_place, err);
            else
                rc = load_tensor(g, m, name, ne0, ne1, (float **)slot, err);
            if (!rc && LAYER_TENSORS[i].field == offsetof(model_layer, wo) && m->wtype == MODEL_W_GGML)
                rc = keep_blocks(g, m, name, &m->layers[l].wo_blocks, err);
        }
    }
    return rc;
}

/* "ARCH.suffix" for the file's architecture. */
static const char *akey(char *buf, size_t cap, const char *arch, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

/* Features kvtrace's forward pass does not compute: refused rather than run wrong. */
static int refuse_unsupported(const gguf_file *g, const model_config *c, kv_err *err)
{
    const char *w = gguf_where(g), *scaling = "none", *a = c->architecture;
    char k[96];
    uint32_t experts = 0, vlen = (uint32_t)c->head_dim;
    int rc = gguf_get_u32(g, akey(k, sizeof k, a, "expert_count"), false, &experts, err);
    if (!rc) rc = gguf_get_str(g, akey(k, sizeof k, a, "rope.scaling.type"), false, &scaling, err);
    if (!rc) rc = gguf_get_u32(g, akey(k, sizeof k, a, "attention.value_length"), false, &vlen, err);
    if (rc) return rc;
    if (experts > 0)
        return kv_fail(err, KV_EINPUT, "%s: a mixture-of-experts model (%s.expert_count = %"
                       PRIu32 ") is not supported", w, a, experts);
    if (strcmp(scaling, "none") != 0 && !(strcmp(scaling, "llama3") == 0 &&
                                          gguf_find_tensor(g, "rope_freqs.weight")))
        return kv_fail(err, KV_EINPUT, "%s: RoPE scaling '%.32s' is not supported (kvtrace "
                       "applies rope_freqs.weight)", w, scaling);
    if (vlen != c->head_dim)
        return kv_fail(err, KV_EINPUT, "%s: value length %" PRIu32 " differs from the key "
                       "length %" PRId64, w, vlen, c->head_dim);
    return KV_OK;
}

/* The architecture's row (model/arch.c): its name, features and the RoPE
 * layout of its GGUFs. */
static int read_arch(const gguf_file *g, model_config *c, kv_err *err)
{
    const char *name = NULL;
    int rc = gguf_get_str(g, "general.architecture", true, &name, err);
    if (rc) return rc;
    const model_arch *a = arch_find_gguf(name);
    char names[128];
    if (!a)
        return kv_fail(err, KV_EINPUT, "%s: architecture '%.64s' is not supported (kvtrace reads "
                       "%s)", gguf_where(g), name, arch_names(names, sizeof names, true));
    arch_apply(a, c);
    c->rope = a->gguf_rope;
    return KV_OK;
}

/* vocab_size from token_embd.weight, checked against ARCH.vocab_size. */
static int read_vocab_size(const gguf_file *g, const char *arch, int64_t *V, kv_err *err)
{
    const char *w = gguf_where(g);
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (!te) return kv_fail(err, KV_EINPUT, "%s: missing tensor token_embd.weight", w);
    if (te->n_dims != 2 || te->ne[1] > INT32_MAX)
        return kv_fail(err, KV_EINPUT, "%s: tensor token_embd.weight is not a [dim, vocab] "
                       "matrix", w);
    uint32_t vocab = (uint32_t)te->ne[1], key_vocab = vocab;
    char k[96];
    int rc = gguf_get_u32(g, akey(k, sizeof k, arch, "vocab_size"), false, &key_vocab, err);
    if (rc) return rc;
    if (key_vocab != vocab)
        return kv_fail(err, KV_EINPUT, "%s: %s %" PRIu32 " but token_embd.weight has %" PRIu32
                       " rows", w, k, key_vocab, vocab);
    *V = vocab;
    return KV_OK;
}

/* The name: general.name, or the file name when that is just the architecture. */
static void model_name(const gguf_file *g, model_config *c)
{
    const char *w = gguf_where(g), *base = strrchr(w, '/'), *file = base ? base + 1 : w;
    const char *name = file;
    kv_err ignored = {0};
    if (gguf_get_str(g, "general.name", false, &name, &ignored) || strcmp(name, c->architecture) == 0)
        name = file;
    snprintf(c->name, sizeof c->name, "%.*s", (int)strcspn(name, "\n"), name);
    size_t n = strlen(c->name);
    if (name == file && n > 5 && strcmp(c->name + n - 5, ".gguf") == 0) c->name[n - 5] = '\0';
}

/* cfg from the ARCH.* keys; vocab_size from token_embd.weight. */
static int read_config(const gguf_file *g, model_config *c, kv_err *err)
{
    const char *w = gguf_where(g);
    memset(c, 0, sizeof *c);
    int rc = read_arch(g, c, err);
    if (rc) return rc;
    const char *a = c->architecture;
    char k[96];
    uint32_t dim = 0, ffn = 0, L = 0, H = 0, K = 0, rot = 0, ctx = 0, hd = 0;
    float eps = 0, theta = 10000.0f;
    if ((rc = gguf_get_u32(g, akey(k, sizeof k, a, "embedding_length"), true, &dim, err)) ||
        (rc = gguf_get_u32(g, akey(k, sizeof k, a, "feed_forward_length"), true, &ffn, err)) ||
        (rc = gguf_get_u32(g, akey(k, sizeof k, a, "block_count"), true, &L, err)) ||
        (rc = gguf_get_u32(g, akey(k, sizeof k, a, "attention.head_count"), true, &H, err)) ||
        (rc = gguf_get_f32(g, akey(k, sizeof k, a, "attention.layer_norm_rms_epsilon"), true,
                           &eps, err)) ||
        (rc = gguf_get_f32(g, akey(k, sizeof k, a, "rope.freq_base"), false, &theta, err)) ||
        (rc = gguf_get_u32(g, akey(k, sizeof k, a, "context_length"), false, &ctx, err)))
        return rc;
    K = H;
    hd = H && dim % H == 0 ? dim / H : 0;
    if ((rc = gguf_get_u32(g, akey(k, sizeof k, a, "attention.head_count_kv"), false, &K, err)) ||
        (rc = gguf_get_u32(g, akey(k, sizeof k, a, "attention.key_length"), false, &hd, err)))
        return rc;
    if (hd == 0)
        return kv_fail(err, KV_EINPUT, "%s: embedding_length %" PRIu32 " is not a multiple of "
                       "head_count %" PRIu32 " and there is no key_length", w, dim, H);
    rot = hd;
    if ((rc = gguf_get_u32(g, akey(k, sizeof k, a, "rope.dimension_count"), false, &rot, err)))
        return rc;
    if (rot != hd)
        return kv_fail(err, KV_EINPUT, "%s: %s.rope.dimension_count %" PRIu32 " differs from "
                       "head_dim %" PRIu32 " (partial RoPE is not supported)", w, a, rot, hd);
    c->n_layers = L, c->dim = dim, c->ffn_dim = ffn, c->n_heads = H, c->n_kv_heads = K;
    c->head_dim = hd, c->context_len = ctx, c->rope_theta = theta, c->norm_eps = eps;
    uint32_t window = 0; /* sliding-window attention: capture refuses sequences past it */
    if ((rc = gguf_get_u32(g, akey(k, sizeof k, a, "attention.sliding_window"), false, &window,
                           err)) ||
        (rc = read_vocab_size(g, a, &c->vocab_size, err)))
        return rc;
    c->sliding_window = window;
    model_name(g, c);
    if ((rc = model_config_check(c, w, err))) return rc;
    return refuse_unsupported(g, c, err);
}

/* tokenizer.ggml.{bos,eos,unknown}_token_id: -1 when absent or 0xFFFFFFFF. */
static int special_id(const gguf_file *g, const char *key, uint32_t dflt, int32_t n, int32_t *id,
                      kv_err *err)
{
    uint32_t v = dflt;
    int rc = gguf_get_u32(g, key, false, &v, err);
    if (rc) return rc;
    if (v != ABSENT_ID && v >= (uint32_t)n)
        return kv_fail(err, KV_EINPUT, "%s: %s %" PRIu32 " is outside the vocabulary (%" PRId32
                       " tokens)", gguf_where(g), key, v, n);
    *id = v == ABSENT_ID ? -1 : (int32_t)v;
    return KV_OK;
}

/* Scores (default 0) and token types (default normal; 0 "undefined" reads
 * as normal) of n tokens into scores[n], types[n]. */
static int token_arrays(const gguf_file *g, int32_t n, float *scores, int32_t *types, kv_err *err)
{
    const gguf_kv *kv;
    uint64_t cnt = 0;
    int rc = gguf_get_array(g, "tokenizer.ggml.scores", false, GGUF_N_VALUE_TYPES, &kv, &cnt, err);
    if (!rc && kv && cnt != (uint64_t)n)
        rc = kv_fail(err, KV_EINPUT, "%s: tokenizer.ggml.scores has %" PRIu64 " entries for %"
                     PRId32 " tokens", gguf_where(g), cnt, n);
    if (!rc && kv) rc = gguf_array_f32(g, kv, scores, cnt, err);
    if (!rc) rc = gguf_get_array(g, "tokenizer.ggml.token_type", false, GGUF_N_VALUE_TYPES, &kv,
                                 &cnt, err);
    if (!rc && kv && cnt != (uint64_t)n)
        rc = kv_fail(err, KV_EINPUT, "%s: tokenizer.ggml.token_type has %" PRIu64 " entries for %"
                     PRId32 " tokens", gguf_where(g), cnt, n);
    if (!rc && kv) rc = gguf_array_i32(g, kv, types, cnt, err);
    for (int32_t i = 0; i < n && !rc; i++) {
        if (!kv || types[i] == 0) types[i] = VOCAB_NORMAL;
        if (types[i] < VOCAB_NORMAL || types[i] > VOCAB_BYTE)
            rc = kv_fail(err, KV_EINPUT, "%s: token %" PRId32 " has unknown token type %" PRId32,
                         gguf_where(g), i, types[i]);
    }
    return rc;
}

static int fill_tokens(const gguf_file *g, const gguf_kv *tokens, int32_t n, kv_vocab *v,
                       kv_err *err)
{
    float *scores = kv_calloc((size_t)n, sizeof *scores, "vocabulary scores", err);   /* [n] */
    int32_t *types = kv_calloc((size_t)n, sizeof *types, "vocabulary types", err);    /* [n] */
    int rc = scores && types ? token_arrays(g, n, scores, types, err) : KV_EFAIL;
    for (int32_t i = 0; i < n && !rc; i++) {
        size_t len;
        const char *piece = gguf_array_str(g, tokens, (uint64_t)i, &len);
        if (memchr(piece, '\0', len))
            rc = kv_fail(err, KV_EINPUT, "%s: token %" PRId32 " holds a NUL byte", gguf_where(g),
                         i);
        else
            rc = vocab_set(v, i, piece, len, scores[i], (uint8_t)types[i], err);
    }
    free(scores);
    free(types);
    return rc;
}

/* tokenizer.ggml.merges: "a b" strings, split at the first space after the first character. */
static int gguf_merges(const gguf_file *g, bpe_model *b, kv_err *err)
{
    const gguf_kv *kv;
    uint64_t n = 0;
    int rc = gguf_get_array(g, "tokenizer.ggml.merges", true, GGUF_STRING, &kv, &n, err);
    for (uint64_t i = 0; i < n && !rc; i++) {
        size_t len;
        const char *m = gguf_array_str(g, kv, i, &len);
        char *dup = len && !memchr(m, '\0', len) ? kv_calloc(len + 1, 1, "a merge", err) : NULL;
        char *sp = dup ? memcpy(dup, m, len), strchr(dup + 1, ' ') : NULL;
        if (sp) {
            *sp = '\0';
            rc = bpe_add_merge(b, dup, sp + 1, gguf_where(g), err);
        } else {
            rc = kv_fail(err, KV_EINPUT, "%s: tokenizer.ggml.merges[%" PRIu64 "] is not two pieces and a space",
                         gguf_where(g), i);
        }
        free(dup);
    }
    return rc;
}

/* The byte-level BPE encoder of a gpt2 vocabulary: its pieces, the merges,
 * the control and user-defined tokens matched in the text before splitting
 * (as llama.cpp does), the pre-tokenizer named by tokenizer.ggml.pre
 * (absent: "default"), and BOS / EOS as the template when add_bos_token /
 * add_eos_token say so. v->add_bos then means "apply the template".
 * Without tokenizer.ggml.merges nothing is built (v->bpe stays NULL). */
static int gguf_bpe(const gguf_file *g, kv_vocab *v, kv_err *err)
{
    const char *w = gguf_where(g), *pre = NULL;
    bool add_eos = false;
    const gguf_kv *merges = NULL;
    uint64_t n_merges = 0;
    int opts = 0, rc = gguf_get_array(g, "tokenizer.ggml.merges", false, GGUF_STRING, &merges, &n_merges, err);
    if (rc || !merges) return rc; /* no merges: ids only (encoding refused, suggesting --tokens) */
    rc = gguf_get_str(g, "tokenizer.ggml.pre", false, &pre, err);
    if (!rc) rc = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", false, &add_eos, err);
    if (!rc && ((v->add_bos && v->bos < 0) || (add_eos && v->eos < 0)))
        rc = kv_fail(err, KV_EINPUT, "%s: add_%s_token is set but the vocabulary has no %s token id", w,
                     v->add_bos && v->bos < 0 ? "bos" : "eos", v->add_bos && v->bos < 0 ? "BOS" : "EOS");
    pretok *p = NULL;
    if (!rc) rc = pretok_named(&p, pre ? pre : "default", &opts, w, err);
    bpe_model *b = NULL;
    if (!rc) rc = bpe_new(&b, v->n, err);
    if (b) bpe_set_pretok(b, p);
    else pretok_free(p);
    for (int32_t i = 0; i < v->n && !rc; i++)
        if (v->types[i] != VOCAB_UNUSED) rc = bpe_set_piece(b, i, v->pieces[i], err);
    if (!rc) rc = gguf_merges(g, b, err);
    for (int32_t i = 0; i < v->n && !rc; i++)
        if (v->types[i] == VOCAB_CONTROL || v->types[i] == VOCAB_USER) rc = bpe_add_token(b, v->pieces[i], i, 0, err);
    if (!rc) {
        bpe_set_options(b, opts & PRETOK_NFC, opts & PRETOK_IGNORE_MERGES);
        rc = bpe_set_template(b, &v->bos, v->add_bos, &v->eos, add_eos, err);
    }
    if (!rc) rc = bpe_finish(b, w, err);
    if (rc) {
        bpe_free(b);
        return rc;
    }
    v->bpe = b;
    v->add_bos = true;
    return KV_OK;
}

/* tokenizer.chat_template, when the file has one, kept as text (chat.h). */
static int gguf_chat_template(const gguf_file *g, kv_vocab *v, kv_err *err)
{
    const char *t = NULL;
    int rc = gguf_get_str(g, "tokenizer.chat_template", false, &t, err);
    if (rc || !t) return rc;
    if (kv_utf8_invalid(t, strlen(t)) >= 0)
        return kv_fail(err, KV_EINPUT, "%s: tokenizer.chat_template is not valid UTF-8", gguf_where(g));
    if (!(v->chat_template = strdup(t))) return kv_fail(err, KV_EFAIL, "out of memory");
    return KV_OK;
}

/* The vocabulary from tokenizer.ggml.*: none (*has false) when the file has
 * no tokenizer. n_expect > 0: the number of tokens the weights have. */
static int gguf_vocab(const gguf_file *g, int64_t n_expect, kv_vocab *v, bool *has, kv_err *err)
{
    const char *w = gguf_where(g), *model = NULL;
    *has = false;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", false, &model, err);
    if (rc || !model) return rc;
    bool spm = strcmp(model, "llama") == 0;
    if (!spm && strcmp(model, "gpt2") != 0)
        return kv_fail(err, KV_EINPUT, "%s: tokenizer model '%.64s' is not supported (llama, "
                       "gpt2)", w, model);
    const gguf_kv *tokens;
    uint64_t n = 0;
    if ((rc = gguf_get_array(g, "tokenizer.ggml.tokens", true, GGUF_STRING, &tokens, &n, err)))
        return rc;
    if (n_expect > 0 && n != (uint64_t)n_expect)
        return kv_fail(err, KV_EINPUT, "%s: the tokenizer has %" PRIu64 " tokens, token_embd."
                       "weight has %" PRId64 " rows", w, n, n_expect);
    if (n == 0 || n > INT32_MAX)
        return kv_fail(err, KV_EINPUT, "%s: tokenizer.ggml.tokens has %" PRIu64 " entries", w, n);
    int32_t nt = (int32_t)n;
    if ((rc = vocab_init(v, nt, err))) return rc;
    v->kind = spm ? VOCAB_SPM : VOCAB_BYTE_BPE;
    v->add_space_prefix = spm;
    v->add_bos = spm; /* gpt2 files without add_bos_token: no BOS (Qwen's) */
    /* SentencePiece files without the ids mean llama's <unk> 0, <s> 1, </s> 2 */
    uint32_t bos = spm ? 1 : ABSENT_ID, eos = spm ? 2 : ABSENT_ID, unk = spm ? 0 : ABSENT_ID;
    if ((rc = fill_tokens(g, tokens, nt, v, err)) ||
        (rc = special_id(g, "tokenizer.ggml.bos_token_id", bos, nt, &v->bos, err)) ||
        (rc = special_id(g, "tokenizer.ggml.eos_token_id", eos, nt, &v->eos, err)) ||
        (rc = special_id(g, "tokenizer.ggml.unknown_token_id", unk, nt, &v->unk, err)) ||
        (rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", false, &v->add_bos, err)) ||
        (rc = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", false, &v->add_space_prefix,
                            err)) ||
        (rc = vocab_finish(v, w, err)) || (!spm && (rc = gguf_bpe(g, v, err))) ||
        (rc = gguf_chat_template(g, v, err)))
        return rc;
    *has = true;
    return KV_OK;
}

static int read_vocab(const gguf_file *g, kv_model *m, kv_err *err)
{
    return gguf_vocab(g, m->cfg.vocab_size, &m->vocab, &m->has_vocab, err);
}

int gguf_read_tokenizer(const char *path, kv_vocab *v, bool *has, kv_err *err)
{
    gguf_file *g = NULL;
    *has = false;
    int rc = gguf_open(path, &g, err);
    if (!rc) rc = gguf_vocab(g, 0, v, has, err);
    gguf_close(g);
    if (rc || !*has) vocab_free(v);
    return rc;
}

static const char *tensor_name(const void *g, int64_t i)
{
    return gguf_tensor_at(g, i)->name;
}

int model_from_gguf(const gguf_file *g, kv_model *m, bool *in_place, kv_err *err)
{
    *in_place = false;
    int rc = read_config(g, &m->cfg, err);
    if (!rc) rc = load_weights(g, m, in_place, err);
    if (!rc) { /* no tensor beyond those the metadata implies (e.g. blk.N past block_count) */
        char implies[96];
        snprintf(implies, sizeof implies, "%s.block_count = %lld", m->cfg.architecture, (long long)m->cfg.n_layers);
        rc = model_tensors_exact(m, gguf_where(g), implies, gguf_tensor_count(g), tensor_name, g, err);
    }
    if (!rc) rc = read_vocab(g, m, err);
    return rc;
}

static void gguf_close_any(void *g)
{
    gguf_close(g);
}

bool model_probe_gguf(const model_source *s)
{
    size_t n = strlen(s->spec);
    return (s->n_head == 4 && memcmp(s->head, "GGUF", 4) == 0) ||
           (n >= 5 && strcasecmp(s->spec + n - 5, ".gguf") == 0);
}

int model_load_gguf(const model_source *s, kv_model *m, kv_err *err)
{
    gguf_file *g = NULL;
    bool in_place = false;
    int rc = gguf_open(s->spec, &g, err);
    if (!rc) rc = model_from_gguf(g, m, &in_place, err);
    if (!rc && in_place) return model_keep_file(m, gguf_close_any, g, err); /* the weights point into it */
    gguf_close(g);
    return rc;
}
