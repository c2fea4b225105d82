/* `kvtrace policies [--plugin FILE.so]... [NAME...]`: every registered policy
 * (or the named ones), its summary, and each parameter with kind, default,
 * choices or range, and what it does; then the allocators; a plug-in's after
 * the built-ins, each marked with its file. Printed from the registries, so a
 * new policy shows up here without touching this file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/alloc.h"
#include "allocators/alloc_plugin.h"
#include "cli/verbs.h"
#include "core/cli_args.h"
#include "expr/expr.h"
#include "policies/policy.h"
#include "policies/sets.h"
#include "python/pyplug.h"

static const char USAGE[] =
    "usage: kvtrace policies [--plugin FILE.so]... [NAME...]\n"
    "\n"
    "Lists every eviction policy (or only the named ones) with its parameters, their\n"
    "defaults, and their allowed values. A policy is given to sim as\n"
    "name:key=value:key=value (e.g. keydiff:window=0.2:anchor=raw); results name every\n"
    "parameter, defaults filled in, as key=value:key=value sorted by key. Then the budget\n"
    "allocators (sim --allocators, same syntax): how many candidates each (layer, kv head)\n"
    "keeps (docs/allocators.md). NAME may name a policy or an allocator.\n"
    "\n"
    "  --plugin FILE.so  also list the policies and allocators of a plug-in (docs/plugins.md),\n"
    "               each marked with its file; repeat for more\n"
    "  --sets       the named sets of policies the verbs take their defaults from\n"
    "  --features   the features, functions and protect items of score expressions\n"
    "               (sim/capture/fidelity --define 'NAME = EXPR [; protect = ...]', docs/expressions.md)\n";

/* `--sets`: the named lists the verbs take their defaults from (policies/sets.h). */
static void print_sets(void)
{
    printf("Named sets of policies (the verbs' defaults):\n\n");
    for (const policy_set *s = policy_sets(); s->name; s++) printf("  %-14s %s\n  %-14s %s\n", s->name, s->doc, "", s->list);
}

/* `--features`: what a score expression may read and do. */
static int print_features(void)
{
    printf("Features of score expressions (per candidate j of a step; now = the chunk's last position):\n\n");
    for (int i = 0; i < EF_COUNT; i++) {
        const expr_feature *f = &EXPR_FEATURES[i];
        char name[40];
        snprintf(name, sizeof name, "%s%s", f->name, f->args);
        printf("  %-20s %s%s\n", name, f->formula, f->offline ? " [sim only]" : "");
    }
    printf("\nOperators: + - * / ^ (power), < <= > >= == != (1 or 0), c ? a : b, unary -, ( ), inf\n"
           "Functions: log exp sqrt abs, min(a, b, ...) max(a, b, ...), clamp(x, lo, hi)\n"
           "Per-step normalisers over the candidates: z(x) (population sd; 0 where it is 0), rank(x) (in [0, 1],\n"
           "  ties averaged), minmax(x) (0 where max = min), softmax(x)\n"
           "Protect (after ';'): protect = sinks(k), recent(fraction of N), recent_n(k)\n"
           "Higher keeps; a NaN score counts as -inf.\n");
    return 0;
}

/* What the command line gives: the names to show and the plug-ins loaded (--plugin FILE.so). */
typedef struct {
    int n_names;
    const char *name[64];
    policy_plugins plugins;
    alloc_plugins allocs;
} policies_args;

static const alloc_iface *alloc_named(const policies_args *pa, const char *name)
{
    for (int pass = 0; pass < 2; pass++)
        for (const alloc_iface *const *a = pass ? pa->allocs.list : alloc_all(); *a; a++)
            if (strcmp((*a)->name, name) == 0) return *a;
    return NULL;
}

static bool policy_named(const policies_args *pa, const char *name)
{
    for (const policy_iface *const *p = pa->plugins.list; *p; p++)
        if (strcmp((*p)->name, name) == 0) return true;
    return policy_find(name) != NULL;
}

/* Whether the names given select `name` (no names: everything). */
static bool shown(const policies_args *pa, const char *name)
{
    bool yes = pa->n_names == 0;
    for (int i = 0; i < pa->n_names; i++) yes |= strcmp(pa->name[i], name) == 0;
    return yes;
}

/* A name given that is neither a policy nor an allocator: one usage line. */
static int unknown_name(const policies_args *pa, const char *name, kv_err *err)
{
    policy_config cfg;
    kv_err why = {0};   /* the parser's message lists the known names */
    const policy_aliases user = {.user = pa->plugins.list};
    if (policy_parse_in(&user, name, &cfg, &why) == KV_OK)
        return cli_usage(err, "policies", "'%s' is not a policy name (give names only)", name);
    return cli_usage(err, "policies", "%s", why.msg);
}

/* argv into pa: names, --plugin FILE (or --plugin=FILE); 1 after --help, -1 after --features. */
static int parse_args(int argc, char **argv, policies_args *pa, kv_err *err)
{
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return 1;
        if (strcmp(arg, "--features") == 0 && argc == 2) return -1;
        if (strcmp(arg, "--sets") == 0 && argc == 2) return -2;
        const char *file = strncmp(arg, "--plugin=", 9) == 0 ? arg + 9 : NULL;
        if (strcmp(arg, "--plugin") == 0) {
            if (a + 1 >= argc) return cli_usage(err, "policies", "--plugin needs a FILE.so or FILE.py");
            file = argv[++a];
        }
        int rc = file ? pyplug_load(&pa->plugins, NULL, file, err) : KV_OK;   /* FILE.so or FILE.py */
        rc = rc ? rc
                : file ? alloc_plugins_add(&pa->allocs, &pa->plugins, err)
                 : arg[0] == '-' ? cli_usage(err, "policies", "unknown option '%s'", arg)
                 : pa->n_names >= 64 ? cli_usage(err, "policies", "more than 64 names") : KV_OK;
        if (rc) return rc;
        if (!file) pa->name[pa->n_names++] = arg;
    }
    for (int i = 0; i < pa->n_names; i++)
        if (!policy_named(pa, pa->name[i]) && !alloc_named(pa, pa->name[i])) return unknown_name(pa, pa->name[i], err);
    return KV_OK;
}

static void print_all(const policies_args *pa)
{
    int first = 1;
    for (int pass = 0; pass < 2; pass++)
        for (const policy_iface *const *p = pass ? pa->plugins.list : policy_all(); *p; p++) {
            if (!shown(pa, (*p)->name)) continue;
            if (!first) putchar('\n');
            first = 0;
            policy_describe(stdout, *p);
            if (pass) printf("    from the plug-in %s\n", ((const policy_plugin_entry *)*p)->file);
        }
    bool heading = false;
    for (int pass = 0; pass < 2; pass++)
        for (const alloc_iface *const *a = pass ? pa->allocs.list : alloc_all(); *a; a++) {
            if (!shown(pa, (*a)->name)) continue;
            if (!heading) printf("%sAllocators (sim --allocators LIST, default uniform; N is the average per (layer, "
                                 "kv head)):\n\n", first ? "" : "\n");
            else putchar('\n');
            heading = true, first = 0;
            alloc_describe(stdout, *a);
            if (pass) printf("    from the plug-in %s\n", ((const alloc_plugin_entry *)*a)->file);
        }
}

int policies_main(int argc, char **argv)
{
    kv_err err = {0};
    policies_args *pa = kv_calloc(1, sizeof *pa, "policies", &err);
    int rc = pa ? parse_args(argc, argv, pa, &err) : err.code;
    if (rc == 1) fputs(USAGE, stdout);
    else if (rc == -1) print_features();
    else if (rc == -2) print_sets();
    else if (rc == KV_OK) print_all(pa);
    if (pa) policy_plugins_close(&pa->plugins);
    free(pa);
    return rc == 1 || rc < 0 ? 0 : cli_exit(rc, &err);
}
