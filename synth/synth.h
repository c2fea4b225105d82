/* synth: synthetic traces in the exact shapes of real models, with the key
 * geometry the KeyDiff paper describes (see docs/synth.md for the model). */
#ifndef KV_SYNTH_H
#define KV_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kv_error.h"
#include "core/rope.h"
#include "trace/trace.h"

/* Parameters of the generative model; defaults in synth_geometry_default. */
typedef struct {
    double key_spread;      /* angular noise of ordinary keys around the mean direction */
    double layer_spread;    /* extra spread at layer 0, fading to none at the last layer */
    double norm_spread;     /* relative standard deviation of key norms */
    int64_t sinks;          /* leading positions with sink keys */
    double sink_away;       /* sinks point this much against the mean direction */
    double outlier_rate;    /* fraction of later positions with distinctive keys */
    double outlier_spread;  /* their angular noise */
    double score_scale;     /* |q| |k| / sqrt(D): the logit scale */
    double query_anti;      /* queries lean this much against the mean key */
    double query_spread;    /* per-query noise */
    double head_offset;     /* fixed per-query-head direction offset */
    double key_local;       /* shared high-frequency component of keys ... */
    double query_local;     /* ... and of queries: together, recency attention */
    double freq_power;      /* energy profile over RoPE pairs (larger: more low-frequency) */
} synth_geometry;

void synth_geometry_default(synth_geometry *g);

typedef struct {
    trace_meta meta;        /* shapes, names, rope; n_tokens = T to generate */
    uint64_t seed;
    synth_geometry geo;
    int threads;            /* 0: one per CPU; values do not depend on it */
} synth_config;

/* One kv head of one layer: keys and values [T][D], the queries of its G =
 * H/K query heads [G][T][D]; `rope_tab` from rope_table_fill(T, D, theta). */
void synth_unit(const synth_config *cfg, const float *rope_tab, int64_t layer, int64_t kv_head,
                float *keys, float *values, float *queries);


/* Writes the whole trace: tokens, keys, values, queries and exact
 * /attention/colsum, one (layer, kv head) at a time. */
int synth_write(const synth_config *cfg, const char *path, const trace_create_opts *opts,
                bool quiet, kv_err *err);

/* `kvtrace synth` */
int synth_main(int argc, char **argv);

#endif
