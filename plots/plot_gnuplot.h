/* plot_gnuplot: runs `gnuplot SCRIPT` (found on PATH) in the figure
 * directory and checks that it produced a non-empty OUTPUT. gnuplot missing,
 * failing or producing nothing is one KV_EFAIL line with gnuplot's first
 * stderr line. */
#ifndef KV_PLOT_GNUPLOT_H
#define KV_PLOT_GNUPLOT_H

#include "core/kv_error.h"

int plot_gnuplot_run(const char *dir, const char *script, const char *output, kv_err *err);

#endif
