/* streaming: StreamingLLM's attention sinks + recent window (Xiao et al.,
 * "Efficient Streaming Language Models with Attention Sinks", ICLR 2024;
 * docs/policies.md#the-first-ten-policies). Candidates at absolute positions <
 * sinks are protected (+∞), the rest score their position, so the most recent
 * stay.
 * Parameters: sinks (integer >= 0, default 4). */
#include <math.h>

#include "policies/policy.h"

static int streaming_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                           kv_err *err)
{
    (void)state;
    (void)err;
    double sinks = policy_num(cfg, "sinks");
    for (int64_t j = 0; j < v->n; j++)
        scores[j] = (double)v->pos[j] < sinks ? INFINITY : (double)v->pos[j];
    return KV_OK;
}

const policy_iface policy_streaming = {
    .name = "streaming",
    .summary = "StreamingLLM: the first `sinks` positions plus the most recent",
    .params = {
        {.key = "sinks", .kind = PARAM_NUMBER, .def = "4", .min = 0, .max = 9007199254740992.0,
         .integer = true, .doc = "absolute positions below this are kept (attention sinks)"},
    },
    .score = streaming_score,
    .scores_comparable = true,
};
