/* load_hf: a Hugging Face checkpoint directory into kv_model.
 *
 * config.json (hf_config.c) gives the shape; the weights come from
 * model.safetensors, or from the shards that model.safetensors.index.json's
 * weight_map names (file names only: no path may leave the directory). Every
 * tensor's shape is checked against the config before it is read; F32, F16
 * and BF16 become float32. HF stores Q/K rows for rotate-half RoPE, and the
 * walk runs them that way (rope neox), each head's dimensions in the order
 * the model computes them. tokenizer.json, when present, gives the
 * vocabulary (vocab_hf.c).
 *
 * Names (transformers' LlamaForCausalLM and kin):
 *   model.embed_tokens.weight [V][dim], model.norm.weight [dim],
 *   lm_head.weight [V][dim] (absent with tie_word_embeddings),
 *   model.layers.N.{input_layernorm, post_attention_layernorm}.weight [dim],
 *   model.layers.N.self_attn.{q,k,v,o}_proj.weight, .{q,k,v}_proj.bias (qwen2),
 *   model.layers.N.self_attn.{q,k}_norm.weight [D] (qwen3),
 *   model.layers.N.mlp.{gate,up,down}_proj.weight. */
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileopen.h"
#include "model/formats/format.h"
#include "model/formats/hf.h"
#include "model/formats/safetensors.h"
#include "model/model.h"
#include "model/weights.h"

#define MAX_SHARDS 4096
#define PATH_CAP 4096

typedef struct {
    const char *dir;
    json_t *weight_map;  /* the index's name -> shard file, or NULL (one file) */
    st_file **shard;     /* [n_shards] */
    bool *in_place;      /* [n_shards] the model's weights point into its mapping */
    const char **shard_name; /* [n_shards] borrowed from weight_map */
    int n_shards;
} hf_files;

static int join(char *buf, const char *dir, const char *name, kv_err *err)
{
    if ((size_t)snprintf(buf, PATH_CAP, "%s/%s", dir, name) >= PATH_CAP)
        return kv_fail(err, KV_EUSAGE, "%s: path too long", dir);
    return KV_OK;
}

static void st_close_any(void *f)
{
    st_close(f);
}

static void files_close(hf_files *f)
{
    for (int i = 0; i < f->n_shards; i++) st_close(f->shard[i]);
    free(f->shard);
    free(f->in_place);
    free(f->shard_name);
    json_decref(f->weight_map);
    memset(f, 0, sizeof *f);
}

/* A shard file name from the index: a plain name inside the directory. */
static int check_shard_name(const char *index, const char *s, kv_err *err)
{
    if (!s[0] || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return kv_fail(err, KV_EINPUT, "%s: shard name '%.200s' is not a file name in the "
                       "checkpoint directory", index, s);
    return KV_OK;
}

/* Opens every shard the index names, once each. */
static int open_shards(hf_files *f, const char *index, kv_err *err)
{
    size_t n = json_object_size(f->weight_map);
    f->shard = kv_calloc(n ? n : 1, sizeof *f->shard, "shards", err);
    f->shard_name = kv_calloc(n ? n : 1, sizeof *f->shard_name, "shards", err);
    if (!f->shard || !f->shard_name) return KV_EFAIL;
    const char *tname;
    json_t *v;
    json_object_foreach(f->weight_map, tname, v) {
        if (!json_is_string(v))
            return kv_fail(err, KV_EINPUT, "%s: weight_map entry '%.200s' is not a file name",
                           index, tname);
        const char *s = json_string_value(v);
        int rc = check_shard_name(index, s, err), seen = 0;
        for (int i = 0; !rc && i < f->n_shards && !seen; i++) seen = !strcmp(f->shard_name[i], s);
        if (rc || seen) {
            if (rc) return rc;
            continue;
        }
        if (f->n_shards == MAX_SHARDS)
            return kv_fail(err, KV_EINPUT, "%s: more than %d shards", index, MAX_SHARDS);
        char path[PATH_CAP];
        if ((rc = join(path, f->dir, s, err))) return rc;
        if (access(path, F_OK) != 0)
            return kv_fail(err, KV_EINPUT, "%s: missing shard (named by %s): %s", path, index,
                           strerror(errno));
        f->shard_name[f->n_shards] = s;
        if ((rc = st_open(path, &f->shard[f->n_shards], err))) return rc;
        f->n_shards++;
    }
    return KV_OK;
}

static int files_open(hf_files *f, const char *dir, kv_err *err)
{
    memset(f, 0, sizeof *f);
    f->dir = dir;
    char index[PATH_CAP], single[PATH_CAP];
    int rc = join(index, dir, "model.safetensors.index.json", err);
    if (!rc) rc = join(single, dir, "model.safetensors", err);
    if (rc) return rc;
    if (access(index, F_OK) != 0) {
        if (access(single, F_OK) != 0)
            return kv_fail(err, KV_EINPUT, "%s: no model.safetensors or model.safetensors."
                           "index.json in the checkpoint directory", dir);
        f->shard = kv_calloc(1, sizeof *f->shard, "shards", err);
        if (!f->shard) return KV_EFAIL;
        if ((rc = st_open(single, &f->shard[0], err))) return rc;
        f->n_shards = 1;
        return KV_OK;
    }
    json_error_t je;
    if ((rc = kv_input_check(index, false, err))) return rc;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return kv_fail(err, KV_EINPUT, "%s: malformed JSON at line %d: %.200s", index, je.line,
                       je.text);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(root);
        return kv_fail(err, KV_EINPUT, "%s: no \"weight_map\" object", index);
    }
    f->weight_map = json_incref(wm);
    json_decref(root);
    return open_shards(f, index, err);
}

/* The tensor `name`: NULL (and KV_OK) when absent. */
static int find_tensor(const hf_files *f, const char *name, const st_file **sf,
                       const st_tensor **t, kv_err *err)
{
    *t = NULL, *sf = NULL;
    if (!f->weight_map) {
        *sf = f->shard[0];
        *t = st_find(*sf, name);
        return KV_OK;
    }
    json_t *v = json_object_get(f->weight_map, name);
    if (!v) return KV_OK;
    for (int i = 0; i < f->n_shards; i++)
        if (strcmp(f->shard_name[i], json_string_value(v)) == 0) *sf = f->shard[i];
    if (!(*t = st_find(*sf, name)))
        return kv_fail(err, KV_EINPUT, "%s: tensor %s (listed in the index) is missing",
                       st_where(*sf), name);
    return KV_OK;
}

/* Tensor `name` of shape [rows] (cols == 0) or [rows][cols], checked and
 * noted as read: *t NULL (and KV_OK) when absent and optional. */
static int find_checked(const hf_files *f, kv_model *m, const char *name, int64_t rows, int64_t cols,
                        bool optional, const st_file **out_sf, const st_tensor **out_t, kv_err *err)
{
    const st_file *sf;
    const st_tensor *t;
    int rc = find_tensor(f, name, &sf, &t, err);
    *out_sf = sf, *out_t = t;
    if (rc || (!t && optional)) return rc;
    if (!t) return kv_fail(err, KV_EINPUT, "%s: missing tensor %s", f->dir, name);
    int want_dims = cols ? 2 : 1;
    if (t->n_dims != want_dims || t->shape[0] != rows || (cols && t->shape[1] != cols))
        return kv_fail(err, KV_EINPUT, "%s: tensor %s has shape [%" PRId64 "%s%" PRId64 "%s], "
                       "config.json implies [%" PRId64 "%s%" PRId64 "]", st_where(sf), name,
                       t->n_dims ? t->shape[0] : 0, t->n_dims > 1 ? ", " : "",
                       t->n_dims > 1 ? t->shape[1] : 0, t->n_dims > 2 ? ", ..." : "", rows,
                       cols ? ", " : "", cols);
    if ((rc = model_tensor_read(m, t->name, err)) || (rc = st_tensor_readable(sf, t, err))) return rc;
    return KV_OK;
}

/* Tensor `name` of shape [rows] (cols == 0) or [rows][cols] as float32 owned
 * by m; absent: an error unless optional (then *out stays NULL). */
static int load_tensor(const hf_files *f, kv_model *m, const char *name, int64_t rows,
                       int64_t cols, bool optional, float **out, kv_err *err)
{
    const st_file *sf;
    const st_tensor *t;
    int rc = find_checked(f, m, name, rows, cols, optional, &sf, &t, err);
    if (rc || !t) return rc;
    float *dst = model_alloc(m, (size_t)t->n_elems, name, err);
    if (!dst) return KV_EFAIL;
    *out = dst;
    return st_tensor_read_f32(sf, t, dst, t->n_elems, err);
}

/* st_tensor_read_f32 as weights_from_file reads a tensor. */
static int read_f32(const void *sf, const void *t, float *dst, uint64_t n, kv_err *err)
{
    return st_tensor_read_f32(sf, t, dst, n, err);
}

/* The file's dtype name of a float weight type. */
static const char *st_name_of(model_wtype t)
{
    return t == MODEL_W_F32 ? "F32" : t == MODEL_W_F16 ? "F16" : "BF16";
}

/* A weight matrix [rows][cols] of the model's type (m->wtype): in place in
 * the file's mapping where the tensor already is of that type (safetensors
 * data is contiguous; aligned to the type's size here), else read as float32
 * (and rounded, for 16 bits): weights_from_file. Non-finite weights are
 * refused either way. */
static int load_matrix(hf_files *f, kv_model *m, const char *name, int64_t rows, int64_t cols, model_mat **out,
                       kv_err *err)
{
    const st_file *sf;
    const st_tensor *t;
    int rc = find_checked(f, m, name, rows, cols, false, &sf, &t, err);
    if (rc) return rc;
    bool in_place = false;
    rc = weights_from_file(m, st_where(sf), name, t->data, !strcmp(st_dtype_name(t->dtype), st_name_of(m->wtype)),
                           (size_t)t->n_elems, read_f32, sf, t, out, &in_place, err);
    for (int i = 0; in_place && i < f->n_shards; i++) f->in_place[i] |= f->shard[i] == sf;
    return rc;
}

/* The type the matrices are held in: the one asked for, or (MODEL_W_KEEP)
 * the file's, read from layer 0's q_proj: F16 or BF16 stay 16-bit. */
static model_wtype resolve_type(const hf_files *f, model_wtype want, kv_err *err)
{
    if (want != MODEL_W_KEEP) return want;
    const st_file *sf;
    const st_tensor *t;
    if (find_tensor(f, "model.layers.0.self_attn.q_proj.weight", &sf, &t, err) || !t) return MODEL_W_F32;
    const char *d = st_dtype_name(t->dtype);
    return !strcmp(d, "F16") ? MODEL_W_F16 : !strcmp(d, "BF16") ? MODEL_W_BF16 : MODEL_W_F32;
}

/* Shapes named by what they measure (model.h), short for the table below. */
enum { S_NONE = MODEL_DIM_NONE, S_DIM = MODEL_DIM_HIDDEN, S_Q = MODEL_DIM_Q, S_KV = MODEL_DIM_KV, S_FFN = MODEL_DIM_FFN,
       S_HEAD = MODEL_DIM_HEAD };
/* Which models have a tensor: all, or those with a feature (model.h). */
enum { NEED_ALWAYS = MODEL_NEED_ALL, NEED_BIAS = MODEL_NEED_QKV_BIAS, NEED_QKNORM = MODEL_NEED_QK_NORM };

static const struct {
    const char *name;  /* after model.layers.N. */
    size_t field;      /* offsetof(model_layer, ...) */
    int rows, cols, need;
} LAYER_TENSORS[] = {
    {"input_layernorm.weight", offsetof(model_layer, attn_norm), S_DIM, S_NONE, NEED_ALWAYS},
    {"self_attn.q_proj.weight", offsetof(model_layer, wq), S_Q, S_DIM, NEED_ALWAYS},
    {"self_attn.k_proj.weight", offsetof(model_layer, wk), S_KV, S_DIM, NEED_ALWAYS},
    {"self_attn.v_proj.weight", offsetof(model_layer, wv), S_KV, S_DIM, NEED_ALWAYS},
    {"self_attn.o_proj.weight", offsetof(model_layer, wo), S_DIM, S_Q, NEED_ALWAYS},
    {"self_attn.q_proj.bias", offsetof(model_layer, bq), S_Q, S_NONE, NEED_BIAS},
    {"self_attn.k_proj.bias", offsetof(model_layer, bk), S_KV, S_NONE, NEED_BIAS},
    {"self_attn.v_proj.bias", offsetof(model_layer, bv), S_KV, S_NONE, NEED_BIAS},
    {"self_attn.q_norm.weight", offsetof(model_layer, q_norm), S_HEAD, S_NONE, NEED_QKNORM},
    {"self_attn.k_norm.weight", offsetof(model_layer, k_norm), S_HEAD, S_NONE, NEED_QKNORM},
    {"post_attention_layernorm.weight", offsetof(model_layer, ffn_norm), S_DIM, S_NONE,
     NEED_ALWAYS},
    {"mlp.gate_proj.weight", offsetof(model_layer, w_gate), S_FFN, S_DIM, NEED_ALWAYS},
    {"mlp.up_proj.weight", offsetof(model_layer, w_up), S_FFN, S_DIM, NEED_ALWAYS},
    {"mlp.down_proj.weight", offsetof(model_layer, w_down), S_DIM, S_FFN, NEED_ALWAYS},
};

static int load_weights(hf_files *f, const hf_features *ft, kv_model *m, kv_err *err)
{
    const model_config *c = &m->cfg;
    m->wtype = resolve_type(f, m->wtype_want, err);
    if (!(f->in_place = kv_calloc((size_t)f->n_shards, sizeof *f->in_place, "shards", err))) return KV_EFAIL;
    int rc = load_matrix(f, m, "model.embed_tokens.weight", c->vocab_size, c->dim, &m->tok_embd, err);
    if (!rc) rc = load_tensor(f, m, "model.norm.weight", c->dim, 0, false, &m->output_norm, err);
    m->output = m->tok_embd;
    if (!rc && !ft->tied) rc = load_matrix(f, m, "lm_head.weight", c->vocab_size, c->dim, &m->output, err);
    if (!rc) rc = model_alloc_layers(m, err);
    for (int64_t l = 0; l < c->n_layers && !rc; l++) {
        for (size_t i = 0; i < sizeof LAYER_TENSORS / sizeof LAYER_TENSORS[0] && !rc; i++) {
            if (!model_has(c, LAYER_TENSORS[i].need)) continue;
            char name[128];
            snprintf(name, sizeof name, "model.layers.%" PRId64 ".%s", l, LAYER_TENSORS[i].name);
            void **slot = (void **)((char *)&m->layers[l] + LAYER_TENSORS[i].field);
            const int64_t rows = model_dim_size(c, LAYER_TENSORS[i].rows), cols = model_dim_size(c, LAYER_TENSORS[i].cols);
            /* the matrices of the model's type: every one but W_o (float32, model.h) */
            if (cols && LAYER_TENSORS[i].field != offsetof(model_layer, wo))
                rc = load_matrix(f, m, name, rows, cols, slot, err);
            else
                rc = load_tensor(f, m, name, rows, cols, false, (float **)slot, err);
        }
    }
    return rc;
}

/* The shards the model's weights point into go to the model (closed by model_free). */
static int keep_mapped(hf_files *f, kv_model *m, kv_err *err)
{
    int rc = KV_OK;
    for (int i = 0; i < f->n_shards && !rc; i++)
        if (f->in_place[i]) {
            rc = model_keep_file(m, st_close_any, f->shard[i], err);
            f->shard[i] = NULL;
        }
    return rc;
}

/* Tensor i of every shard in turn. */
static const char *tensor_name(const void *files, int64_t i)
{
    const hf_files *f = files;
    for (int s = 0; s < f->n_shards; i -= st_tensor_count(f->shard[s]), s++)
        if (i < st_tensor_count(f->shard[s])) return st_tensor_at(f->shard[s], i)->name;
    return NULL;
}

/* No tensor beyond those config.json implies (model.layers.N past
 * num_hidden_layers, ...). transformers' rotary_emb.inv_freq buffers are no
 * weights (the walk computes RoPE), and a tied checkpoint's lm_head.weight is
 * one transformers ignores: both are accepted as read. */
static int check_exact(const hf_files *f, kv_model *m, kv_err *err)
{
    int64_t n = 0;
    for (int s = 0; s < f->n_shards; s++) n += st_tensor_count(f->shard[s]);
    int rc = KV_OK;
    for (int64_t i = 0; i < n && !rc; i++) {
        const char *name = tensor_name(f, i), *buf = strstr(name, ".rotary_emb.inv_freq");
        const bool buffer = buf && buf[strlen(".rotary_emb.inv_freq")] == '\0';
        if (buffer || (strcmp(name, "lm_head.weight") == 0 && m->output == m->tok_embd))
            rc = model_tensor_read(m, name, err);
    }
    char implies[96];
    snprintf(implies, sizeof implies, "config.json's num_hidden_layers = %lld", (long long)m->cfg.n_layers);
    return rc ? rc : model_tensors_exact(m, f->dir, implies, n, tensor_name, f, err);
}

/* The directory's last path component (trailing slashes ignored; "." and
 * ".." resolved). */
static void dir_name(const char *dir, char *buf, size_t cap)
{
    char real[PATH_MAX];
    if (realpath(dir, real)) dir = real;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(buf, cap, "%.*s", (int)(n - b), dir + b);
}

static int read_vocab(const char *dir, kv_model *m, kv_err *err)
{
    char path[PATH_CAP];
    int rc = join(path, dir, "tokenizer.json", err);
    if (rc || access(path, F_OK) != 0) return rc;
    return hf_read_tokenizer(path, m->cfg.vocab_size, &m->vocab, &m->has_vocab, err);
}

bool model_probe_hf(const model_source *s)
{
    return S_ISDIR(s->st.st_mode);
}

int model_load_hf(const model_source *s, kv_model *m, kv_err *err)
{
    const char *dir = s->spec;
    char path[PATH_CAP];
    hf_features ft;
    int rc = join(path, dir, "config.json", err);
    if (!rc) rc = hf_read_config(path, &m->cfg, &ft, err);
    if (rc) return rc;
    dir_name(dir, m->cfg.name, sizeof m->cfg.name);
    if ((rc = model_config_check(&m->cfg, path, err))) return rc;
    if (ft.llama3 && (rc = model_set_llama3_scaling(m, ft.factor, ft.low_freq_factor,
                                                    ft.high_freq_factor, ft.original_ctx, path,
                                                    err)))
        return rc;
    hf_files f;
    rc = files_open(&f, dir, err);
    if (!rc) rc = load_weights(&f, &ft, m, err);
    if (!rc) rc = check_exact(&f, m, err);
    if (!rc) rc = keep_mapped(&f, m, err);
    files_close(&f);
    if (!rc) rc = read_vocab(dir, m, err);
    return rc;
}
