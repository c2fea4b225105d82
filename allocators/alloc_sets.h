/* alloc_sets: named lists of allocators, registry data the verbs take their defaults from
 * (policies/sets.h has the policies'). */
#ifndef KV_ALLOC_SETS_H
#define KV_ALLOC_SETS_H

/* the demo's allocator study: every built-in allocator that runs with any policy (global needs
 * scores that compare across heads, headkv a --head-scores file) */
#define ALLOC_SET_DEMO "uniform,pyramid,adakv,duo,cake"

#endif
