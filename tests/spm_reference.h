/* The naive SentencePiece merge (llama2.c's loop: rescan every adjacent pair
 * after each merge, take the highest score, leftmost on ties), as an
 * independent reference for model/tokenizer/tokenizer.c's priority-queue encoder.
 * Shared by tests/unit/test_tokenizer.c and tests/fuzz_tokens (header-only). */
#ifndef KV_SPM_REFERENCE_H
#define KV_SPM_REFERENCE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/vocab.h"

#ifndef SP
#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */
#endif

/* Bytes of the UTF-8 character at s (1 for an invalid one). */
static inline size_t utf8_len_ref(const uint8_t *s, size_t left)
{
    uint8_t c = s[0];
    size_t n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
             : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n <= 1 || n > left) return 1;
    uint8_t lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    uint8_t hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (s[1] < lo || s[1] > hi) return 1;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 1;
    return n;
}

/* BOS, then the ids of text[0..len) with the dummy-prefix space; returns the count. */
static inline int64_t naive_encode(const kv_vocab *v, const uint8_t *text, size_t len, int32_t *out)
{
    size_t e = 0;
    char *esc = malloc(3 * len + 4);
    if (len) memcpy(esc, SP, 3), e = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') memcpy(esc + e, SP, 3), e += 3;
        else esc[e++] = (char)text[i];
    }
    size_t *st = malloc((e + 1) * sizeof *st), *ln = malloc((e + 1) * sizeof *ln), ns = 0;
    for (size_t i = 0; i < e; ns++) {
        st[ns] = i, ln[ns] = utf8_len_ref((const uint8_t *)esc + i, e - i);
        i += ln[ns];
    }
    for (;;) {
        size_t at = SIZE_MAX;
        float best = 0;
        for (size_t i = 0; i + 1 < ns; i++) {
            int32_t id = vocab_find(v, esc + st[i], ln[i] + ln[i + 1]);
            if (id >= 0 && (at == SIZE_MAX || v->scores[id] > best)) at = i, best = v->scores[id];
        }
        if (at == SIZE_MAX) break;
        ln[at] += ln[at + 1];
        memmove(st + at + 1, st + at + 2, (ns - at - 2) * sizeof *st);
        memmove(ln + at + 1, ln + at + 2, (ns - at - 2) * sizeof *ln);
        ns--;
    }
    int64_t n = 0;
    out[n++] = v->bos;
    for (size_t i = 0; i < ns; i++) {
        int32_t id = vocab_find(v, esc + st[i], ln[i]);
        if (id >= 0) out[n++] = id;
        else
            for (size_t k = 0; k < ln[i]; k++) out[n++] = v->byte_id[(uint8_t)esc[st[i] + k]];
    }
    free(esc), free(st), free(ln);
    return n;
}

/* ---- targets 1 and 2 ---- */

#endif
