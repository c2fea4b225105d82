/* model_fetch: where the default model (stories260K.gguf, SPEC §10) lives,
 * and getting it when it is nowhere yet.
 *
 * Lookup order: $KVTRACE_MODEL_DIR, then the user cache
 * ${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace. When neither holds it and
 * downloading is allowed, it is fetched with curl from its public origin into
 * the user cache, under a temporary name, and kept only if its size and
 * sha256 match the published ones (shared/models/README.md). */
#ifndef KV_MODEL_FETCH_H
#define KV_MODEL_FETCH_H

#include <stdbool.h>
#include <stddef.h>

#include "core/kv_error.h"

#define MODEL_DEFAULT_NAME "stories260K.gguf"
#define MODEL_DEFAULT_SHA256 "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"
#define MODEL_DEFAULT_BYTES 1185376L

/* Fills buf with the default model's path; downloads it when absent and
 * `download` (a KV_EFAIL error saying where to put the file when that fails). */
int model_default_path(char *buf, size_t cap, bool download, kv_err *err);

/* The sha256 of a file as 64 lowercase hex digits (hex: 65 bytes). */
int model_file_sha256(const char *path, char *hex, kv_err *err);

#endif
