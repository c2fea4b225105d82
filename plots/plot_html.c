#include "plot_html.h"

#include <stdbool.h>
#include <string.h>

/* The replacement for one byte: an entity, "" to drop it, or NULL to keep it. */
static const char *entity(unsigned char c)
{
    switch (c) {
    case '&': return "&amp;";
    case '<': return "&lt;";
    case '>': return "&gt;";
    case '"': return "&quot;";
    case '\'': return "&#39;";
    case '\t':
    case '\n': return NULL;
    default: return c < 0x20 || c == 0x7f ? "" : NULL;
    }
}

size_t plot_html_escape_buf(char *buf, size_t cap, const char *s)
{
    size_t need = 0;
    bool full = cap == 0;
    for (; *s; s++) {
        const char *e = entity((unsigned char)*s);
        size_t n = e ? strlen(e) : 1;
        if (!full && need + n < cap) {
            if (e) memcpy(buf + need, e, n);
            else buf[need] = *s;
        } else if (!full) {
            buf[need] = '\0';
            full = true;
        }
        need += n;
    }
    if (!full) buf[need] = '\0';
    return need;
}

void plot_html_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        const char *e = entity((unsigned char)*s);
        if (e) fputs(e, f);
        else fputc(*s, f);
    }
}
