#include "core/utf8.h"

int64_t kv_utf8_invalid(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        size_t n;
        unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
        if (c < 0x80) n = 1;
        else if (c >= 0xc2 && c <= 0xdf) n = 2;
        else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        else return (int64_t)i;
        if (n > len - i || (n > 1 && (s[i + 1] < lo || s[i + 1] > hi))) return (int64_t)i;
        for (size_t k = 2; k < n; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf) return (int64_t)i;
        i += n;
    }
    return -1;
}
