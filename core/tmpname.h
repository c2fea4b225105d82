/* tmpname: the names of temporary outputs and the sweep of stale ones.
 *
 * A temporary output is named ".NAME.tmp.HOST.PID.START" beside NAME: the
 * host name, the writer's process id and that process's start time (clock
 * ticks after boot, /proc/PID/stat field 22), so a reused PID or another host
 * sharing the directory is never taken for the writer. (outdir_commit may add
 * ".old" while it replaces a directory.) A temporary is stale when its writer
 * is certainly gone: the same host, and no process PID or one that started at
 * another time. Nothing else is ever removed: not another host's temporaries,
 * not a live run's, not names of any other shape. */
#ifndef KV_TMPNAME_H
#define KV_TMPNAME_H

#include <stdbool.h>
#include <stddef.h>

/* Writes "DIR.BASE.tmp.HOST.PID.START" into buf, DIR being the first dir_len
 * characters of `dir` ("" or ending in '/'). False when it does not fit. */
bool tmpname_make(char *buf, size_t cap, const char *dir, size_t dir_len, const char *base);

/* Removes the stale temporaries of output BASE in DIR (dir_len as above) and
 * says so in one line on stderr (naming `final_path`). Never fails: what
 * cannot be removed stays. */
void tmpname_sweep(const char *dir, size_t dir_len, const char *base, const char *final_path);


/* Removes a file, or a directory and everything in it (symbolic links are
 * removed, never followed). Errors are ignored. */
void kv_remove_tree(const char *path);

#endif
