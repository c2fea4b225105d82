/* plot_html: HTML escaping for every string report.html takes from the input
 * files (& < > " ' become entities; control characters other than tab and
 * newline are dropped). */
#ifndef KV_PLOT_HTML_H
#define KV_PLOT_HTML_H

#include <stddef.h>
#include <stdio.h>

/* Writes `s` escaped to f. */
void plot_html_escape(FILE *f, const char *s);

/* The same into buf (always NUL-terminated; truncated at an entity boundary).
 * Returns the length the full escaped text needs, like snprintf. */
size_t plot_html_escape_buf(char *buf, size_t cap, const char *s);

#endif
