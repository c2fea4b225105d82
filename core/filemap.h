/* filemap: a whole file mapped read-only, for readers that check every
 * offset against the size before they touch a byte (GGUF, safetensors). */
#ifndef KV_FILEMAP_H
#define KV_FILEMAP_H

#include <stddef.h>
#include <stdint.h>

#include "kv_error.h"

typedef struct {
    const uint8_t *data;  /* [size]; NULL for an empty file */
    size_t size;
} kv_filemap;

/* Maps `path` (a regular file). KV_EFAIL when it cannot be opened or mapped,
 * KV_EINPUT when it is not a regular file; messages start with the path. */
int kv_filemap_open(const char *path, kv_filemap *fm, kv_err *err);

/* Unmaps; a zeroed kv_filemap is a no-op. */
void kv_filemap_close(kv_filemap *fm);

/* Drops the whole pages of [p, p + n), a part of a read-only file mapping, from this process's memory:
 * touched again, they are read from the file (a private mapping nobody wrote). Only for such mappings:
 * allocated memory would lose its contents. */
void kv_filemap_drop(const void *p, size_t n);

/* Tells the kernel the whole file will be read, in order. */
void kv_filemap_will_read(const kv_filemap *fm);

#endif
