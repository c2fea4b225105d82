/* report: the fidelity figure (offline out_rel_err vs online KL, one point
 * per configuration, one colour per policy from plots' colour table, run by
 * plots' gnuplot runner) and report.html (plots' HTML escaping). */
#ifndef KV_FIDELITY_REPORT_H
#define KV_FIDELITY_REPORT_H

#include "fidelity/fidelity.h"

int fid_write_figure(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err);
int fid_write_report(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err);

#endif
