/* results_row: rows written column by column against their schema (results_row.h). */
#include "results/results_row.h"

#include <inttypes.h>
#include <math.h>

#include "core/csv.h"
#include "core/kv_error.h"

typedef enum { AS_TEXT, AS_INT, AS_REAL, AS_FRACTION } row_value;

/* The setter a column kind takes. */
static row_value value_of(results_col_kind k)
{
    switch (k) {
    case SC_TEXT:
    case SC_CONFIG:
    case SC_POLICY:
    case SC_PARAMS:
    case SC_ALLOC:
    case SC_PHASE: return AS_TEXT;
    case SC_BUDGET:
    case SC_COUNT:
    case SC_LAYER:
    case SC_QHEAD:
    case SC_KVHEAD:
    case SC_POS:
    case SC_DETAIL: return AS_INT;
    case SC_FRACTION: return AS_FRACTION;
    case SC_REAL:
    case SC_NONNEG:
    case SC_UNIT:
    case SC_CORR: return AS_REAL;
    }
    KV_ASSERT(0);
    return AS_TEXT;
}

/* The separator before the next value, after checking that it is of the column's kind. */
static void next_cell(results_row *w, row_value v)
{
    KV_ASSERT(w->col < w->s->n_cols);
    KV_ASSERT(value_of(w->s->cols[w->col].kind) == v);
    if (w->col++) fputc(',', w->f);
}

results_row results_row_begin(FILE *f, const results_schema *s)
{
    return (results_row){.f = f, .s = s, .col = 0};
}

void results_row_text(results_row *w, const char *v)
{
    next_cell(w, AS_TEXT);
    fputs(v, w->f);
}

void results_row_quoted(results_row *w, const char *v)
{
    next_cell(w, AS_TEXT);
    csv_field(w->f, v, true);
}

void results_row_int(results_row *w, int64_t v)
{
    next_cell(w, AS_INT);
    fprintf(w->f, "%" PRId64, v);
}

static void real_text(FILE *f, double v)
{
    if (isnan(v)) fputs("nan", f);
    else fprintf(f, "%.9g", v);
}

void results_row_real(results_row *w, double v)
{
    next_cell(w, AS_REAL);
    real_text(w->f, v);
}

void results_row_fraction(results_row *w, double v)
{
    next_cell(w, AS_FRACTION);
    if (!isnan(v)) real_text(w->f, v);
}

void results_row_none(results_row *w)
{
    KV_ASSERT(w->col < w->s->n_cols && w->s->cols[w->col].nan_ok);
    if (w->col++) fputc(',', w->f);
}

void results_row_end(results_row *w)
{
    KV_ASSERT(w->col == w->s->n_cols);
    fputc('\n', w->f);
}
