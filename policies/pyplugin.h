/* pyplugin: policies written in Python (`--plugin FILE.py`, docs/python-policies.md).
 *
 * The file runs in one embedded CPython (Debian's libpython3 with numpy, pinned at build time:
 * KV_PYTHON_EXE) and declares its policies in KVTRACE_POLICIES; each becomes a policy_iface
 * whose hooks call the file's score/create/observe with zero-copy read-only numpy views of the
 * step (policy_view). plugin.c loads the tables as it loads a shared object's, with the same
 * checks (names, parameters) and the same NaN check; the hooks find their Python functions
 * through policy_plugin_entry.orig. Every call holds the GIL: the engine's threads queue for
 * the interpreter, the rest of the replay stays parallel. Built without Python (no
 * KV_HAVE_PYTHON), policy_py_open refuses every file with one line. */
#ifndef KV_POLICY_PYPLUGIN_H
#define KV_POLICY_PYPLUGIN_H

#include <stdbool.h>

#include "policies/policy.h"

/* path names a Python file (ends in .py) */
bool policy_py_file(const char *path);

/* Runs FILE (starting the interpreter on first use) and gives its policies, NULL-terminated, in
 * *policies (living until policy_py_close(*handle)). KV_EUSAGE with one line naming the file: the
 * file raises (a syntax error, an import that fails: the exception's last line), declares no
 * KVTRACE_POLICIES, or a policy without a name or a score function, a bad parameter, an unknown
 * key; or this kvtrace was built without Python. */
int policy_py_open(const char *path, void **handle, const policy_iface *const **policies, kv_err *err);

/* Drops what the file's policies hold (the interpreter stays: numpy cannot start twice). */
void policy_py_close(void *handle);

#endif
