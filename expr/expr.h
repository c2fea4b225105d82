/* expr: score expressions (docs/expressions.md). A definition
 * "NAME = EXPR [; protect = ITEM, ...]" is parsed once (expr_parse.c) into a
 * small stack program over whole vectors, one double per candidate, and run
 * by a policy_iface of its own (expr_eval.c) that the caller's table holds:
 * `--define` and `--defines` fill an expr_defs the verb owns and attaches to
 * its policy_aliases (user policies), so nothing here is process-wide.
 * Features (expr_feat.c) are computed only when the program reads them. */
#ifndef KV_POLICY_EXPR_H
#define KV_POLICY_EXPR_H

#include <stdbool.h>
#include <stdio.h>

#include "policies/policy.h"
#include "core/vecmath.h"

enum { EXPR_MAX_INS = 256, EXPR_MAX_FEATS = 16, EXPR_MAX_PROTECT = 4, EXPR_MAX_DEFS = 16, EXPR_MAX_DEPTH = 64 };

typedef enum {
    EO_CONST, EO_FEAT, EO_NEG, EO_ADD, EO_SUB, EO_MUL, EO_DIV, EO_POW, EO_LT, EO_LE, EO_GT, EO_GE, EO_EQ, EO_NE,
    EO_COND, EO_LOG, EO_EXP, EO_SQRT, EO_ABS, EO_MIN, EO_MAX, EO_CLAMP, EO_Z, EO_RANK, EO_MINMAX, EO_SOFTMAX
} expr_opcode;

typedef enum {
    EF_KNORM, EF_VNORM, EF_COS_ANCHOR, EF_COS_ANCHOR_RAW, EF_COS_PAIRWISE, EF_ATTN_LAST, EF_ATTN_WINDOW,
    EF_ATTN_POOLED, EF_ATTN_ACC, EF_ATTN_ACC_NORM, EF_POS, EF_AGE, EF_IS_SINK, EF_RECENCY_RANK, EF_FUTURE_ATTN,
    EF_COUNT
} expr_feature_id;

/* One feature of the table: its parameters' count and defaults, what it reads. */
typedef struct {
    const char *name;
    int n_args;
    double def[2];
    const char *args;       /* "(W)", "(W, K)", "(k)" or "" */
    const char *formula;    /* one line, for `kvtrace policies --features` */
    bool attention;         /* reads v->attn (the engine computes it for this policy) */
    bool history;           /* accumulated across chunks (observe) */
    bool queries;           /* reads the trace's queries (the window) */
    bool offline;           /* reads the future: sim only */
    bool view_only;         /* reads nothing but the step's view: a lone such feature is a stateless policy */
} expr_feature;

extern const expr_feature EXPR_FEATURES[EF_COUNT];

typedef struct {
    expr_opcode op;
    int slot;       /* EO_FEAT: index into expr_prog.feat */
    double c;       /* EO_CONST */
} expr_ins;

typedef struct {
    expr_feature_id id;
    double a, b;    /* its arguments (defaults filled) */
} expr_feat_use;

typedef enum { PR_SINKS, PR_RECENT, PR_RECENT_N } expr_protect_kind;
typedef struct {
    expr_protect_kind kind;
    double x;
} expr_protect;

typedef struct {
    int n_ins, n_feats, n_protect, depth;
    int direct;     /* the feature slot computed straight into the scores (the program's first push, read
                     * once: a lone feature is evaluated in place), -1 none; set by expr_parse */
    expr_ins ins[EXPR_MAX_INS];
    expr_feat_use feat[EXPR_MAX_FEATS];
    expr_protect protect[EXPR_MAX_PROTECT];
} expr_prog;

/* One definition: its policy (iface first, so the policy finds its program from cfg->iface). */
typedef struct {
    policy_iface iface;
    char name[64];
    char text[2048];      /* the definition as given (recorded beside every result; a fitted one of 16 terms fits) */
    char summary[2100];
    expr_prog prog;
} expr_def;

typedef struct {
    int n;
    expr_def def[EXPR_MAX_DEFS];
    const policy_iface *ifaces[EXPR_MAX_DEFS];
} expr_defs;

/* Parses "NAME = EXPR [; protect = ITEM, ...]" into prog, name (cap 64). Errors are KV_EUSAGE
 * "--define NAME: col C: what (did you mean X?)", C counted from 1 in text. */
int expr_parse(const char *text, char *name, expr_prog *prog, kv_err *err);

/* The program p over n candidates whose features are given: cols[i][n] the values of p->feat[i]
 * (whatever computed them: fit's feature files), scores[n] out, computed exactly as a replay
 * computes them. p has no protect items (they need positions: a fitted expression has none).
 * Out of memory is KV_EFAIL. */
int expr_eval_columns(const expr_prog *p, const double *const *cols, int64_t n, double *scores, kv_err *err);

/* Adds one definition to t (its name not a policy's, not defined before). */
int expr_define(expr_defs *t, const char *text, kv_err *err);
/* Every line of path (blank lines and '#' comments skipped): exit 3 (KV_EINPUT) when it cannot be
 * read, a line's error as usage naming path:line. */
int expr_define_file(expr_defs *t, const char *path, kv_err *err);
/* Makes t's policies usable by name through a (a->defs); a name that is also an alias's or a plug-in policy's
 * (a->user: call it after every option, so that --plugin before or after --define is seen) is refused. */
int expr_defs_attach(const expr_defs *t, policy_aliases *a, kv_err *err);
/* The definition text when pi is an expression's policy, else NULL. */
const char *expr_definition(const policy_iface *pi);


/* What the features keep per stream (in the policy's state): hist, the accumulated attention
 * (attn_acc), NULL when the program reads none; oracle, future_attn's state; norms, the key norms
 * by position (keydiff's cache: knorm and the cosines read them from it). */
typedef struct {
    const void *hist;
    void *oracle;
    vm_norm_cache *norms;
} expr_feat_ctx;

/* Features (expr_feat.c): the values of one use over v's candidates into out[n]; tmp: 2n + D
 * doubles of scratch (the cosines' anchor and norms). */
int expr_feature_values(const expr_feat_use *u, const policy_view *v, const expr_feat_ctx *ctx, double *out,
                        double *tmp, kv_err *err);
int expr_feature_index(const char *name, size_t len);

#endif
