/* plot: `kvtrace plot DIR [-o FIGDIR] [--format png|svg|pdf]` (SPEC §9).
 * Reads an analysis directory (analysis_dir.md), writes seven gnuplot figures
 * (script + data + rendered image each) and report.html into FIGDIR, all at
 * once or not at all. */
#ifndef KV_PLOT_H
#define KV_PLOT_H

#include <stdbool.h>

#include "core/kv_error.h"
#include "plot_style.h"

typedef struct {
    const char *input;    /* the analysis directory */
    const char *output;   /* FIGDIR; NULL: INPUT/figures */
    plot_format format;
    bool force, quiet;
    const char *command;  /* the command line, for the report */
} plot_opts;

int plot_run(const plot_opts *o, kv_err *err);

/* The verb: parses the command line, runs, reports; returns the exit status. */
int plot_main(int argc, char **argv);

#endif
