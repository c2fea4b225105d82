/* spans_summary.csv (sim's, copied by analyze; docs/outputs.md) read for
 * the span figure and the report's span table. plot_table_open has checked
 * it against its schema (header, kinds, ranges, unique keys, whole grid) and
 * its runs against summary.csv's; here its cells become plot_span rows. The
 * file has no policy and params columns: they are split from config. */
#include <stdio.h>
#include <string.h>

#include "plot_input.h"
#include "plot_table.h"

const char *const PLOT_SPAN_STAT_NAMES[PLOT_SPAN_STATS] = {"retention_mean", "retention_final", "attn_recall"};

/* spans_summary.csv's columns: span, config, budget, chunk, allocator, n_traces, then per statistic mean, lo, hi */
enum { C_SPAN, C_CONFIG, C_BUDGET, C_CHUNK, C_ALLOC, C_NTRACES, C_STATS };

/* The index of span name `name`, added if new. */
static int span_id(plot_data *d, const csv_table *c, size_t r, int *id, kv_err *err)
{
    const char *name = csv_cell(c, r, C_SPAN);
    for (int i = 0; i < d->n_span_names; i++)
        if (strcmp(d->span_names[i], name) == 0) return *id = i, KV_OK;
    if (d->n_span_names == PLOT_MAX_SPANS)
        return csv_fail(c, r, err, "more than %d span names", PLOT_MAX_SPANS);
    if (strlen(name) >= PLOT_SPAN_NAME) return csv_fail(c, r, err, "span name longer than %d bytes", PLOT_SPAN_NAME - 1);
    snprintf(d->span_names[d->n_span_names], PLOT_SPAN_NAME, "%s", name);
    *id = d->n_span_names++;
    return KV_OK;
}

/* The series of row r: policy and params split from config at its first ':'. */
static int series_of(plot_data *d, const csv_table *c, size_t r, int *id, kv_err *err)
{
    char policy[600];
    const char *config = csv_cell(c, r, C_CONFIG), *colon = strchr(config, ':');
    const size_t n = colon ? (size_t)(colon - config) : strlen(config);
    if (n >= sizeof policy) return csv_fail(c, r, err, "config '%.60s...' is too long", config);
    memcpy(policy, config, n);
    policy[n] = '\0';
    char where[4300];
    snprintf(where, sizeof where, "%s:%ld", c->path, c->lines[r]);
    return plot_series_id(&d->series, policy, colon ? colon + 1 : "", csv_cell(c, r, C_ALLOC), where, id, err);
}

int plot_input_spans(plot_data *d, kv_err *err)
{
    csv_table c;
    int rc = plot_table_open(d, PF_SPANS_SUMMARY, &c, err);
    if (!rc && c.n_rows) d->spans = kv_calloc(c.n_rows, sizeof *d->spans, c.path, err), rc = d->spans ? 0 : 1;
    for (size_t r = 0; !rc && r < c.n_rows; r++) {
        plot_span *s = &d->spans[r];
        if ((rc = span_id(d, &c, r, &s->span, err)) || (rc = series_of(d, &c, r, &s->series, err)) ||
            (rc = csv_int(&c, r, C_BUDGET, 1, INT64_MAX, &s->budget, err)) ||
            (rc = csv_int(&c, r, C_CHUNK, 1, INT64_MAX, &s->chunk, err)) ||
            (rc = csv_int(&c, r, C_NTRACES, 1, INT64_MAX, &s->n_traces, err)))
            break;
        for (int k = 0; !rc && k < PLOT_SPAN_STATS; k++)
            if ((rc = csv_double(&c, r, C_STATS + 3 * k, true, &s->mean[k], err)) ||
                (rc = csv_double(&c, r, C_STATS + 3 * k + 1, true, &s->lo[k], err)))
                break;
            else rc = csv_double(&c, r, C_STATS + 3 * k + 2, true, &s->hi[k], err);
        if (!rc) d->n_spans++;
    }
    csv_free(&c);
    return rc;
}
