/* plot_csv: the one CSV reader of `kvtrace plot` (analysis_dir.md).
 *
 * A file is read whole; every line after the header must have exactly the
 * header's number of fields (comma separated; a field in double quotes may
 * hold commas, "" inside it being one quote, as RFC 4180 and pandas write). Errors name the
 * file as the user would find it ("DIR/FILE:LINE: what is wrong") and are
 * KV_EINPUT. Cells are NUL-terminated in place in the file's buffer. */
#ifndef KV_PLOT_CSV_H
#define KV_PLOT_CSV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"

typedef struct {
    char path[4200];  /* "DIR/FILE" as shown in messages */
    char *buf;        /* the file's bytes, fields split in place */
    char **header;    /* [n_cols] */
    int n_cols;
    size_t n_rows;    /* data rows, header excluded */
    char **cells;     /* [n_rows][n_cols] */
    long *lines;      /* [n_rows] 1-based line numbers of the rows */
} plot_csv;

/* Largest CSV file plot reads (a sanity bound, not a format limit). */
#define PLOT_CSV_MAX_BYTES ((size_t)1 << 31)

/* Reads DIR/NAME. A missing file (ENOENT) is not an error: *present = false
 * and the table is empty. Anything unreadable or malformed is KV_EINPUT. */
int plot_csv_read(plot_csv *c, const char *dir, const char *name, bool *present, kv_err *err);

/* Checks the header names exactly: the first n columns equal `names`, and
 * exactly n columns unless `open_ended` (more columns allowed after them). */
int plot_csv_expect(const plot_csv *c, const char *const *names, int n, bool open_ended, kv_err *err);

void plot_csv_free(plot_csv *c);

static inline const char *plot_csv_cell(const plot_csv *c, size_t row, int col)
{
    return c->cells[row * (size_t)c->n_cols + (size_t)col];
}

/* A finite number (NaN accepted, as "nan"/"-nan", only when allow_nan). */
int plot_csv_double(const plot_csv *c, size_t row, int col, bool allow_nan, double *out, kv_err *err);

/* An integer in [lo, hi]. */
int plot_csv_int(const plot_csv *c, size_t row, int col, int64_t lo, int64_t hi, int64_t *out, kv_err *err);

/* A message about one row: "PATH:LINE: MESSAGE", KV_EINPUT. */
int plot_csv_fail(const plot_csv *c, size_t row, kv_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
