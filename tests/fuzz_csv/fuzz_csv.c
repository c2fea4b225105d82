/* fuzz_csv: libFuzzer harness for our own CSV reader and writer helpers
 * (core/csv.c: csv_read, csv_expect, csv_double, csv_int, csv_field).
 *
 * Byte 0 picks the target (mod 2); the rest is its input.
 *   0  the bytes are a CSV file, read with csv_read (through an in-memory
 *      file, tests/fuzz_file.h). An independent reference parser of the
 *      format core/csv.h documents (lines cut at \n, one trailing \r
 *      dropped, the header's field count on every row, no empty row, RFC
 *      4180 quoted fields with "" for a quote, no NUL byte) reads them too.
 *      The reader may refuse more than the reference (later checks, such as
 *      a required final newline, stay compatible), but what it accepts must
 *      be exactly what the reference reads: same header, rows, cells and
 *      line numbers. Then every cell goes through csv_double and csv_int and
 *      the header through csv_expect: success or a well-formed error.
 *   1  writer and reader agree: byte 1 gives the column count (1-4, bit 7:
 *      csv_field's `flatten`), the rest is cells separated by NUL bytes.
 *      They are written as a CSV with csv_field, read back with csv_read and
 *      must come back unchanged (flattened: \r and \n as spaces). Cells the
 *      reader cannot hold by design are left out: unflattened \r or \n (the
 *      reader has no multi-line fields), and an empty cell alone on its row.
 * Every error is one line naming the file; ASan and UBSan report the rest. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"

#define FUZZ_NAME "fuzz_csv"
#define WHERE fuzz_path
#include "tests/fuzz_file.h"
#include "tests/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the reference reader ------------------------------------------------ */

typedef struct {
    char **cells; /* all fields, header first, each malloc'd */
    size_t n, cap;
    int n_cols;
    size_t n_rows;
} ref_table;

static void ref_push(ref_table *t, const char *s, size_t len)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->cells = realloc(t->cells, t->cap * sizeof *t->cells);
        CHECK(t->cells, "out of memory");
    }
    char *c = malloc(len + 1);
    CHECK(c, "out of memory");
    memcpy(c, s, len);
    c[len] = '\0';
    t->cells[t->n++] = c;
}

static void ref_free(ref_table *t)
{
    for (size_t i = 0; i < t->n; i++) free(t->cells[i]);
    free(t->cells);
}

/* The fields of line [s, e); their count, or -1 when a quoted field is bad. */
static int ref_line(ref_table *t, const char *s, const char *e)
{
    char *tmp = malloc((size_t)(e - s) + 1);
    CHECK(tmp, "out of memory");
    int n = 0;
    for (const char *p = s;;) {
        size_t w = 0;
        if (p < e && *p == '"') {
            for (p++;; p++) {
                if (p == e) return free(tmp), -1;
                if (*p == '"') {
                    if (p + 1 < e && p[1] == '"') p++;
                    else break;
                }
                tmp[w++] = *p;
            }
            p++; /* past the closing quote */
            if (p < e && *p != ',') return free(tmp), -1;
        } else {
            while (p < e && *p != ',') tmp[w++] = *p++;
        }
        ref_push(t, tmp, w);
        n++;
        if (p == e) break;
        p++; /* the comma */
    }
    free(tmp);
    return n;
}

/* Reads buf[len] as the format says; false when it is not a valid CSV. */
static bool ref_read(const char *buf, size_t len, ref_table *t)
{
    if (len == 0 || memchr(buf, '\0', len)) return false;
    const char *p = buf, *end = buf + len;
    for (size_t line = 0; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
        const char *stop = e > p && e[-1] == '\r' ? e - 1 : e;
        if (line > 0 && stop == p) return false; /* an empty row */
        int n = ref_line(t, p, stop);
        if (n < 0) return false;
        if (line == 0) t->n_cols = n;
        else if (n != t->n_cols) return false;
        else t->n_rows++;
        p = e + 1;
    }
    return true;
}

/* ---- target 0: read a file ----------------------------------------------- */

static void drive_cells(const csv_table *c)
{
    kv_err err = {0};
    int rc;
    for (size_t r = 0; r < c->n_rows && r < 64; r++)
        for (int k = 0; k < c->n_cols; k++) {
            double d;
            int64_t i;
            if ((rc = csv_double(c, r, k, r & 1, &d, &err))) check_err(rc, &err, "csv_double");
            else CHECK(d == d ? d - d == 0 : (r & 1), "csv_double gave %g", d);
            if ((rc = csv_int(c, r, k, -1000, 1000, &i, &err))) check_err(rc, &err, "csv_int");
            else CHECK(i >= -1000 && i <= 1000, "csv_int gave %lld", (long long)i);
        }
    static const char *const names[] = {"policy", "budget", "value"};
    for (int n = 0; n <= 3; n++)
        if ((rc = csv_expect(c, names, n, n & 1, &err))) check_err(rc, &err, "csv_expect");
}

static void read_file(const uint8_t *data, size_t size)
{
    fuzz_file_set(data, size);
    csv_table c;
    bool present = false;
    kv_err err = {0};
    int rc = csv_read(&c, fuzz_dir, fuzz_name, &present, &err);
    ref_table t = {0};
    bool ok = ref_read((const char *)data, size, &t);
    if (rc) {
        check_err(rc, &err, "csv_read");
    } else {
        CHECK(present, "the file is there");
        CHECK(ok, "csv_read accepted a file the format refuses");
        CHECK(c.n_cols == t.n_cols && c.n_rows == t.n_rows, "%d x %zu, the reference %d x %zu",
              c.n_cols, c.n_rows, t.n_cols, t.n_rows);
        for (int k = 0; k < c.n_cols; k++)
            CHECK(strcmp(c.header[k], t.cells[k]) == 0, "header %d: '%s', the reference '%s'", k,
                  c.header[k], t.cells[k]);
        for (size_t r = 0; r < c.n_rows; r++) {
            CHECK(c.lines[r] == (long)r + 2, "row %zu on line %ld", r, c.lines[r]);
            for (int k = 0; k < c.n_cols; k++) {
                const char *ref = t.cells[(r + 1) * (size_t)c.n_cols + (size_t)k];
                CHECK(strcmp(csv_cell(&c, r, k), ref) == 0, "row %zu col %d: '%s', the reference "
                      "'%s'", r, k, csv_cell(&c, r, k), ref);
            }
        }
        drive_cells(&c);
    }
    ref_free(&t);
    csv_free(&c);
}

/* ---- target 1: write, then read back ---------------------------------------- */

/* The cell as csv_read must give it back. */
static void expected(const char *s, bool flatten, char *out)
{
    for (; *s; s++) *out++ = flatten && (*s == '\n' || *s == '\r') ? ' ' : *s;
    *out = '\0';
}

/* The NUL-separated cells of body[len] that the reader can hold, at most
 * `cap`: pointers into a copy, NUL-terminated. */
static size_t cells_of(char *copy, size_t len, bool flatten, int n_cols, char **out, size_t cap)
{
    size_t n = 0;
    for (char *p = copy; p <= copy + len && n < cap; p += strlen(p) + 1) {
        if (!flatten && strpbrk(p, "\r\n")) continue;
        if (n_cols == 1 && !*p) continue;
        out[n++] = p;
    }
    return n;
}

static void round_trip(const uint8_t *data, size_t size)
{
    if (size < 1) return;
    const int n_cols = data[0] % 4 + 1;
    const bool flatten = data[0] & 0x80;
    char *copy = malloc(size), *buf = NULL, *want = malloc(size);
    char *cells[512];
    CHECK(copy && want, "out of memory");
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    size_t n = cells_of(copy, size - 1, flatten, n_cols, cells, sizeof cells / sizeof *cells);
    n -= n % (size_t)n_cols; /* whole rows */
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    CHECK(f, "open_memstream");
    fputs(n_cols == 1 ? "a\n" : n_cols == 2 ? "a,b\n" : n_cols == 3 ? "a,b,c\n" : "a,b,c,d\n", f);
    for (size_t i = 0; i < n; i++) {
        csv_field(f, cells[i], flatten);
        fputc((i + 1) % (size_t)n_cols ? ',' : '\n', f);
    }
    CHECK(fclose(f) == 0, "memstream");
    fuzz_file_set((const uint8_t *)buf, blen);
    csv_table c;
    bool present;
    kv_err err = {0};
    int rc = csv_read(&c, fuzz_dir, fuzz_name, &present, &err);
    CHECK(rc == KV_OK, "csv_read refused what csv_field wrote: %s", err.msg);
    CHECK(c.n_cols == n_cols && c.n_rows == n / (size_t)n_cols, "%d x %zu read back", c.n_cols,
          c.n_rows);
    for (size_t i = 0; i < n; i++) {
        expected(cells[i], flatten, want);
        const char *got = csv_cell(&c, i / (size_t)n_cols, (int)(i % (size_t)n_cols));
        CHECK(strcmp(got, want) == 0, "cell %zu written as '%s' read back as '%s'", i, want, got);
    }
    csv_free(&c);
    free(buf);
    free(copy);
    free(want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] % 2 == 0) read_file(data + 1, size - 1);
    else round_trip(data + 1, size - 1);
    return 0;
}
