/* model_shapes: the named model shapes that `synth --like` and
 * `random:NAME` models use. Dimensions are those of the public checkpoints.
 * What an architecture computes (biases, q/k norms) is not a shape's: a
 * random:NAME model takes it from its architecture's row in model/arch.c. */
#ifndef KV_MODEL_SHAPES_H
#define KV_MODEL_SHAPES_H

#include <stdint.h>

typedef struct {
    const char *name;          /* as typed on the command line */
    const char *architecture;  /* trace attribute */
    const char *rope_style;    /* as the usual checkpoint of it is run */
    int64_t n_layers, n_heads, n_kv_heads, head_dim;
    int64_t dim, ffn_dim, vocab_size;
    /* RoPE frequencies of the checkpoint (the trace's rope_theta, rope_scaling) */
    double rope_theta;
    double llama3_factor;   /* llama3 RoPE scaling factor (low 1, high 4, original context
                               8192, as every Llama 3.x); 0: none */
    int64_t context_len;    /* the checkpoint's trained context (max_position_embeddings) */
} model_shape;

/* NULL if unknown. */
const model_shape *model_shape_find(const char *name);

/* The table, terminated by an entry with name == NULL. */
const model_shape *model_shape_all(void);

/* "stories260k, llama-3.2-1b, ..." for usage messages. */
const char *model_shape_names(void);

#endif
