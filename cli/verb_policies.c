/* `kvtrace policies [NAME...]`: every registered policy (or the named ones),
 * its summary, and each parameter with kind, default, choices or range, and
 * what it does. Printed from the registry, so a new policy shows up here
 * without touching this file. */
#include <stdio.h>
#include <string.h>

#include "allocators/alloc.h"
#include "cli/verbs.h"
#include "core/cli_args.h"
#include "expr/expr.h"
#include "policies/policy.h"

static const char USAGE[] =
    "usage: kvtrace policies [NAME...]\n"
    "\n"
    "Lists every eviction policy (or only the named ones) with its parameters, their\n"
    "defaults, and their allowed values. A policy is given to sim as\n"
    "name:key=value:key=value (e.g. keydiff:window=0.2:anchor=raw); results name every\n"
    "parameter, defaults filled in, as key=value:key=value sorted by key. Then the budget\n"
    "allocators (sim --allocators, same syntax): how many candidates each (layer, kv head)\n"
    "keeps (docs/allocators.md). NAME may name a policy or an allocator.\n"
    "\n"
    "  --features   the features, functions and protect items of score expressions\n"
    "               (sim/capture/fidelity --define 'NAME = EXPR [; protect = ...]', docs/expressions.md)\n";

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

static void print_param(const policy_param *p)
{
    char allowed[160];
    if (p->kind == PARAM_CHOICE)
        snprintf(allowed, sizeof allowed, "one of %s", p->choices);
    else if (p->max >= 9007199254740992.0)   /* 2^53: no practical upper bound */
        snprintf(allowed, sizeof allowed, "%s >= %.16g", p->integer ? "integer" : "number", p->min);
    else
        snprintf(allowed, sizeof allowed, "%s in [%.16g, %.16g]", p->integer ? "integer" : "number", p->min,
                 p->max);
    printf("    %-8s default %-7s %s\n", p->key, p->def, allowed);
    printf("             %s\n", p->doc);
}

static void print_params(const policy_param *params)
{
    const int n = policy_params_count(params);
    if (n == 0) printf("    (no parameters)\n");
    for (int i = 0; i < n; i++) print_param(&params[i]);
}

static void print_policy(const policy_iface *pi)
{
    printf("%-10s %s\n", pi->name, pi->summary);
    if (!pi->never_evicts)   /* what adakv does with its scores (docs/allocators.md) */
        printf("    scores comparable across kv heads and layers: %s\n", pi->scores_comparable ? "yes (adakv and "
               "global rank them directly)" : "no (adakv ranks each head's by its z-score in the head; global "
               "refuses it)");
    print_params(pi->params);
    for (int i = 0; i < POLICY_MAX_PRESETS && pi->presets[i].name; i++)   /* name:preset=NAME */
        printf("    preset=%s = %s\n             %s\n", pi->presets[i].name, pi->presets[i].params, pi->presets[i].doc);
}

static void print_alloc(const alloc_iface *ai)
{
    static const char *const KIND[] = {
        "static: a fixed capacity per (layer, kv head), summing to L*K*N",
        "dynamic: the kv heads of a layer share K*N, recomputed at every step from the scores",
        "dynamic: every (layer, kv head) of the model shares L*K*N, recomputed at every step; sim replays all "
        "layers in lock step (about L x one layer's memory, refused above --max-memory); in the model every "
        "layer evicts together at each chunk's end",
    };
    printf("%-10s %s\n    %s\n", ai->name, ai->summary, KIND[ai->kind]);
    if (ai->scores_from == ALLOC_SCORES_FILE)
        printf("    head importance: --head-scores FILE (CSV layer,kv_head,score; kvtrace analyze writes one)\n");
    if (ai->scores_from == ALLOC_SCORES_FILE_OR_TRACE)
        printf("    head ranking: --head-scores FILE, or else the trace's full-cache column sums "
               "(/attention/colsum; sim only): offline knowledge of the whole run, as DuoAttention calibrates "
               "offline\n");
    if (ai->streaming)
        printf("    streaming heads keep their sinks and most recent rows whatever the policy scores\n");
    if (ai->needs_comparable) printf("    only with policies whose scores compare across layers and heads\n");
    if (ai->needs_queries)
        printf("    reads the attention of the last `window` queries (the trace's, cached or not) over the candidates\n");
    if (ai->per_head)
        printf("    a layer-scope policy (tova:scope=layer, one set per layer) gets the mean of its heads' "
               "capacities\n");
    print_params(ai->params);
}

static const alloc_iface *alloc_named(const char *name)
{
    for (const alloc_iface *const *a = alloc_all(); *a; a++)
        if (strcmp((*a)->name, name) == 0) return *a;
    return NULL;
}

/* Whether argv[1..argc) selects `name` (no names: everything). */
static bool shown(int argc, char **argv, const char *name)
{
    bool yes = argc == 1;
    for (int a = 1; a < argc; a++) yes |= strcmp(argv[a], name) == 0;
    return yes;
}

int policies_main(int argc, char **argv)
{
    kv_err err = {0};
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (strcmp(argv[a], "--features") == 0 && argc == 2) return print_features();
        if (argv[a][0] == '-') {
            cli_usage(&err, "policies", "unknown option '%s'", argv[a]);
            return cli_report(&err);
        }
        if (!policy_find(argv[a]) && !alloc_named(argv[a])) {
            policy_config cfg;
            kv_err why = {0};   /* policy_parse's message lists the known names */
            if (policy_parse(argv[a], &cfg, &why) == KV_OK)
                cli_usage(&err, "policies", "'%s' is not a policy name (give names only)", argv[a]);
            else
                cli_usage(&err, "policies", "%s", why.msg);
            return cli_report(&err);
        }
    }
    int first = 1;
    for (const policy_iface *const *p = policy_all(); *p; p++) {
        if (!shown(argc, argv, (*p)->name)) continue;
        if (!first) putchar('\n');
        first = 0;
        print_policy(*p);
    }
    bool heading = false;
    for (const alloc_iface *const *a = alloc_all(); *a; a++) {
        if (!shown(argc, argv, (*a)->name)) continue;
        if (!heading) printf("%sAllocators (sim --allocators LIST, default uniform; N is the average per (layer, kv "
                             "head)):\n\n", first ? "" : "\n");
        else putchar('\n');
        heading = true, first = 0;
        print_alloc(*a);
    }
    return 0;
}
