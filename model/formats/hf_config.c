/* hf_config: a Hugging Face config.json (transformers' config of an
 * architecture in model/arch.c's table: LlamaConfig, MistralConfig,
 * Qwen2Config, Qwen3Config) into model_config (see hf.h).
 *
 * Defaults are transformers' own: num_key_value_heads = heads, head_dim =
 * hidden / heads, rope_theta 10000, rms_norm_eps 1e-6, hidden_act silu,
 * tie_word_embeddings false. The architecture's row gives the features, the
 * sliding-window keys and the RoPE layout (HF checkpoints hold Q/K rows for
 * rotate-half RoPE: neox). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fileopen.h"
#include "model/arch.h"
#include "model/formats/hf.h"

typedef struct {
    const char *path;
    json_t *root;
    kv_err *err;
} cfg_ctx;

static int bad(const cfg_ctx *x, const char *key, const char *what)
{
    return kv_fail(x->err, KV_EINPUT, "%s: \"%s\" %s", x->path, key, what);
}

/* An integer field in [lo, hi] (absent: *out unchanged, unless required). */
static int get_int(const cfg_ctx *x, const char *key, bool required, int64_t lo, int64_t hi,
                   int64_t *out)
{
    json_t *v = json_object_get(x->root, key);
    if (!v || json_is_null(v)) return required ? bad(x, key, "is missing") : KV_OK;
    if (!json_is_integer(v)) return bad(x, key, "is not an integer");
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return kv_fail(x->err, KV_EINPUT, "%s: \"%s\" = %" PRId64 " is outside [%" PRId64 ", %"
                       PRId64 "]", x->path, key, (int64_t)i, lo, hi);
    *out = i;
    return KV_OK;
}

static int get_num(const cfg_ctx *x, json_t *obj, const char *key, bool required, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return required ? bad(x, key, "is missing") : KV_OK;
    if (!json_is_number(v) || !isfinite(json_number_value(v))) return bad(x, key, "is not a number");
    *out = json_number_value(v);
    return KV_OK;
}

static int get_bool(const cfg_ctx *x, const char *key, bool *out)
{
    json_t *v = json_object_get(x->root, key);
    if (!v || json_is_null(v)) return KV_OK;
    if (!json_is_boolean(v)) return bad(x, key, "is not true or false");
    *out = json_is_true(v);
    return KV_OK;
}

/* model_type, or the class in architectures[0]: a row of model/arch.c, whose
 * name, features and RoPE layout go into c. */
static int architecture(const cfg_ctx *x, model_config *c, const model_arch **row)
{
    json_t *mt = json_object_get(x->root, "model_type");
    json_t *ar = json_array_get(json_object_get(x->root, "architectures"), 0);
    const char *name = json_is_string(mt) ? json_string_value(mt) :
                       json_is_string(ar) ? json_string_value(ar) : NULL;
    if (!name) return bad(x, "model_type", "is missing (and so is \"architectures\")");
    char names[128];
    if (!(*row = arch_find_hf(name)))
        return kv_fail(x->err, KV_EINPUT, "%s: architecture '%.64s' is not supported (kvtrace "
                       "runs %s)", x->path, name, arch_names(names, sizeof names, false));
    arch_apply(*row, c);
    c->rope = (*row)->hf_rope;
    return KV_OK;
}

/* transformers 5 writes rope_parameters (rope_theta, rope_type and the scaling's fields inside it)
 * where 4.x wrote a top-level rope_theta and rope_scaling: the object, or NULL without one. */
static int rope_parameters(const cfg_ctx *x, json_t **rp)
{
    *rp = json_object_get(x->root, "rope_parameters");
    if (*rp && json_is_null(*rp)) *rp = NULL;
    return !*rp || json_is_object(*rp) ? KV_OK : bad(x, "rope_parameters", "is not an object");
}

/* rope_theta: the top-level key (4.x), or rope_parameters' (5.x); both given must agree. */
static int rope_theta(const cfg_ctx *x, json_t *rp, double *theta)
{
    double top = 0.0, inner = 0.0;
    const bool has_top = json_object_get(x->root, "rope_theta") != NULL, has_inner = rp && json_object_get(rp, "rope_theta");
    int rc = get_num(x, x->root, "rope_theta", false, &top);
    if (!rc && has_inner) rc = get_num(x, rp, "rope_theta", true, &inner);
    if (!rc && has_top && has_inner && top != inner)
        return kv_fail(x->err, KV_EINPUT, "%s: rope_theta %.17g and rope_parameters.rope_theta %.17g disagree", x->path,
                       top, inner);
    if (!rc && (has_top || has_inner)) *theta = has_top ? top : inner;
    return rc;
}

static int rope_scaling(const cfg_ctx *x, json_t *rp, hf_features *f)
{
    json_t *rs = json_object_get(x->root, "rope_scaling");
    if (!rs || json_is_null(rs)) rs = rp; /* 5.x: the scaling's fields sit in rope_parameters */
    if (!rs || json_is_null(rs)) return KV_OK;
    if (!json_is_object(rs)) return bad(x, "rope_scaling", "is not an object");
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : rs == rp ? "default" : "?";
    if (strcmp(type, "default") == 0) return KV_OK;
    if (strcmp(type, "llama3") != 0)
        return kv_fail(x->err, KV_EINPUT, "%s: rope_scaling type '%.32s' is not supported "
                       "(kvtrace computes llama3 scaling)", x->path, type);
    f->llama3 = true;
    int rc = get_num(x, rs, "factor", true, &f->factor);
    if (!rc) rc = get_num(x, rs, "low_freq_factor", true, &f->low_freq_factor);
    if (!rc) rc = get_num(x, rs, "high_freq_factor", true, &f->high_freq_factor);
    if (!rc) rc = get_num(x, rs, "original_max_position_embeddings", true, &f->original_ctx);
    return rc;
}

/* Sliding-window attention: the row's key, when its switch (if it has one)
 * is true (mistral: sliding_window; qwen: only with use_sliding_window). */
static int sliding_window(const cfg_ctx *x, const model_arch *a, model_config *c)
{
    bool use = a->hf_window && !a->hf_window_switch;
    int rc = a->hf_window && a->hf_window_switch ? get_bool(x, a->hf_window_switch, &use) : KV_OK;
    if (!rc && use) rc = get_int(x, a->hf_window, false, 1, INT64_MAX, &c->sliding_window);
    return rc;
}

/* Features the walk does not compute: refused, never silently ignored. */
static int refuse_unsupported(const cfg_ctx *x, const model_config *c)
{
    json_t *act = json_object_get(x->root, "hidden_act");
    if (act && !(json_is_string(act) && strcmp(json_string_value(act), "silu") == 0))
        return bad(x, "hidden_act", "is not \"silu\" (kvtrace computes SwiGLU)");
    bool attn_bias = false, mlp_bias = false;
    int rc = get_bool(x, "mlp_bias", &mlp_bias);
    if (!rc && !c->qkv_bias) /* an architecture's own q/k/v biases are not in the config */
        rc = get_bool(x, "attention_bias", &attn_bias);
    if (!rc && (attn_bias || mlp_bias))
        return bad(x, attn_bias ? "attention_bias" : "mlp_bias", "is true: biases on o_proj or "
                   "the MLP are not supported");
    double partial = 1.0;
    if (!rc) rc = get_num(x, x->root, "partial_rotary_factor", false, &partial);
    if (!rc && partial != 1.0) return bad(x, "partial_rotary_factor", "is not 1 (partial RoPE)");
    return rc;
}

static int read_shape(const cfg_ctx *x, model_config *c)
{
    int64_t dim = 0, ffn = 0, L = 0, H = 0, K = 0, V = 0, ctx = 0, hd = 0;
    int rc;
    if ((rc = get_int(x, "hidden_size", true, 1, 1 << 20, &dim)) ||
        (rc = get_int(x, "intermediate_size", true, 1, 1 << 22, &ffn)) ||
        (rc = get_int(x, "num_hidden_layers", true, 1, 4096, &L)) ||
        (rc = get_int(x, "num_attention_heads", true, 1, 4096, &H)) ||
        (rc = get_int(x, "vocab_size", true, 1, 1 << 26, &V)) ||
        (rc = get_int(x, "max_position_embeddings", false, 0, INT64_C(1) << 32, &ctx)))
        return rc;
    K = H;
    hd = dim % H == 0 ? dim / H : 0;
    if ((rc = get_int(x, "num_key_value_heads", false, 1, H, &K)) ||
        (rc = get_int(x, "head_dim", false, 2, 4096, &hd)))
        return rc;
    if (hd == 0) return bad(x, "hidden_size", "is not a multiple of num_attention_heads and "
                            "there is no \"head_dim\"");
    c->dim = dim, c->ffn_dim = ffn, c->n_layers = L, c->n_heads = H, c->n_kv_heads = K;
    c->head_dim = hd, c->vocab_size = V, c->context_len = ctx;
    return KV_OK;
}

static int read_all(const cfg_ctx *x, model_config *c, hf_features *f)
{
    const model_arch *a = NULL;
    int rc = architecture(x, c, &a);
    if (!rc) rc = read_shape(x, c);
    c->rope_theta = 10000.0, c->norm_eps = 1e-6;
    json_t *rp = NULL;
    if (!rc) rc = rope_parameters(x, &rp);
    if (!rc) rc = rope_theta(x, rp, &c->rope_theta);
    if (!rc) rc = get_num(x, x->root, "rms_norm_eps", false, &c->norm_eps);
    if (!rc) rc = get_bool(x, "tie_word_embeddings", &f->tied);
    if (!rc) rc = rope_scaling(x, rp, f);
    if (!rc) rc = sliding_window(x, a, c);
    if (!rc) rc = refuse_unsupported(x, c);
    return rc;
}

int hf_read_config(const char *path, model_config *c, hf_features *f, kv_err *err)
{
    memset(f, 0, sizeof *f);
    int rc0 = kv_input_check(path, true, err);
    if (rc0) return rc0;
    if (access(path, R_OK) != 0)
        return kv_fail(err, KV_EINPUT, "%s: cannot be read (%s): a Hugging Face checkpoint "
                       "directory needs config.json", path, strerror(errno));
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return kv_fail(err, KV_EINPUT, "%s: malformed JSON at line %d: %.200s", path, je.line,
                       je.text);
    cfg_ctx x = {path, root, err};
    int rc = json_is_object(root) ? read_all(&x, c, f)
                                  : kv_fail(err, KV_EINPUT, "%s: is not a JSON object", path);
    json_decref(root);
    return rc;
}
