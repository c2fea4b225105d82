/* plugin: policies loaded from shared objects (`--plugin FILE.so`) through
 * the public header include/kvtrace/policy.h (docs/plugins.md).
 *
 * The loaded policies live in a table the caller (a verb) owns: no
 * process-wide state. Each keeps the host's copy of the plug-in's
 * policy_iface (read up to the size the plug-in was built with, the rest
 * zero), so a configuration's iface points into the table; its score goes
 * through a check that stops the run on a NaN, naming the plug-in. The
 * parser finds them through policy_aliases.user. */
#ifndef KV_POLICY_PLUGIN_H
#define KV_POLICY_PLUGIN_H

#include "policies/policy.h"

enum { POLICY_MAX_PLUGINS = 16, POLICY_MAX_PLUGIN_POLICIES = 32 };
/* The longest --plugin path kvtrace takes, with its terminating byte: longer ones are refused, never cut. */
enum { POLICY_PLUGIN_PATH_MAX = 1024 };

typedef struct {
    policy_iface iface;   /* first: a configuration's iface is the entry's address */
    /* the plug-in's own hooks, called through the host's checked ones (plugin.c): a failure becomes
     * exit 1 with one line naming the file, the policy and the hook (kv_fail_hook) */
    int (*score)(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err);
    int (*create)(const policy_config *cfg, void **state, kv_err *err);
    int (*observe)(const policy_config *cfg, void *state, const policy_view *v, kv_err *err);
    int (*share_create)(const policy_config *cfg, void **share, kv_err *err);
    char who[POLICY_PLUGIN_PATH_MAX + 80];   /* "FILE: policy NAME", for messages */
    char file[POLICY_PLUGIN_PATH_MAX];       /* the plug-in's file as given, for messages */
    const policy_iface *orig;   /* the plug-in's own iface (in its tables, which outlive the entry): a Python
                                   policy (python/pyplug.h) finds its functions from it */
} policy_plugin_entry;

typedef struct {
    int n_files, n;
    void *handle[POLICY_MAX_PLUGINS];
    void (*close[POLICY_MAX_PLUGINS])(void *handle);   /* dlclose, or a Python file's (python/pyplug.h) */
    policy_plugin_entry entry[POLICY_MAX_PLUGIN_POLICIES];
    const policy_iface *list[POLICY_MAX_PLUGIN_POLICIES + 1];   /* NULL-terminated */
    /* per file: a shared object's tables (NULL for a Python file's; their sizes checked; the allocators are read by alloc_plugins_add,
     * allocators/alloc_plugin.h) and its path */
    const kvtrace_plugin *tables[POLICY_MAX_PLUGINS];
    char path[POLICY_MAX_PLUGINS][POLICY_PLUGIN_PATH_MAX];
} policy_plugins;

/* The one path rule for `--plugin FILE` (C and Python alike): FILE shorter than
 * POLICY_PLUGIN_PATH_MAX bytes, naming an existing regular file, which out[POLICY_PLUGIN_PATH_MAX]
 * gets as an absolute path (a bare name is a file in the working directory, as any other input is,
 * never a library search); KV_EUSAGE with one line otherwise. A shared object is also checked to be
 * whole (its ELF headers and loaded segments within the file) before dlopen, which would crash on a
 * truncated one. */
int policy_plugin_path(const char *given, char *out, kv_err *err);

/* Loads FILE's policies into t (dlopen) and makes the parser see them beside the registry
 * (aliases->user = t->list; aliases may be NULL). KV_EUSAGE with one line naming the file: it cannot be
 * opened, a symbol is missing, its ABI or struct sizes (the allocators' too) do not match this
 * kvtrace, it lists nothing, a policy has no name or score, its parameters' defaults do not parse,
 * or its name is a built-in's, an alias's or another plug-in's. */
int policy_plugin_load(policy_plugins *t, policy_aliases *aliases, const char *path, kv_err *err);

/* Whether the defaults of a plug-in's parameter list parse (a policy's or, `what` = "allocator",
 * an allocator's); KV_EUSAGE naming the file and the owner otherwise. */
int policy_plugin_defaults(const char *path, const char *what, const char *name, const policy_param *params,
                           kv_err *err);

/* Adds the policies of a file another loader opened (list NULL-terminated, each read up to size bytes; a
 * Python file's, python/pyplug.h) with the same checks as policy_plugin_load's; the table then owns handle
 * and calls close(handle) in policy_plugins_close. On an error none of the file's policies stay and
 * close(handle) has been called. */
int policy_plugin_add(policy_plugins *t, policy_aliases *aliases, const char *path, void *handle,
                      void (*close)(void *), const policy_iface *const *list, uint32_t size, kv_err *err);

/* dlclose every plug-in: after the last use of a configuration parsed from them. */
void policy_plugins_close(policy_plugins *t);

#endif
