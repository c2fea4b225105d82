/* describe: a policy's declarations as `kvtrace policies` shows them (policy.h). */
#include <stdio.h>
#include <string.h>

#include "policies/policy.h"

static void describe_param(FILE *f, const policy_param *p)
{
    char allowed[160];
    if (p->kind == PARAM_CHOICE)
        snprintf(allowed, sizeof allowed, "one of %s", p->choices);
    else if (p->max >= 9007199254740992.0)   /* 2^53: no practical upper bound */
        snprintf(allowed, sizeof allowed, "%s >= %.16g", p->integer ? "integer" : "number", p->min);
    else
        snprintf(allowed, sizeof allowed, "%s in [%.16g, %.16g]", p->integer ? "integer" : "number", p->min,
                 p->max);
    fprintf(f, "    %-8s default %-7s %s\n", p->key, p->def, allowed);
    fprintf(f, "             %s\n", p->doc);
}

void policy_params_describe(FILE *f, const policy_param *params)
{
    const int n = policy_params_count(params);
    if (n == 0) fprintf(f, "    (no parameters)\n");
    for (int i = 0; i < n; i++) describe_param(f, &params[i]);
}

void policy_describe(FILE *f, const policy_iface *pi)
{
    fprintf(f, "%-10s %s\n", pi->name, pi->summary);
    if (!pi->never_evicts)   /* what adakv does with its scores (docs/allocators.md) */
        fprintf(f, "    scores comparable across kv heads and layers: %s\n", pi->scores_comparable ? "yes (adakv and "
               "global rank them directly)" : "no (adakv ranks each head's by its z-score in the head; global "
               "refuses it)");
    char reads[256] = "";
    if (pi->needs_attention) strcat(reads, ", the chunk's attention");
    if (pi->query_window) strcat(reads, ", the latest queries");
    if (pi->needs_kvzip) strcat(reads, ", the KVzip pass (capture --kvzip)");
    if (pi->needs_wo) strcat(reads, ", W_o (capture --record wo)");
    if (pi->offline_only) strcat(reads, ", the future (offline only: sim)");
    else if (pi->offline_for) strcat(reads, ", in some configurations the future (those are offline only)");
    if (reads[0]) fprintf(f, "    reads, besides keys and values: %s\n", reads + 2);
    policy_params_describe(f, pi->params);
    for (int i = 0; i < POLICY_MAX_PRESETS && pi->presets[i].name; i++)   /* name:preset=NAME */
        fprintf(f, "    preset=%s = %s\n             %s\n", pi->presets[i].name, pi->presets[i].params, pi->presets[i].doc);
}

