#include "fileopen.h"
#include "core/csv.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The whole file in a NUL-terminated buffer; ENOENT sets *present = false. */
static int slurp(csv_table *c, const char *full, bool *present, size_t *len, kv_err *err)
{
    struct stat st;
    if (stat(full, &st) != 0 && errno == ENOENT) {
        *present = false;
        return KV_OK;
    }
    FILE *f = kv_input_fopen(full, err);
    if (!f) return err->code;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return kv_fail(err, KV_EINPUT, "%s: not a regular file", c->path);
    }
    if ((size_t)st.st_size > CSV_MAX_BYTES) {
        fclose(f);
        return kv_fail(err, KV_EINPUT, "%s: %lld bytes is larger than plot reads (%zu)", c->path,
                       (long long)st.st_size, CSV_MAX_BYTES);
    }
    *len = (size_t)st.st_size;
    c->buf = kv_calloc(*len + 1, 1, c->path, err);
    int rc = c->buf ? KV_OK : KV_EFAIL;
    if (!rc && fread(c->buf, 1, *len, f) != *len)
        rc = kv_fail(err, KV_EINPUT, "%s: read error", c->path);
    fclose(f);
    if (!rc && memchr(c->buf, '\0', *len)) rc = kv_fail(err, KV_EINPUT, "%s: contains a NUL byte (not text)", c->path);
    *present = true;
    return rc;
}

/* A quoted field starting at *pp (RFC 4180: commas inside, "" for a quote),
 * unescaped in place when `write`; leaves *pp after the closing quote.
 * Returns false when the quote is not closed or not followed by , or the end. */
static bool quoted(char **pp, bool write)
{
    char *p = *pp, *w = p;
    for (p++;; p++) {
        if (*p == '\0') return false;
        if (*p == '"' && p[1] != '"') break;
        if (*p == '"') p++; /* "" is one quote */
        if (write) *w = *p;
        w++;
    }
    p++;
    if (*p != ',' && *p != '\0') return false;
    if (write) *w = '\0';
    *pp = p;
    return true;
}

/* Splits one line (already NUL-terminated) at commas into out[0..cap);
 * returns the field count, or -1 for a malformed quoted field. With out ==
 * NULL it only counts and leaves the line as is. */
static int split(char *line, char **out, int cap)
{
    int n = 0;
    for (char *p = line;; p++) {
        if (out && n < cap) out[n] = p;
        n++;
        if (*p == '"') {
            if (!quoted(&p, out != NULL)) return -1;
        } else {
            p = strchr(p, ',');
            if (!p) break;
        }
        if (*p == '\0') break;
        if (out) *p = '\0';
    }
    return n;
}

/* Cuts the buffer into lines: returns their count and fills starts (if non-NULL). */
static size_t cut_lines(char *buf, size_t len, char **starts)
{
    size_t n = 0;
    char *p = buf, *end = buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        if (starts) {
            if (stop > p && stop[-1] == '\r') stop[-1] = '\0'; /* tolerate CRLF */
            *stop = '\0';
            starts[n] = p;
        }
        n++;
        p = stop + 1;
    }
    return n;
}

static int split_rows(csv_table *c, char **lines, size_t n_lines, kv_err *err)
{
    c->n_rows = n_lines - 1;
    c->cells = kv_calloc(c->n_rows ? c->n_rows * (size_t)c->n_cols : 1, sizeof *c->cells, c->path, err);
    c->lines = kv_calloc(c->n_rows, sizeof *c->lines, c->path, err);
    if (!c->cells || !c->lines) return KV_EFAIL;
    for (size_t r = 0; r < c->n_rows; r++) {
        c->lines[r] = (long)r + 2;
        if (lines[r + 1][0] == '\0') return csv_fail(c, r, err, "empty line");
        int n = split(lines[r + 1], c->cells + r * (size_t)c->n_cols, c->n_cols);
        if (n < 0) return csv_fail(c, r, err, "a quoted field is not closed by a quote and a comma");
        if (n != c->n_cols)
            return csv_fail(c, r, err, "%d fields, the header has %d", n, c->n_cols);
    }
    return KV_OK;
}

int csv_read(csv_table *c, const char *dir, const char *name, bool *present, kv_err *err)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s/%s", dir, name);
    size_t len = 0;
    int rc = slurp(c, c->path, present, &len, err);
    if (rc || !*present) return rc;
    size_t n_lines = cut_lines(c->buf, len, NULL);
    if (n_lines == 0) return kv_fail(err, KV_EINPUT, "%s:1: empty file (no header row)", c->path);
    if (c->buf[len - 1] != '\n')   /* every writer ends each line: a file without it was cut short */
        return kv_fail(err, KV_EINPUT, "%s:%zu: the last line has no final newline (the file was cut short)",
                       c->path, n_lines);
    char **lines = kv_calloc(n_lines, sizeof *lines, c->path, err);
    if (!lines) return KV_EFAIL;
    cut_lines(c->buf, len, lines);
    c->n_cols = split(lines[0], NULL, 0);
    if (c->n_cols < 0) {
        free(lines);
        return kv_fail(err, KV_EINPUT, "%s:1: a quoted header field is not closed by a quote and a comma", c->path);
    }
    c->header = kv_calloc((size_t)c->n_cols, sizeof *c->header, c->path, err);
    rc = c->header ? KV_OK : KV_EFAIL;
    if (!rc) {
        split(lines[0], c->header, c->n_cols);
        rc = split_rows(c, lines, n_lines, err);
    }
    free(lines);
    return rc;
}

int csv_column(const csv_table *c, const char *name)
{
    for (int j = 0; j < c->n_cols; j++)
        if (strcmp(c->header[j], name) == 0) return j;
    return -1;
}

int csv_expect(const csv_table *c, const char *const *names, int n, bool open_ended, kv_err *err)
{
    char want[1024] = "";
    for (int i = 0; i < n; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? "," : "", names[i]);
    bool ok = open_ended ? c->n_cols >= n : c->n_cols == n;
    for (int i = 0; ok && i < n; i++) ok = strcmp(c->header[i], names[i]) == 0;
    if (ok) return KV_OK;
    char got[256] = "";
    for (int i = 0; i < c->n_cols; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i ? "," : "", c->header[i]);
    return kv_fail(err, KV_EINPUT, "%s:1: header is '%.200s', expected '%s%s'", c->path, got, want,
                   open_ended ? ",..." : "");
}

void csv_free(csv_table *c)
{
    free(c->buf);
    free(c->header);
    free(c->cells);
    free(c->lines);
    memset(c, 0, sizeof *c);
}

int csv_fail(const csv_table *c, size_t row, kv_err *err, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kv_fail(err, KV_EINPUT, "%s:%ld: %s", c->path, c->lines[row], msg);
}

/* Whether s starts as a decimal number may: a sign '-', a digit, '.' or "nan"/"-nan" (no space, no '+'). */
static bool plain_start(const char *s)
{
    if (*s == '-') s++;
    return (*s >= '0' && *s <= '9') || *s == '.' || *s == 'n';
}

int csv_double(const csv_table *c, size_t row, int col, bool allow_nan, double *out, kv_err *err)
{
    const char *s = csv_cell(c, row, col);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    bool parsed = plain_start(s) && !strpbrk(s, "xX") && end != s && *end == '\0' && !(errno == ERANGE && isinf(v));
    if (parsed && isnan(v) && !allow_nan) return csv_fail(c, row, err, "%s is NaN", c->header[col]);
    if (!parsed || isinf(v))
        return csv_fail(c, row, err, "%s is not a finite number: '%.40s'", c->header[col], s);
    *out = v;
    return KV_OK;
}

int csv_int(const csv_table *c, size_t row, int col, int64_t lo, int64_t hi, int64_t *out, kv_err *err)
{
    const char *s = csv_cell(c, row, col);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    bool digits = *s != '\0' && strspn(s + (*s == '-'), "0123456789") == strlen(s + (*s == '-')) && s[*s == '-'];
    if (!digits || errno || end == s || *end != '\0')
        return csv_fail(c, row, err, "%s is not an integer: '%.40s'", c->header[col], s);
    if (v < lo || v > hi)
        return csv_fail(c, row, err, "%s = %lld is out of range [%lld, %lld]", c->header[col], v,
                        (long long)lo, (long long)hi);
    *out = v;
    return KV_OK;
}

/* ---- writing ---------------------------------------------------------------- */

FILE *csv_create(const char *dir, const char *name, const char *header, kv_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) kv_fail(err, KV_EFAIL, "%s: cannot create", path);
    else if (header) fprintf(f, "%s\n", header);
    return f;
}

int csv_close(FILE *f, const char *what, kv_err *err)
{
    if (ferror(f) | (fclose(f) != 0)) return kv_fail(err, KV_EFAIL, "%s: write failed", what);
    return KV_OK;
}

void csv_field(FILE *f, const char *s, bool flatten)
{
    const bool quote = strpbrk(s, flatten ? ",\"" : ",\"\n") != NULL;
    if (!quote && !flatten) {
        fputs(s, f);
        return;
    }
    if (quote) fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(flatten && (*s == '\n' || *s == '\r') ? ' ' : *s, f);
    }
    if (quote) fputc('"', f);
}
