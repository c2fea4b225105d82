/* ggml_decode: ggml blocks to float32 with kvtrace's own converters
 * (model/formats/ggml_types.c), for tests/real/test_quants.py to compare with
 * the gguf package's gguf.quants.dequantize bit for bit.
 *   ggml_decode TYPE_ID N < blocks > floats   (N values: N / block size blocks)
 * Exit 2 on a bad call, 1 on a type kvtrace does not decode or a short input. */
#include <stdio.h>
#include <stdlib.h>

#include "model/formats/ggml_types.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ggml_decode TYPE_ID N < blocks > floats\n");
        return 2;
    }
    const ggml_type_info *t = ggml_type_get((uint32_t)strtoul(argv[1], NULL, 10));
    const long long n = atoll(argv[2]);
    if (!t || !t->to_f32 || n <= 0 || n % t->blck) {
        fprintf(stderr, "ggml_decode: type %s, %s values: not decodable here\n", argv[1], argv[2]);
        return 1;
    }
    const size_t bytes = (size_t)(n / t->blck) * t->size;
    unsigned char *src = malloc(bytes);
    float *dst = malloc(sizeof(float) * (size_t)n);
    if (!src || !dst || fread(src, 1, bytes, stdin) != bytes) {
        fprintf(stderr, "ggml_decode: %zu bytes of blocks expected on stdin\n", bytes);
        return 1;
    }
    t->to_f32(src, dst, (uint64_t)n);
    if (fwrite(dst, sizeof(float), (size_t)n, stdout) != (size_t)n) return 1;
    free(src), free(dst);
    return 0;
}
