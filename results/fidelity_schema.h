/* fidelity_schema: the columns of every CSV `kvtrace fidelity` writes
 * (docs/outputs.md, its two sections), in the form of results_schema.h, so
 * that the writers (fidelity/output.c, fidelity/prompts.c) write each row
 * through results_row against them, `kvtrace info --columns` lists them and
 * `analyze --fidelity` checks the directory it joins against them. */
#ifndef KV_FIDELITY_SCHEMA_H
#define KV_FIDELITY_SCHEMA_H

#include "results/results_schema.h"

/* One run's directory (fidelity -o DIR, and each prompt's DIR/ID/). */
extern const results_schema FID_SCHEMA_CONFIGS, FID_SCHEMA_POSITIONS, FID_SCHEMA_SUMMARY, FID_SCHEMA_MISORDERED;
/* fidelity --prompts: the rows of every prompt, the answers, the means over prompts. */
extern const results_schema FID_SCHEMA_PROMPT_ROWS, FID_SCHEMA_ANSWERS, FID_SCHEMA_PROMPT_SUMMARY;

extern const results_schema *const FID_SCHEMAS[];
extern const int FID_N_SCHEMAS;

#endif
