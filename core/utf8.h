/* utf8: where a byte string stops being valid UTF-8 (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF). Shared by the trace's text
 * (trace/), prompts (capture/) and the tokenizers (model/tokenizer/). */
#ifndef KV_UTF8_H
#define KV_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The byte offset of the first byte of s[0..len) that does not begin a
 * valid UTF-8 sequence (a truncated one included), or -1 when all is valid. */
int64_t kv_utf8_invalid(const char *s, size_t len);

#endif
