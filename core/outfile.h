/* outfile: outputs appear whole or not at all.
 *
 * A file is written under a temporary name in the same directory
 * (".NAME.tmp.PID") and renamed over the final name only when complete. An
 * existing output is refused unless `force`. Temporary files still open when
 * SIGINT/SIGTERM/SIGHUP arrive are removed (outfile_install_signal_cleanup). */
#ifndef KV_OUTFILE_H
#define KV_OUTFILE_H

#include <stdbool.h>

#include "kv_error.h"

typedef struct {
    char final_path[4096];
    char tmp_path[4096];
    int slot;  /* index in the signal-cleanup table, -1 if none */
} kv_outfile;

/* Refuses an existing `path` (KV_EUSAGE: "use --force") unless force, and a
 * missing parent directory (KV_EFAIL); fills tmp_path. Creates nothing. */
int outfile_begin(kv_outfile *o, const char *path, bool force, kv_err *err);

/* Renames the temporary file over the final path. */
int outfile_commit(kv_outfile *o, kv_err *err);

/* Removes the temporary file if it exists. */
void outfile_abort(kv_outfile *o);

void outfile_install_signal_cleanup(void);

/* The same for an output directory: outdir_begin creates the temporary
 * directory ".NAME.tmp.PID" beside `path` (refusing an existing `path`
 * unless force); outdir_commit replaces `path` by it (an old directory
 * under --force is removed only after the new one is in place); outdir_abort
 * removes the temporary directory and everything in it. */
int outdir_begin(kv_outfile *o, const char *path, bool force, kv_err *err);
int outdir_commit(kv_outfile *o, kv_err *err);
void outdir_abort(kv_outfile *o);

#endif
