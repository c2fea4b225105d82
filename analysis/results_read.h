/* results_read: reads and validates a `kvtrace sim` results directory for the
 * analysis (SPEC §8): DIR/results.h5 with one group per run under /runs/
 * (attributes policy, params, budget; datasets retained int32 [L, K, N'] and
 * final_logdet f64 [L, K]), plus the files analyze copies (summary.csv,
 * timing.csv, the first line of command.txt).
 *
 * Every check a file reader owes its caller: /runs exists; each member is a
 * group with string policy and params and an integer budget; retained is of
 * an integer type, rank 3, [L, K] as in the trace, N' in [1, T], each row's
 * positions strictly increasing within [0, T) and followed only by −1 padding
 * (sim pads a cache smaller than N'), at least one position per row;
 * final_logdet of a float type, [L, K]. The first violation is one KV_EINPUT
 * line "DIR/results.h5: /runs/NAME/retained: ...". Runs come in the file's
 * name order (what h5py and sim's own listing show).
 */
#ifndef KV_RESULTS_READ_H
#define KV_RESULTS_READ_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"

typedef struct {
    char name[512];          /* group name under /runs */
    char policy[128];
    char params[512];
    int64_t budget;
    int64_t width;           /* N' */
    int32_t *retained;       /* [L][K][N'], each row sorted, −1 padded at the end */
    int64_t *n_kept;         /* [L][K] positions before the padding */
    double *final_logdet;    /* [L][K] as sim wrote it */
} results_run;

typedef struct {
    char path[4200];         /* DIR/results.h5 */
    int n_runs;
    results_run *runs;       /* [n_runs] */
} results_set;

/* Reads DIR/results.h5 against a trace of L layers, K kv heads, T tokens.
 * On failure nothing is left allocated. */
int results_read(const char *dir, int64_t L, int64_t K, int64_t T, results_set *out, kv_err *err);

void results_free(results_set *rs);

/* Copies DIR/NAME byte for byte to OUTDIR/NAME when it exists (*copied says
 * whether it did); a read or write failure is KV_EFAIL. */
int results_copy_file(const char *dir, const char *name, const char *outdir, bool *copied, kv_err *err);

/* The first line of DIR/command.txt (without its newline) into buf; false when
 * the file does not exist or is empty. */
bool results_sim_command(const char *dir, char *buf, size_t cap);

#endif
