/* alloc_plugin: allocators from plug-ins (`--plugin FILE.so`, docs/plugins.md),
 * read from the tables policies/plugin.c loaded and checked (ABI, sizes).
 *
 * The loaded allocators live in a table the caller (a verb) owns: no
 * process-wide state; the parser finds them through alloc_parse_in's `user`
 * (the table's list). Each keeps the host's copy of the plug-in's alloc_iface
 * (read up to the size it was built with, the rest zero), so a
 * configuration's iface points into the table; its capacities and shares go
 * through the host's checks (capacities each >= 1, equal within a layer
 * unless per_head, summing to exactly L·K·N; shares each in [1, n[x]],
 * summing to the scope's total): a violation stops the run with one line
 * naming the plug-in, KV_EINPUT (exit 3), as a NaN policy score does. */
#ifndef KV_ALLOC_PLUGIN_H
#define KV_ALLOC_PLUGIN_H

#include "allocators/alloc.h"
#include "policies/plugin.h"

enum { ALLOC_MAX_PLUGIN_ALLOCATORS = 32 };

typedef struct {
    alloc_iface iface;   /* first: a configuration's iface is the entry's address */
    int (*capacities)(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                      kv_err *err);
    int (*shares)(const alloc_config *ac, const alloc_scope *s, alloc_buf *b, int64_t *counts, kv_err *err);
    char file[POLICY_PLUGIN_PATH_MAX];   /* the shared object as given, for messages */
} alloc_plugin_entry;

typedef struct {
    int n, n_files;      /* n_files: the files of policy_plugins read so far */
    alloc_plugin_entry entry[ALLOC_MAX_PLUGIN_ALLOCATORS];
    const alloc_iface *list[ALLOC_MAX_PLUGIN_ALLOCATORS + 1];   /* NULL-terminated: alloc_parse_in's user */
} alloc_plugins;

/* Adds the allocators of the files p loaded since the last call. KV_EUSAGE with one line naming
 * the file: an allocator without a name, a kind it does not know, no capacities (static) or
 * shares (dynamic), parameter defaults that do not parse, or a name that is a built-in
 * allocator's or another plug-in's. */
int alloc_plugins_add(alloc_plugins *t, const policy_plugins *p, kv_err *err);

#endif
