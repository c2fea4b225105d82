/* plot_report: report.html, one self-contained offline page (inline CSS, no
 * scripts or remote resources) that shows every figure with its caption, the
 * trace's metadata, the commands that produced it and the summary table.
 * Every string from the inputs is HTML-escaped; only files that exist in the
 * figure directory are linked. */
#ifndef KV_PLOT_REPORT_H
#define KV_PLOT_REPORT_H

#include "plot_figures.h"
#include "provenance/provenance.h"

/* figs[PLOT_N_FIGURES]: what each figure wrote (or why it was skipped);
 * prov (may be NULL): the plot's record, whose steps (capture or synth, sim,
 * analyze) and own command are the commands shown. */
int plot_report_write(const plot_ctx *ctx, const plot_data *d, const plot_fig_out *figs, const prov_record *prov,
                      kv_err *err);

#endif
