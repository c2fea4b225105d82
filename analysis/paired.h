/* paired: each configuration against a baseline the user names, paired by
 * (trace, budget, chunk), with the 95% bootstrap interval of the mean
 * difference over the traces (study/), into the analysis directory's
 * paired.csv (docs/analyze.md#paired-differences-against-a-baseline---baseline).
 *
 * The measures are per trace: sim's summary_by_trace.csv (phase all:
 * out_rel_err_mean, attn_recall_mean) and, when the traces have spans, each
 * span's retention_mean, retention_final and attn_recall from spans.csv
 * (means over layers and kv heads), named "SPAN:MEASURE". A difference is
 * configuration minus baseline, so a positive recall or retention difference
 * and a negative error difference favour the configuration. */
#ifndef KV_ANALYSIS_PAIRED_H
#define KV_ANALYSIS_PAIRED_H

#include "core/kv_error.h"

/* The baseline, "CONFIG[@ALLOCATOR]": CONFIG a config label of the results
 * or a policy with exactly one configuration there, ALLOCATOR an allocator
 * label (default uniform). Its runs at every chunk of the results are the
 * baselines of that chunk's runs. Unknown or ambiguous: KV_EUSAGE naming what
 * the results hold. Writes OUTDIR/paired.csv from the results directory's
 * CSVs (already checked by the caller). */
int analyze_paired(const char *results_dir, const char *baseline, const char *outdir, kv_err *err);

#endif
