/* token_file: the prompt as token ids (`capture --tokens FILE`).
 *
 * Two forms:
 *   - ids separated by whitespace and/or commas: "1 403 407", "1,403,407",
 *     "1, 403\n407". A comma must stand between two ids: an empty field
 *     (",,", a leading or a trailing comma) is an error.
 *   - one JSON array of integers: "[1, 403, 407]", newlines allowed; nothing
 *     after the closing ']' but whitespace; no nested arrays, no strings, no
 *     fractions or exponents, no trailing comma.
 * Whitespace is space, tab, CR, LF, VT, FF; a leading UTF-8 byte-order mark
 * is skipped. Every id must lie in [0, vocab_size). Errors are KV_EINPUT
 * (exit 3) and name the file and either the line and column of the bad
 * character or the id and its position (counted from 0, as trace
 * positions): "FILE: token id 600 at position 3 is outside the vocabulary
 * [0, 512)". A file without ids is an error.
 */
#ifndef KV_TOKEN_FILE_H
#define KV_TOKEN_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"

/* Reads `path` into a malloc'd *ids of *n ids (n >= 1); the caller frees.
 * On failure *ids = NULL and *n = 0. */
int token_file_read(const char *path, int64_t vocab_size, int32_t **ids, int64_t *n, kv_err *err);

/* The same from len bytes at buf (any bytes, NUL included); `where` names
 * the source in messages. */
int token_file_parse(const char *where, const char *buf, size_t len, int64_t vocab_size,
                     int32_t **ids, int64_t *n, kv_err *err);

#endif
