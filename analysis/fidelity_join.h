/* fidelity_join: a study's offline measures (sim's summary_by_trace.csv, phase all) beside the
 * in-model ones of `fidelity --prompts` on the same prompts (its fidelity.csv and answer.csv), one
 * row per (trace, run, budget) that both hold, into the analysis directory's fidelity_join.csv
 * (docs/analyze.md#in-model-measures-beside-the-replay---fidelity). */
#ifndef KV_ANALYSIS_FIDELITY_JOIN_H
#define KV_ANALYSIS_FIDELITY_JOIN_H

#include <stdbool.h>

#include "core/kv_error.h"

/* Writes OUTDIR/fidelity_join.csv. The fidelity directory is checked against its tables
 * (results/fidelity_schema.h); one that is not a `fidelity --prompts` output, or that shares no
 * (trace, config, allocator, budget, chunk) with the results, is KV_EINPUT naming the file. Rows of
 * it with no run in the results are left out, with a note on stderr unless quiet. */
int analyze_fidelity_join(const char *results_dir, const char *fidelity_dir, const char *outdir, bool quiet,
                          kv_err *err);

#endif
