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

typedef struct {
    policy_iface iface;   /* first: a configuration's iface is the entry's address */
    int (*score)(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err);
    char file[256];       /* the shared object, for messages */
    const policy_iface *orig;   /* the plug-in's own iface (its tables, loaded as long as the entry): a Python
                                   policy (pyplugin.h) finds its functions from it */
} policy_plugin_entry;

typedef struct {
    int n_files, n;
    void *handle[POLICY_MAX_PLUGINS];
    bool py[POLICY_MAX_PLUGINS];   /* handle i is a Python file's (pyplugin.h), not dlopen's */
    policy_plugin_entry entry[POLICY_MAX_PLUGIN_POLICIES];
    const policy_iface *list[POLICY_MAX_PLUGIN_POLICIES + 1];   /* NULL-terminated */
} policy_plugins;

/* Loads FILE's policies into t (dlopen; a FILE.py through the embedded interpreter, pyplugin.h) and makes the parser see them beside the registry
 * (aliases->user = t->list; aliases may be NULL). KV_EUSAGE with one line naming the file: it cannot be
 * opened, a symbol is missing, its ABI or struct sizes do not match this kvtrace, a policy has no
 * name or score, its parameters' defaults do not parse, or its name is a built-in's, an alias's
 * or another plug-in's. */
int policy_plugin_load(policy_plugins *t, policy_aliases *aliases, const char *path, kv_err *err);

/* dlclose every plug-in: after the last use of a configuration parsed from them. */
void policy_plugins_close(policy_plugins *t);

#endif
