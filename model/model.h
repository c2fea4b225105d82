/* model: the one in-memory description of a model that every loader fills
 * (GGUF, Hugging Face checkpoint directories, llama2.c, random:NAME) and
 * the forward pass reads. Weights are row-major W[out][in], so that y = W x
 * is cblas_sgemm(RowMajor, NoTrans, Trans) over a chunk of rows. Vectors
 * (norms, biases) and W_o are float32; the other matrices (Q/K/V, the FFN's
 * three, the embedding and the output) are of the model's one type `wtype`:
 * float32, IEEE half / bfloat16 held in 16 bits, or each matrix in its GGUF
 * file's own ggml type (quantised blocks), decoded a tile at a time inside
 * the products (model/weights.h; docs/capture.md). */
#ifndef KV_MODEL_H
#define KV_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/tokenizer/vocab.h"
#include "core/kv_error.h"
#include "core/rope.h"

typedef struct {
    char name[256];          /* for the trace's model_name */
    char architecture[16];   /* llama, mistral, qwen2, qwen3 */
    int64_t n_layers;        /* L */
    int64_t dim;             /* model width */
    int64_t ffn_dim;         /* SwiGLU hidden width */
    int64_t n_heads;         /* H */
    int64_t n_kv_heads;      /* K */
    int64_t head_dim;        /* D */
    int64_t vocab_size;      /* V */
    int64_t context_len;     /* trained context (informational) */
    double rope_theta;
    double norm_eps;         /* RMSNorm epsilon */
    rope_style rope;
    /* what RoPE frequency scaling ran ("" none; "llama3 factor=8 ..." or
     * "rope_freqs.weight"): the divisors are kv_model.rope_div */
    char rope_scaling[160];
    /* sliding-window attention of the checkpoint (0: none). The walk is full
     * causal, so capture refuses sequences longer than the window. */
    int64_t sliding_window;
    /* the architecture's features (model/arch.c's row): which tensors a layer has */
    bool qkv_bias;           /* bq, bk, bv */
    bool qk_norm;            /* q_norm, k_norm */
} model_config;

/* The type of the weight matrices in memory: the codes of --weights and
 * backend_request.weights; MODEL_W_KEEP asks a loader for the file's own.
 * MODEL_W_GGML (a GGUF file's quantised matrices, kept): every matrix is a
 * weights_ggml (weights.h), its blocks of the file's ggml type. */
typedef enum { MODEL_W_KEEP = -1, MODEL_W_F32 = 0, MODEL_W_F16 = 1, MODEL_W_BF16 = 2, MODEL_W_GGML = 3 } model_wtype;

/* A matrix of the model's wtype: float32, 16-bit words, or a weights_ggml (kv_model.wtype). */
typedef void model_mat;

typedef struct {
    float *attn_norm;  /* [dim] */
    model_mat *wq;     /* [H*D][dim] */
    model_mat *wk;     /* [K*D][dim] */
    model_mat *wv;     /* [K*D][dim] */
    float *bq;         /* [H*D] Q bias (qwen2), or NULL */
    float *bk;         /* [K*D] K bias, or NULL */
    float *bv;         /* [K*D] V bias, or NULL */
    float *q_norm;     /* [D] per-head RMSNorm of q before RoPE (qwen3), or NULL */
    float *k_norm;     /* [D] per-head RMSNorm of k before RoPE, or NULL */
    float *wo;         /* [dim][H*D] float32 always (policies and /wo read it) */
    model_mat *wo_blocks; /* W_o as its GGUF file's quantised blocks (a weights_ggml, MODEL_W_GGML models), else
                           * NULL: what --compute int8 multiplies where their type has int8 products */
    float *ffn_norm;   /* [dim] */
    model_mat *w_gate; /* [ffn_dim][dim]  (w1) */
    model_mat *w_up;   /* [ffn_dim][dim]  (w3) */
    model_mat *w_down; /* [dim][ffn_dim]  (w2) */
} model_layer;

typedef struct {
    model_config cfg;
    model_mat *tok_embd;   /* [V][dim] */
    float *output_norm;    /* [dim] */
    model_mat *output;     /* [V][dim] (may equal tok_embd: tied) */
    model_wtype wtype;     /* type of the model_mat matrices (model_init: float32) */
    model_wtype wtype_want; /* what the caller asked the loader for (model_load_as) */
    model_layer *layers;   /* [L] */
    double *rope_div;      /* [D/2] RoPE frequency divisors (cfg.rope_scaling), or NULL */
    bool has_vocab;
    kv_vocab vocab;
    /* ownership: every weight lives in allocations listed here */
    void **owned;
    int n_owned, cap_owned;
    /* files whose mapping the weights point into (16-bit tensors used in
     * place): closed by model_free */
    struct model_keep *kept;
    int n_kept, cap_kept;
    /* the tensors the loader read, by the file's own name pointers (valid
     * while its file is open): model_tensors_exact compares them with the
     * file's, then empties the list */
    const char **read_names;
    int64_t n_read, cap_read;
} kv_model;

/* Loads `spec` by the table of formats (model/load.c): a GGUF file (by its
 * magic), a Hugging Face checkpoint directory, "random:NAME[:SEED]", or a
 * llama2.c checkpoint (then `tokenizer` names its tokenizer.bin; NULL: no
 * vocabulary, --tokens only). Errors: KV_EINPUT for a bad file (one line
 * naming file and problem), KV_EUSAGE for a bad spec, KV_EFAIL otherwise. */
int model_load(const char *spec, const char *tokenizer, kv_model *m, kv_err *err);

/* The same with the weight matrices as `want`: MODEL_W_KEEP keeps the
 * file's type (16-bit matrices stay 16-bit, mapped where the layout allows;
 * any other file is float32), a 16-bit type rounds float32 tensors to it
 * (to nearest even), MODEL_W_F32 widens (model_load's choice). */
int model_load_as(const char *spec, const char *tokenizer, model_wtype want, kv_model *m, kv_err *err);

/* An empty model: no weights, no vocabulary (special ids -1). */
void model_init(kv_model *m);

void model_free(kv_model *m);

/* Checks cfg's ranges and consistency (H % K, D even, dims > 0, ...). */
int model_config_check(const model_config *c, const char *where, kv_err *err);

/* A tensor dimension named by what it measures, for the loaders' tables:
 * MODEL_DIM_NONE (a vector's missing second dimension) is 0. */
enum { MODEL_DIM_NONE, MODEL_DIM_HIDDEN, MODEL_DIM_Q, MODEL_DIM_KV, MODEL_DIM_FFN, MODEL_DIM_HEAD };
int64_t model_dim_size(const model_config *c, int dim);

/* Which models have a tensor, for the same tables: every model
 * (MODEL_NEED_ALL), or those with a feature of model_config. */
enum { MODEL_NEED_ALL, MODEL_NEED_QKV_BIAS, MODEL_NEED_QK_NORM };
bool model_has(const model_config *c, int need);

/* Allocates `n` floats owned by m (freed by model_free); NULL + err on failure. */
float *model_alloc(kv_model *m, size_t n, const char *what, kv_err *err);

/* The same for n zeroed elements of `size` bytes. */
void *model_alloc_raw(kv_model *m, size_t n, size_t size, const char *what, kv_err *err);

/* Frees p, an allocation owned by m (a tensor replaced by its conversion). */
void model_release(kv_model *m, void *p);

/* Hands obj to m: close(obj) runs in model_free (a file whose mapping
 * tensors point into). On failure close(obj) runs at once. */
int model_keep_file(kv_model *m, void (*close)(void *), void *obj, kv_err *err);

/* m->rope_div from Llama 3.x "llama3" scaling (core/rope.h), cfg.rope_scaling
 * naming it. KV_EINPUT naming `where` for parameters out of range. */
int model_set_llama3_scaling(kv_model *m, double factor, double low, double high,
                             double orig_ctx, const char *where, kv_err *err);

/* One metadata, one model
 * (docs/reliability.md#model-metadata-that-disagrees-with-the-tensors): every
 * loader notes each tensor it reads (model_tensor_read, with the name pointer
 * its file owns, so two tensors never compare equal by accident), and once it
 * has read every tensor its metadata implies (a missing one is already its
 * error), checks that the file holds no other: each of the file's n tensors
 * (name_at(file, i)) must have been read. KV_EINPUT naming `where`, the first
 * extra tensor and `implies` (what the metadata says, e.g. "block_count = 4").
 * Tensors a format's files carry without meaning weights are noted as read by
 * their loader (e.g. transformers' rotary_emb.inv_freq buffers). */
int model_tensor_read(kv_model *m, const char *file_name, kv_err *err);
int model_tensors_exact(kv_model *m, const char *where, const char *implies, int64_t n,
                        const char *(*name_at)(const void *file, int64_t i), const void *file, kv_err *err);

/* m->layers, zeroed, for m->cfg.n_layers layers (freed by model_free). */
int model_alloc_layers(kv_model *m, kv_err *err);

#endif
