/* alloc_describe: an allocator's declarations as `kvtrace policies` shows them (alloc.h). */
#include <stdio.h>

#include "allocators/alloc.h"

void alloc_describe(FILE *f, const alloc_iface *ai)
{
    static const char *const KIND[] = {
        "static: a fixed capacity per (layer, kv head), summing to L*K*N",
        "dynamic: the kv heads of a layer share K*N, recomputed at every step from the scores",
        "dynamic: every (layer, kv head) of the model shares L*K*N, recomputed at every step; sim replays all "
        "layers in lock step (about L x one layer's memory, refused above --max-memory); in the model every "
        "layer evicts together at each chunk's end",
    };
    fprintf(f, "%-10s %s\n    %s\n", ai->name, ai->summary, KIND[ai->kind]);
    if (ai->scores_from == ALLOC_SCORES_FILE)
        fprintf(f, "    head importance: --head-scores FILE (CSV layer,kv_head,score; kvtrace analyze writes one)\n");
    if (ai->scores_from == ALLOC_SCORES_FILE_OR_TRACE)
        fprintf(f, "    head ranking: --head-scores FILE, or else the trace's full-cache column sums "
               "(/attention/colsum; sim only): offline knowledge of the whole run, as DuoAttention calibrates "
               "offline\n");
    if (ai->streaming)
        fprintf(f, "    streaming heads keep their sinks and most recent rows whatever the policy scores\n");
    if (ai->needs_comparable) fprintf(f, "    only with policies whose scores compare across layers and heads\n");
    if (ai->needs_queries)
        fprintf(f, "    reads the attention of the last `window` queries (the trace's, cached or not) over the candidates\n");
    if (ai->per_head)
        fprintf(f, "    a layer-scope policy (tova:scope=layer, one set per layer) gets the mean of its heads' "
               "capacities\n");
    policy_params_describe(f, ai->params);
}
