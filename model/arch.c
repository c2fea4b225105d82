/* arch: the table of architectures (arch.h).
 *
 * RoPE: llama.cpp converts llama checkpoints for interleaved pairs
 * (LLAMA_ROPE_TYPE_NORM) and keeps qwen2/qwen3's rotate-half rows
 * (LLAMA_ROPE_TYPE_NEOX); transformers computes rotate-half for all of them.
 * mistral has no GGUF name of its own: llama.cpp writes it as llama.
 * Sliding windows (transformers' configs): MistralConfig's sliding_window
 * applies whenever it is set; Qwen2Config's and Qwen3Config's only with
 * use_sliding_window; LlamaConfig has none. */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

/* Features left out are false; gguf_rope matters only with gguf. */
static const model_arch ARCHS[] = {
    {.name = "llama", .hf_class = "LlamaForCausalLM", .gguf = true, .gguf_rope = ROPE_INTERLEAVED,
     .hf_rope = ROPE_NEOX},
    {.name = "mistral", .hf_class = "MistralForCausalLM", .hf_rope = ROPE_NEOX,
     .hf_window = "sliding_window"},
    {.name = "qwen2", .hf_class = "Qwen2ForCausalLM", .gguf = true, .gguf_rope = ROPE_NEOX,
     .hf_rope = ROPE_NEOX, .qkv_bias = true, .hf_window = "sliding_window",
     .hf_window_switch = "use_sliding_window"},
    {.name = "qwen3", .hf_class = "Qwen3ForCausalLM", .gguf = true, .gguf_rope = ROPE_NEOX,
     .hf_rope = ROPE_NEOX, .qk_norm = true, .hf_window = "sliding_window",
     .hf_window_switch = "use_sliding_window"},
    {.name = NULL},
};

const model_arch *arch_all(void)
{
    return ARCHS;
}

const model_arch *arch_find(const char *name)
{
    for (const model_arch *a = ARCHS; a->name; a++)
        if (strcmp(a->name, name) == 0) return a;
    return NULL;
}

const model_arch *arch_find_hf(const char *name)
{
    for (const model_arch *a = ARCHS; a->name; a++)
        if (strcmp(a->name, name) == 0 || strcmp(a->hf_class, name) == 0) return a;
    return NULL;
}

const model_arch *arch_find_gguf(const char *name)
{
    const model_arch *a = arch_find(name);
    return a && a->gguf ? a : NULL;
}

const char *arch_names(char *buf, size_t cap, bool gguf_only)
{
    size_t n_names = 0, k = 0, len = 0;
    for (const model_arch *a = ARCHS; a->name; a++) n_names += !gguf_only || a->gguf;
    buf[0] = '\0';
    for (const model_arch *a = ARCHS; a->name && len < cap; a++) {
        if (gguf_only && !a->gguf) continue;
        const char *sep = k == 0 ? "" : k + 1 == n_names ? " and " : ", ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, a->name);
        k++;
    }
    return buf;
}

void arch_apply(const model_arch *a, model_config *c)
{
    snprintf(c->architecture, sizeof c->architecture, "%s", a->name);
    c->qkv_bias = a->qkv_bias;
    c->qk_norm = a->qk_norm;
}
