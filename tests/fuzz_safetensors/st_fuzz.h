/* st_fuzz: what the files of the fuzz_safetensors harness share (names
 * prefixed stz_): the format's dtypes as the harness knows them (its own
 * table, not the reader's), the oracle and the structure-aware mutator.
 *
 * | file | owns |
 * | fuzz_safetensors.c | the libFuzzer entry point and the checks of a parse |
 * | st_oracle.c | the independent oracle: is a file valid by the format (safetensors.h) |
 * | st_mutate.c | LLVMFuzzerCustomMutator: header JSON and data edited as a model |
 */
#ifndef KV_ST_FUZZ_H
#define KV_ST_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    uint32_t size;
} stz_dtype;

extern const stz_dtype STZ_DTYPES[];
extern const int STZ_N_DTYPES;

/* The size of a dtype's element, 0 for a name the format does not have. */
uint32_t stz_dtype_size(const char *name);

/* True when data[size] is a safetensors file the reader must accept. */
bool stz_valid(const uint8_t *data, size_t size);

#endif
