/* pyplug: policies written in Python (`--plugin FILE.py`, docs/python-policies.md).
 *
 * The file runs in one embedded CPython (Debian's libpython3 with numpy, pinned at build time:
 * KV_PYTHON_EXE) and declares its policies in KVTRACE_POLICIES; each becomes a policy_iface
 * whose hooks call the file's score/create/observe with zero-copy read-only numpy views of the
 * step (policy_view). They join the verb's plug-in table (policies/plugin.h) through
 * policy_plugin_add, with the same checks (names, parameters) and the same NaN check as a
 * shared object's; the hooks find their Python functions through policy_plugin_entry.orig.
 * Every call holds the GIL: the engine's threads queue for the interpreter, the rest of the
 * replay stays parallel. Built without Python (no KV_HAVE_PYTHON), every FILE.py is refused
 * with one line. */
#ifndef KV_PYTHON_PYPLUG_H
#define KV_PYTHON_PYPLUG_H

#include <stdbool.h>

#include "policies/plugin.h"


/* `--plugin FILE`: a FILE.py through the interpreter (started on first use), anything else through
 * policy_plugin_load. For FILE.py, KV_EUSAGE with one line naming the file: it raises while it runs
 * (a syntax error, an import that fails: the exception's last line and where), declares no
 * KVTRACE_POLICIES, a policy has no name or no score function, a bad parameter or an unknown
 * field, a name policy_plugin_add refuses; or this kvtrace was built without Python. */
int pyplug_load(policy_plugins *t, policy_aliases *aliases, const char *path, kv_err *err);

#endif
