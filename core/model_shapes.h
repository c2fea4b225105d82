/* model_shapes: the named model shapes that `synth --like` and
 * `random:NAME` models use. Dimensions are those of the public checkpoints. */
#ifndef KV_MODEL_SHAPES_H
#define KV_MODEL_SHAPES_H

#include <stdint.h>

typedef struct {
    const char *name;          /* as typed on the command line */
    const char *architecture;  /* trace attribute */
    const char *rope_style;    /* as the usual checkpoint of it is run */
    int64_t n_layers, n_heads, n_kv_heads, head_dim;
    int64_t dim, ffn_dim, vocab_size;
    double rope_theta;
    /* architecture features a model of the shape computes */
    int qkv_bias;           /* Q/K/V projection biases (qwen2) */
    int qk_norm;            /* per-head q/k RMSNorm before RoPE (qwen3) */
    double llama3_factor;   /* llama3 RoPE scaling factor (low 1, high 4, original context
                               8192, as every Llama 3.x); 0: none */
} model_shape;

/* NULL if unknown. */
const model_shape *model_shape_find(const char *name);

/* The table, terminated by an entry with name == NULL. */
const model_shape *model_shape_all(void);

/* "stories260k, llama-3.2-1b, ..." for usage messages. */
const char *model_shape_names(void);

#endif
