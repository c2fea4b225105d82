/* arch: the architectures kvtrace runs, one row each (arch.c): what each
 * is called in each source, how each source lays out its RoPE pairs, and
 * the features the walk computes for it. The loaders look an architecture
 * up here and ask its row (or the model_config the row filled), never
 * compare names. A llama-family architecture is one row (model/README.md). */
#ifndef KV_ARCH_H
#define KV_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "model/model.h"
#include "core/rope.h"

typedef struct {
    const char *name;      /* config.json model_type, GGUF general.architecture, the trace's
                              architecture attribute (trace/trace_schema.c accepts it) */
    const char *hf_class;  /* config.json "architectures"[0] (transformers' class) */
    bool gguf;             /* llama.cpp writes GGUFs under this name (mistral's: as llama) */
    rope_style gguf_rope;  /* the Q/K row layout of such a GGUF (llama.cpp's rope type) */
    rope_style hf_rope;    /* the Q/K row layout of a Hugging Face checkpoint */
    bool qkv_bias;         /* Q/K/V projection biases, always (config.json's attention_bias
                              then does not apply) */
    bool qk_norm;          /* per-head RMSNorm of q and k before RoPE */
    const char *hf_window;        /* config.json key of the sliding window (NULL: none read) */
    const char *hf_window_switch; /* a bool key that must be true for it (NULL: none) */
} model_arch;

/* The table, terminated by a row with name == NULL. */
const model_arch *arch_all(void);

/* The row named `name`; NULL if none. */
const model_arch *arch_find(const char *name);

/* The row whose name or Hugging Face class is `name`; NULL if none. */
const model_arch *arch_find_hf(const char *name);

/* The row named `name` among those llama.cpp writes GGUFs for; NULL if none. */
const model_arch *arch_find_gguf(const char *name);

/* The names of the rows ("llama, mistral, qwen2 and qwen3"), only those with
 * GGUFs when gguf_only, for messages; truncated to cap. */
const char *arch_names(char *buf, size_t cap, bool gguf_only);

/* c's architecture name and feature flags from a (its RoPE style is the
 * source's: the loader sets it). */
void arch_apply(const model_arch *a, model_config *c);

#endif
