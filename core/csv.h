/* csv: the one CSV reader (`kvtrace plot` reads the analysis directory,
 * analysis_dir.md, with it) and the small writing helpers every CSV writer
 * shares (sim's results directory, analyze's, fidelity's).
 *
 * Reading: a file is read whole and must end with a newline (a file cut
 * short is refused); every line after the header must have exactly the
 * header's number of fields (comma separated; a field in double quotes may
 * hold commas, "" inside it being one quote, as RFC 4180 and pandas write). Errors name the
 * file as the user would find it ("DIR/FILE:LINE: what is wrong") and are
 * KV_EINPUT. Cells are NUL-terminated in place in the file's buffer. */
#ifndef KV_CSV_H
#define KV_CSV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/kv_error.h"

typedef struct {
    char path[4200];  /* "DIR/FILE" as shown in messages */
    char *buf;        /* the file's bytes, fields split in place */
    char **header;    /* [n_cols] */
    int n_cols;
    size_t n_rows;    /* data rows, header excluded */
    char **cells;     /* [n_rows][n_cols] */
    long *lines;      /* [n_rows] 1-based line numbers of the rows */
} csv_table;

/* Largest CSV file plot reads (a sanity bound, not a format limit). */
#define CSV_MAX_BYTES ((size_t)1 << 31)

/* Reads DIR/NAME. A missing file (ENOENT) is not an error: *present = false
 * and the table is empty. Anything unreadable or malformed is KV_EINPUT. */
int csv_read(csv_table *c, const char *dir, const char *name, bool *present, kv_err *err);

/* The index of the first column named `name`, -1 when the header has none. */
int csv_column(const csv_table *c, const char *name);

/* Checks the header names exactly: the first n columns equal `names`, and
 * exactly n columns unless `open_ended` (more columns allowed after them). */
int csv_expect(const csv_table *c, const char *const *names, int n, bool open_ended, kv_err *err);

void csv_free(csv_table *c);

static inline const char *csv_cell(const csv_table *c, size_t row, int col)
{
    return c->cells[row * (size_t)c->n_cols + (size_t)col];
}

/* A finite number in decimal (no leading space or '+', no hex; NaN accepted,
 * as "nan"/"-nan", only when allow_nan). */
int csv_double(const csv_table *c, size_t row, int col, bool allow_nan, double *out, kv_err *err);

/* An integer in [lo, hi]: an optional '-' and digits, nothing else. */
int csv_int(const csv_table *c, size_t row, int col, int64_t lo, int64_t hi, int64_t *out, kv_err *err);

/* A message about one row: "PATH:LINE: MESSAGE", KV_EINPUT. */
int csv_fail(const csv_table *c, size_t row, kv_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- writing ---------------------------------------------------------------- */

/* Creates DIR/NAME for writing and writes `header` and a newline when it is
 * not NULL; NULL with KV_EFAIL "DIR/NAME: cannot create". */
FILE *csv_create(const char *dir, const char *name, const char *header, kv_err *err);

/* Closes f; a write error on it (or on closing) is KV_EFAIL "WHAT: write failed". */
int csv_close(FILE *f, const char *what, kv_err *err);

/* Writes `s` as one field: in double quotes, with "" for a quote, when it
 * holds a comma, a quote or (unless `flatten`) a newline (RFC 4180). With
 * `flatten`, carriage returns and newlines are written as spaces. */
void csv_field(FILE *f, const char *s, bool flatten);

#endif
