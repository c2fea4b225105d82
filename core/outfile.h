/* outfile: outputs appear whole or not at all.
 *
 * A file is written under a temporary name in the same directory
 * (".NAME.tmp.HOST.PID.START", tmpname.h) and renamed over the final name
 * only when complete; stale temporaries of the same output (their writer was
 * killed) are removed when the next run begins. An existing output is refused
 * unless `force`, also one that another run put in place while this one
 * worked; two runs replacing the same output at once both succeed, the later
 * commit's output staying whole (an atomic exchange of directories). Temporary
 * files still open when SIGINT/SIGTERM/SIGHUP arrive are removed
 * (outfile_install_signal_cleanup). */
#ifndef KV_OUTFILE_H
#define KV_OUTFILE_H

#include <stdbool.h>

#include "kv_error.h"

typedef struct {
    char final_path[4096];
    char tmp_path[4096];
    int slot;  /* index in the signal-cleanup table, -1 if none */
    bool force; /* commit may replace an existing output */
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
 * directory beside `path` (refusing an existing `path` unless force);
 * outdir_commit puts it in place (under --force by one atomic exchange with
 * the old directory, which is then removed); outdir_abort removes the
 * temporary directory and everything in it. */
int outdir_begin(kv_outfile *o, const char *path, bool force, kv_err *err);
int outdir_commit(kv_outfile *o, kv_err *err);
void outdir_abort(kv_outfile *o);

/* Refuses (KV_EUSAGE) an output `path` that is one of the verb's `inputs`
 * (NULL entries skipped) or a directory holding one: the same device and
 * inode after symbolic links are resolved. A verb calls it before any work;
 * an output inside an input's directory is fine. */
int outfile_check_inputs(const char *path, const char *const *inputs, int n, kv_err *err);

#endif
