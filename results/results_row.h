/* results_row: the one way a row of a results or analysis CSV is written.
 * A row is the schema's columns in order (results_schema.h), each value given
 * with the setter of its column's kind: text for labels, phases and ids,
 * integers for budgets, counts, layers, heads and positions, reals for the
 * measures. A value of the wrong kind, a value past the last column or a row
 * ended short is a programming error (KV_ASSERT, it aborts in every build), so
 * a column added to a table without its writer, or the reverse, fails the
 * first test that writes the file, and the header and the rows cannot drift.
 *
 * Formats: integers in decimal, reals as %.9g (nine significant digits: a
 * float32 measure and a double mean read back to within 1 part in 1e8), a NaN
 * always as "nan" (never "-nan"); a budget fraction is empty when the budget
 * was given as N (results_row_fraction). Text is written as is: the labels
 * never hold a comma or a newline (docs/outputs.md#conventions-of-every-csv). */
#ifndef KV_RESULTS_ROW_H
#define KV_RESULTS_ROW_H

#include <stdint.h>
#include <stdio.h>

#include "results/results_schema.h"

typedef struct {
    FILE *f;
    const results_schema *s;
    int col;   /* the next column */
} results_row;

/* Starts a row of s's file f (created by results_schema_create). */
results_row results_row_begin(FILE *f, const results_schema *s);
void results_row_text(results_row *w, const char *v);
void results_row_int(results_row *w, int64_t v);
void results_row_real(results_row *w, double v);
/* A text column written as an RFC 4180 field (quoted when it holds a comma or a quote, line breaks as
 * spaces): meta.csv's values, which are the trace's own strings. */
void results_row_quoted(results_row *w, const char *v);
/* A budget_fraction column: the fraction, or empty for NaN (a budget given as N). */
void results_row_fraction(results_row *w, double v);
/* An empty cell (no value: fidelity's pooled row has no budget), only in a column whose table says nan_ok. */
void results_row_none(results_row *w);
/* Ends the row (every column written) with its newline. */
void results_row_end(results_row *w);

#endif
