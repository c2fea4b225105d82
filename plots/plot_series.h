/* plot_series: every (policy, params, allocator) the inputs mention, numbered once so
 * that each figure draws a configuration in the same colour, dash and point
 * type, with the same legend text. */
#ifndef KV_PLOT_SERIES_H
#define KV_PLOT_SERIES_H

#include "core/kv_error.h"

typedef struct {
    char policy[64];
    char params[512];
    char config[600]; /* the config column: policy, or policy:params */
    char alloc[300];  /* the allocator's label ("uniform" for files without the column) */
    int variant;      /* 0, 1, ... among the series of the same policy, in order of first appearance */
    char label[600];  /* legend text: the policy, plus the params that tell its variants apart, plus
                         the allocator when the inputs hold more than one */
} plot_series;

typedef struct {
    plot_series *s;
    int n, cap;
} plot_series_set;

/* The id of (policy, params, alloc), added if new. Names too long for the
 * fields are KV_EINPUT naming `where` (a "FILE:LINE" prefix). */
int plot_series_id(plot_series_set *set, const char *policy, const char *params, const char *alloc, const char *where,
                   int *id, kv_err *err);

/* Fills every label once all series are known. */
void plot_series_label(plot_series_set *set);

void plot_series_free(plot_series_set *set);

#endif
