/* kvtrace/rope.h: a trace's or model's RoPE as a value (public, installed:
 * policy_view.rope). Pair p turns at theta^(-2p/D) / div[p] radians per
 * position; div [D/2] or NULL: no scaling. theta 0: unknown.
 *   interleaved: pair p is dims (2p, 2p+1)   neox: dims (p, p + D/2) */
#ifndef KVTRACE_ROPE_H
#define KVTRACE_ROPE_H

typedef enum { ROPE_INTERLEAVED, ROPE_NEOX } rope_style;

typedef struct {
    double theta;
    rope_style style;
    const double *div;
} rope_spec;

#endif
