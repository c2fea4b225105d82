/* fileopen: every input file of ours is opened here first, so an error of
 * the operating system reads the same for every file and option:
 *   "FILE: cannot open: <strerror>"  KV_EFAIL (exit 1): missing, permission
 *                                    denied, a path under a file, ...
 *   "FILE: is a directory"           KV_EUSAGE (exit 2): a file was expected
 * Readers that hand the path on (HDF5, jansson) call kv_input_check first;
 * HDF5 never gets to call a file it cannot open "not an HDF5 file". */
#ifndef KV_FILEOPEN_H
#define KV_FILEOPEN_H

#include <stdbool.h>
#include <stdio.h>

#include "kv_error.h"

/* Opens `path` read-only; *fd is the descriptor (close-on-exec). */
int kv_input_open(const char *path, int *fd, kv_err *err);

/* The same as a stdio stream ("rb"); NULL with err set. */
FILE *kv_input_fopen(const char *path, kv_err *err);

/* Opens and closes `path`: the errors above, or KV_OK. With missing_ok a
 * path that does not exist (ENOENT) is KV_OK too (the caller reports it). */
int kv_input_check(const char *path, bool missing_ok, kv_err *err);

/* An input that must be a directory (an analysis or results directory):
 * "DIR: cannot open: <strerror>" (exit 1) when it cannot be opened, "DIR: is
 * not a directory (WHAT)" (exit 2) when it is a file; `what` says which
 * directory was expected, e.g. "plot reads the directory kvtrace analyze wrote". */
int kv_input_dir_check(const char *dir, const char *what, kv_err *err);

#endif
