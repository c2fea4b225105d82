/* features: `kvtrace features` (docs/features.md). Replays traces
 * like sim at one budget and chunk with the cache driven by one policy, and
 * writes, at every eviction step, each candidate's feature vector (the
 * expression language's features, computed by expr_feature_values) and its
 * targets (future attention mass, whether the oracle keeps it, its age) to
 * an HDF5 file (or a CSV), streaming.
 *
 * How: the driving policy is wrapped (features_tap.c) in a policy_iface of
 * the command's own whose scores are the inner policy's and which, over the
 * same policy_view, computes the features and targets and spools the rows of
 * its stream to a temporary file; sim_run replays each trace unchanged, and
 * the spools are then copied into the output in (layer, kv_head, step)
 * order (features_out.c), so the file does not depend on --threads. */
#ifndef KV_SEARCH_FEATURES_H
#define KV_SEARCH_FEATURES_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/kv_error.h"
#include "expr/expr.h"
#include "policies/policy.h"
#include "provenance/provenance.h"
#include "study/study.h"

#define FEAT_FORMAT "kvtrace-features"
#define FEAT_FORMAT_VERSION 1
enum { FEAT_MAX = EXPR_MAX_FEATS, FEAT_NAME_MAX = 80 };

/* The columns: each a feature of the expression language with its arguments, and its name as the
 * expression language accepts it ("knorm", "attn_window(32)", "attn_pooled(32,5)"). */
typedef struct {
    int n;
    expr_feat_use use[FEAT_MAX];
    char name[FEAT_MAX][FEAT_NAME_MAX];
} feat_cols;

/* Every feature but future_attn (a target), default arguments. */
void feat_cols_default(feat_cols *c);
/* A comma-separated list (commas inside parentheses belong to an item): each item one feature
 * with optional arguments, parsed by the expression language; future_attn, an expression that is
 * not one feature, or a column named twice is a usage error. */
int feat_cols_parse(const char *list, feat_cols *c, kv_err *err);

/* One spooled row (then cols.n float32 features). */
typedef struct {
    int32_t step, position, age;
    float future_attn;
    uint8_t oracle_keep, driver_keep, pad[2];
} feat_row;

/* A stream's spool: its rows in order, in a temporary file. */
typedef struct {
    int64_t layer, kv_head, rows;
    FILE *f;
} feat_spool;

/* What one trace's replay collects: the spools of its streams (registered from the worker
 * threads under the mutex) and the first write error. */
typedef struct {
    pthread_mutex_t mu;
    feat_spool *s;
    int n, cap;
    int rc;
    kv_err err;
} feat_sink;

/* The wrapped driving policy: iface first (the tap finds itself from cfg->iface). */
typedef struct {
    policy_iface iface;
    const policy_iface *inner;
    const policy_iface *future;     /* future_attn's policy (policies/sets.h's POLICY_SET_FUTURE) */
    const feat_cols *cols;
    feat_sink *sink;                /* the current trace's */
    uint64_t seed, trace_key;       /* trace_key: the trace id's hash (sampling) */
    double sample_steps, sample_candidates;
} feat_tap;

/* Makes t wrap the configuration `driver` (refused: one that never evicts); *out is the
 * configuration sim replays (driver's parameters, t's iface). */
int feat_tap_init(feat_tap *t, const policy_config *driver, const feat_cols *cols, policy_config *out, kv_err *err);
int feat_sink_init(feat_sink *s, kv_err *err);
void feat_sink_free(feat_sink *s);
/* The spools in (layer, kv_head) order. */
void feat_sink_sort(feat_sink *s);
/* A uniform in [0, 1) from a seed and a tuple: the sampling's draws (thread-independent). */
uint64_t feat_key(const char *text);

typedef struct {
    const study_set *set;
    const char *output;
    bool csv, force, quiet;
    bool mixed_models;              /* traces of different models or shapes in one file (refused otherwise, as sim) */
    const policy_config *driver;
    const char *driver_text;        /* the driver's name or definition text */
    feat_cols cols;
    int64_t budget, chunk;
    uint64_t seed;
    double sample_steps, sample_candidates;
    int threads;
    const char *command;            /* the command as typed (an attribute) */
    const prov_record *prov;        /* the record written as /provenance (HDF5), holding each trace's sha256; or NULL */
} feat_opts;

/* The whole verb's work: every trace replayed, the output written whole or not at all. */
int feat_run(const feat_opts *o, kv_err *err);

/* ---- the output (features_out.c) ---- */
typedef struct feat_out feat_out;
int feat_out_open(feat_out **out, const feat_opts *o, const char *path, kv_err *err);
/* One trace's group from the sink's spools (sorted); sha256 of the trace file. */
int feat_out_trace(feat_out *out, const study_trace *t, const char *model, const char *sha256, feat_sink *s,
                   kv_err *err);
int feat_out_close(feat_out *out, kv_err *err);   /* closes; an error leaves the file to be removed */
void feat_out_abort(feat_out *out);

/* `kvtrace features TRACES -o FILE.h5`: per-candidate features and targets at every eviction step
 * (verb_features.c, docs/features.md). */
int features_main(int argc, char **argv);

#endif
