#include "model_shapes.h"

#include <string.h>

/* From each model's published config (HF config.json / GGUF metadata). */
static const model_shape SHAPES[] = {
    /* name           arch       rope          L   H   K   D    dim   ffn    vocab   theta
     *                                                                         llama3 factor  context */
    {"stories260k", "llama", "interleaved", 5, 8, 4, 8, 64, 172, 512, 10000.0, 0.0, 512},
    {"llama-3.2-1b", "llama", "neox", 16, 32, 8, 64, 2048, 8192, 128256, 500000.0, 32.0, 131072},
    {"llama-3.2-3b", "llama", "neox", 28, 24, 8, 128, 3072, 8192, 128256, 500000.0, 32.0, 131072},
    {"llama-3.1-8b", "llama", "neox", 32, 32, 8, 128, 4096, 14336, 128256, 500000.0, 8.0, 131072},
    {"qwen2.5-7b", "qwen2", "neox", 28, 28, 4, 128, 3584, 18944, 152064, 1000000.0, 0.0, 131072},
    {"qwen3-8b", "qwen3", "neox", 36, 32, 8, 128, 4096, 12288, 151936, 1000000.0, 0.0, 40960},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0},
};

const model_shape *model_shape_find(const char *name)
{
    for (const model_shape *s = SHAPES; s->name; s++)
        if (strcmp(s->name, name) == 0) return s;
    return NULL;
}

const model_shape *model_shape_all(void)
{
    return SHAPES;
}

const char *model_shape_names(void)
{
    return "stories260k, llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, qwen2.5-7b, qwen3-8b";
}
