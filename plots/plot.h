/* plot: `kvtrace plot DIR [-o FIGDIR] [--format png|svg|pdf]` (docs/plot.md).
 * Reads an analysis directory (analysis_dir.md), writes eight gnuplot figures
 * (script + data + rendered image each) and report.html into FIGDIR, all at
 * once or not at all. */
#ifndef KV_PLOT_H
#define KV_PLOT_H

#include <stdbool.h>

#include "core/kv_error.h"
#include "provenance/provenance.h"
#include "plot_style.h"

typedef struct {
    const char *input;    /* the analysis directory */
    const char *output;   /* FIGDIR; NULL: INPUT/figures */
    plot_format format;
    const char *pca_policies;  /* --pca-policies LIST (figure 3's panels), or NULL: streaming,tova,keydiff */
    bool force, quiet;
    const prov_record *prov; /* the commands for the report, FIGDIR/provenance.json (may be NULL) */
} plot_opts;

int plot_run(const plot_opts *o, kv_err *err);

/* The verb: parses the command line, runs, reports; returns the exit status. */
int plot_main(int argc, char **argv);

#endif
