/* expr_eval: a score expression's program run over all candidates of a step
 * (one vector per stack entry, double), its protect items, and the policy
 * each definition gets (create/observe/score through its own policy_iface,
 * held in the caller's expr_defs). Every score is the program's value: a NaN
 * is left as it is, and the engine counts it as -inf like any policy's
 * (policy_select, the allocators), so it is never kept before a number. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileopen.h"
#include "policies/attn_hist.h"
#include "expr/expr.h"
#include "policies/select.h"

extern const policy_iface policy_oracle;

typedef struct {
    attn_hist *hist;      /* attn_acc's sums; NULL: the program reads none */
    void *oracle;         /* future_attn's state */
    vm_norm_cache norms;  /* key norms by position (knorm, the cosines) */
    double *buf;          /* [n_feats + depth][cap], rank's 2 cap, the features' 2 cap + D */
    int64_t cap, cap_d;   /* kept between steps: allocated again only when n or D grows */
} expr_state;

typedef struct {
    double x;
    int64_t i;
} ranked;

static int by_value(const void *a, const void *b)
{
    const double x = ((const ranked *)a)->x, y = ((const ranked *)b)->x;
    if (isnan(x) || isnan(y)) return isnan(x) - isnan(y) ? (isnan(x) ? -1 : 1) : 0;
    return (x > y) - (x < y);
}

/* z, rank, minmax, softmax of x[n] in place (tmp: n ranked). */
static void normalise(expr_opcode op, double *x, int64_t n, ranked *tmp)
{
    double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
    for (int64_t j = 0; j < n; j++) lo = fmin(lo, x[j]), hi = fmax(hi, x[j]), sum += x[j];
    const double mean = n ? sum / (double)n : 0;
    if (op == EO_Z) {
        for (int64_t j = 0; j < n; j++) sq += (x[j] - mean) * (x[j] - mean);
        const double sd = n ? sqrt(sq / (double)n) : 0;
        for (int64_t j = 0; j < n; j++) x[j] = sd > 0 ? (x[j] - mean) / sd : 0.0;
    } else if (op == EO_MINMAX) {
        for (int64_t j = 0; j < n; j++) x[j] = hi > lo ? (x[j] - lo) / (hi - lo) : 0.0;
    } else if (op == EO_SOFTMAX) {
        double z = 0;
        for (int64_t j = 0; j < n; j++) z += (x[j] = exp(x[j] - hi));
        for (int64_t j = 0; j < n; j++) x[j] /= z;
    } else {   /* rank: ascending, ties averaged, scaled to [0, 1] */
        for (int64_t j = 0; j < n; j++) tmp[j] = (ranked){x[j], j};
        qsort(tmp, (size_t)n, sizeof *tmp, by_value);
        for (int64_t a = 0, b; a < n; a = b) {
            for (b = a + 1; b < n && by_value(&tmp[a], &tmp[b]) == 0; b++) {}
            const double r = n > 1 ? 0.5 * (double)(a + b - 1) / (double)(n - 1) : 0.0;
            for (int64_t k = a; k < b; k++) x[tmp[k].i] = r;
        }
    }
}

static double apply(expr_opcode op, double a, double b, double c)
{
    switch (op) {
    case EO_NEG: return -a;
    case EO_ADD: return a + b;
    case EO_SUB: return a - b;
    case EO_MUL: return a * b;
    case EO_DIV: return a / b;
    case EO_POW: return pow(a, b);
    case EO_LT: return a < b;
    case EO_LE: return a <= b;
    case EO_GT: return a > b;
    case EO_GE: return a >= b;
    case EO_EQ: return a == b;
    case EO_NE: return a != b;
    case EO_COND: return a != 0 ? b : c;
    case EO_LOG: return log(a);
    case EO_EXP: return exp(a);
    case EO_SQRT: return sqrt(a);
    case EO_ABS: return fabs(a);
    case EO_MIN: return fmin(a, b);
    case EO_MAX: return fmax(a, b);
    case EO_CLAMP: return fmin(fmax(a, b), c);
    default: return NAN;
    }
}

static int arity(expr_opcode op)
{
    if (op == EO_COND || op == EO_CLAMP) return 3;
    if (op == EO_NEG || (op >= EO_LOG && op <= EO_ABS) || op >= EO_Z) return 1;
    return 2;
}

/* The stack: entry k points at a feature's values or at its own scratch row scr[k] (row 0: scores). */
static void run_ins(const expr_ins *in, double **stk, int *sp, double *const *scr, double *const *feat, int64_t n,
                    ranked *tmp)
{
    if (in->op == EO_CONST) {
        for (int64_t j = 0; j < n; j++) scr[*sp][j] = in->c;
        stk[*sp] = scr[*sp], ++*sp;
        return;
    }
    if (in->op == EO_FEAT) {
        stk[(*sp)++] = feat[in->slot];
        return;
    }
    const int k = arity(in->op), r = *sp - k;
    double *out = scr[r];
    const double *a = stk[r], *b = k > 1 ? stk[r + 1] : a, *c = k > 2 ? stk[r + 2] : a;
    if (in->op >= EO_Z) {
        if (out != a) memcpy(out, a, sizeof(double) * (size_t)n);
        normalise(in->op, out, n, tmp);
    } else if (in->op == EO_NEG) {
        for (int64_t j = 0; j < n; j++) out[j] = -a[j];
    } else if (in->op == EO_MUL) {
        for (int64_t j = 0; j < n; j++) out[j] = a[j] * b[j];
    } else if (in->op == EO_ADD) {
        for (int64_t j = 0; j < n; j++) out[j] = a[j] + b[j];
    } else {
        for (int64_t j = 0; j < n; j++) out[j] = apply(in->op, a[j], b[j], c[j]);
    }
    stk[r] = out, *sp = r + 1;
}

static int grow(expr_state *st, const expr_prog *p, int64_t n, int64_t D, kv_err *err)
{
    if (n <= st->cap && D <= st->cap_d) return KV_OK;
    free(st->buf);
    st->cap = st->cap_d = 0;
    const size_t rows = (size_t)(p->n_feats + p->depth) + 4;   /* +4: rank's and the features' scratch */
    st->buf = kv_calloc(rows * (size_t)n + (size_t)D, sizeof(double), "expression scores", err);
    if (!st->buf) return err->code;
    st->cap = n, st->cap_d = D;
    return KV_OK;
}

/* The protect items: +inf over the sinks, the most recent. */
static void protect(const expr_prog *p, const policy_view *v, double *scores)
{
    const int64_t n = v->n;
    for (int i = 0; i < p->n_protect; i++) {
        const expr_protect *q = &p->protect[i];
        if (q->kind == PR_SINKS) {   /* positions are ascending (policy_view): only the prefix */
            for (int64_t j = 0; j < n && (double)v->pos[j] < q->x; j++) scores[j] = INFINITY;
            continue;
        }
        int64_t c = q->kind == PR_RECENT ? policy_recent_count(q->x, v->budget) : (int64_t)fmin(q->x, (double)n);
        policy_protect_recent(v, c, scores);
    }
}

/* A lone feature that needs nothing but the view (attn_last, pos, age, ...): the program is that
 * feature computed into the scores, and the policy is stateless, so a step touches no per-stream
 * memory beside the view (the state's cache line was most of such a cheap policy's cost). */
static bool stateless(const expr_prog *p)
{
    return p->n_feats == 1 && p->direct == 0 && p->n_ins == 1 && EXPR_FEATURES[p->feat[0].id].view_only;
}

/* The program's instructions over n candidates whose features are feat[], into scores[n]: scratch holds
 * p->depth rows of `stride` doubles (the stack's rows 1..depth), then the rank scratch (2 rows). */
static void run_program(const expr_prog *p, double *const *feat, int64_t n, double *scores, double *scratch,
                        int64_t stride)
{
    double *scr[EXPR_MAX_DEPTH + 1], *stk[EXPR_MAX_DEPTH + 1];
    scr[0] = scores;
    for (int k = 1; k <= p->depth; k++) scr[k] = scratch + (size_t)(k - 1) * (size_t)stride;
    ranked *tmp = (ranked *)(scratch + (size_t)p->depth * (size_t)stride);
    int sp = 0;
    for (int i = 0; i < p->n_ins; i++) run_ins(&p->ins[i], stk, &sp, scr, feat, n, tmp);
    if (stk[0] != scores) memcpy(scores, stk[0], sizeof(double) * (size_t)n);
}

/* The program over v's candidates into scores[v->n]; state from expr_state_*. */
static int expr_run(const expr_prog *p, void *state, const policy_view *v, double *scores, kv_err *err)
{
    expr_state *st = state;
    const int64_t n = v->n;
    int rc = grow(st, p, n, v->D, err);
    const expr_feat_ctx ctx = {st->hist, st->oracle, &st->norms};
    double *ftmp = st->buf + (size_t)(p->n_feats + p->depth + 2) * (size_t)st->cap;
    double *feat[EXPR_MAX_FEATS];
    for (int i = 0; !rc && i < p->n_feats; i++) {
        feat[i] = i == p->direct ? scores : st->buf + (size_t)i * (size_t)st->cap;
        rc = expr_feature_values(&p->feat[i], v, &ctx, feat[i], ftmp, err);
    }
    if (rc) return rc;
    run_program(p, feat, n, scores, st->buf + (size_t)p->n_feats * (size_t)st->cap, st->cap);
    protect(p, v, scores);
    return KV_OK;
}

int expr_eval_columns(const expr_prog *p, const double *const *cols, int64_t n, double *scores, kv_err *err)
{
    KV_ASSERT(p->n_protect == 0);
    double *buf = kv_calloc((size_t)(p->depth + 2) * (size_t)(n > 0 ? n : 1), sizeof(double), "expression scores", err);
    if (!buf) return err->code;
    double *feat[EXPR_MAX_FEATS];
    for (int i = 0; i < p->n_feats; i++) feat[i] = (double *)cols[i];   /* only read: EO_FEAT pushes, ops write scr */
    run_program(p, feat, n, scores, buf, n);
    free(buf);
    return KV_OK;
}

/* ---- the policy of one definition ---- */

static const expr_def *def_of(const policy_config *cfg)
{
    return (const expr_def *)(const void *)cfg->iface;   /* iface is expr_def's first member */
}

static bool reads(const expr_prog *p, bool history, bool offline)
{
    for (int i = 0; i < p->n_feats; i++) {
        const expr_feature *f = &EXPR_FEATURES[p->feat[i].id];
        if ((history && f->history) || (offline && f->offline)) return true;
    }
    return false;
}

static void expr_destroy(void *state)
{
    expr_state *st = state;
    if (!st) return;
    if (st->hist) attn_hist_destroy(st->hist);
    if (st->oracle) policy_oracle.destroy(st->oracle);
    vm_norm_cache_free(&st->norms);
    free(st->buf), free(st);
}

static int expr_create(const policy_config *cfg, void **state, kv_err *err)
{
    const expr_prog *p = &def_of(cfg)->prog;
    expr_state *st = kv_calloc(1, sizeof *st, "expression state", err);
    int rc = st ? KV_OK : err->code;
    void *h = NULL;
    if (!rc && reads(p, true, false) && !(rc = attn_hist_create(cfg, &h, err))) st->hist = h;
    if (!rc && reads(p, false, true)) rc = policy_oracle.create(cfg, &st->oracle, err);
    if (rc) expr_destroy(st);
    else *state = st;
    return rc;
}

static int expr_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)cfg;
    expr_state *st = state;
    return st->hist ? attn_hist_update(st->hist, v, 0, 1.0, "expression", err) : KV_OK;
}

static int expr_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    const expr_prog *p = &def_of(cfg)->prog;
    if (state) return expr_run(p, state, v, scores, err);
    const expr_feat_ctx none = {NULL, NULL, NULL};   /* stateless(p): the feature reads only the view */
    int rc = expr_feature_values(&p->feat[0], v, &none, scores, NULL, err);
    if (!rc) protect(p, v, scores);
    return rc;
}

static int64_t expr_query_window(const policy_config *cfg)
{
    const expr_prog *p = &def_of(cfg)->prog;
    int64_t w = 0;
    for (int i = 0; i < p->n_feats; i++)
        if (EXPR_FEATURES[p->feat[i].id].queries && (int64_t)p->feat[i].a > w) w = (int64_t)p->feat[i].a;
    return w;
}

const char *expr_definition(const policy_iface *pi)
{
    return pi && pi->score == expr_score ? ((const expr_def *)(const void *)pi)->text : NULL;
}

int expr_define(expr_defs *t, const char *text, kv_err *err)
{
    if (t->n >= EXPR_MAX_DEFS) return kv_fail(err, KV_EUSAGE, "--define: more than %d definitions", EXPR_MAX_DEFS);
    expr_def *d = &t->def[t->n];
    if (strlen(text) >= sizeof d->text)
        return kv_fail(err, KV_EUSAGE, "--define: a definition longer than %zu bytes", sizeof d->text - 1);
    int rc = expr_parse(text, d->name, &d->prog, err);
    if (rc) return rc;
    if (policy_find(d->name)) return kv_fail(err, KV_EUSAGE, "--define %s: %s is a built-in policy's name", d->name, d->name);
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->def[i].name, d->name) == 0)
            return kv_fail(err, KV_EUSAGE, "--define %s: defined twice ('%s' and '%s')", d->name, t->def[i].text, text);
    snprintf(d->text, sizeof d->text, "%s", text);
    snprintf(d->summary, sizeof d->summary, "score expression: %s", text);
    bool attn = false, hist = reads(&d->prog, true, false), offline = reads(&d->prog, false, true);
    for (int i = 0; i < d->prog.n_feats; i++) attn = attn || EXPR_FEATURES[d->prog.feat[i].id].attention;
    d->iface = (policy_iface){.name = d->name, .summary = d->summary, .needs_attention = attn,
                              .create = stateless(&d->prog) ? NULL : expr_create,
                              .destroy = stateless(&d->prog) ? NULL : expr_destroy, .score = expr_score,
                              .observe = hist ? expr_observe : NULL, .query_window = expr_query_window,
                              .offline_only = offline};
    t->ifaces[t->n++] = &d->iface;
    return KV_OK;
}

/* The whole of a --defines file (at most EXPR_DEFINES_MAX bytes, no NUL byte) into *text. */
enum { EXPR_DEFINES_MAX = 1 << 20 };
static int read_defines(const char *path, char **text, kv_err *err)
{
    FILE *f = kv_input_fopen(path, err);   /* missing or unreadable: exit 1, a directory: exit 2 */
    if (!f) return err->code;
    char *buf = kv_calloc(EXPR_DEFINES_MAX + 1, 1, "--defines", err);
    size_t n = buf ? fread(buf, 1, EXPR_DEFINES_MAX + 1, f) : 0;   /* bounded: /dev/zero too */
    const bool failed = buf && ferror(f);
    fclose(f);
    int rc = !buf ? err->code
             : failed ? kv_fail(err, KV_EFAIL, "%s: cannot read: %s", path, strerror(errno))
             : n > EXPR_DEFINES_MAX ? kv_fail(err, KV_EINPUT, "%s: larger than %d bytes (--defines)", path, EXPR_DEFINES_MAX)
             : memchr(buf, '\0', n) ? kv_fail(err, KV_EINPUT, "%s: holds a NUL byte: not a text file (--defines)", path)
                                   : KV_OK;
    if (rc) free(buf);
    else *text = buf;
    return rc;
}

int expr_define_file(expr_defs *t, const char *path, kv_err *err)
{
    char *text = NULL;
    int rc = read_defines(path, &text, err);
    char *next = text;
    for (int no = 1; !rc && next && *next; no++) {   /* one definition per line, whatever its length */
        char *line = next, *end = strchr(line, '\n');
        next = end ? end + 1 : NULL;
        if (end) *end = '\0';
        line[strcspn(line, "\r")] = '\0';
        char *s = line + strspn(line, " \t");
        if (!*s || *s == '#') continue;
        char *hash = strchr(s, '#');
        if (hash) *hash = '\0';
        if ((rc = expr_define(t, s, err))) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            err->code = KV_OK;
            rc = kv_fail(err, rc, "%s:%d: %s", path, no, why);
        }
    }
    free(text);
    return rc;
}

int expr_defs_attach(const expr_defs *t, policy_aliases *a, kv_err *err)
{
    for (int i = 0; i < t->n; i++) {
        for (int j = 0; j < a->n; j++)
            if (strcmp(t->def[i].name, a->name[j]) == 0)
                return kv_fail(err, KV_EUSAGE, "--define %s: also an --alias's name", a->name[j]);
        for (const policy_iface *const *u = a->user; u && *u; u++)   /* loaded before or after: both seen here */
            if (strcmp(t->def[i].name, (*u)->name) == 0)
                return kv_fail(err, KV_EUSAGE, "--define %s: also the name of a --plugin's policy", (*u)->name);
    }
    a->defs = t->ifaces, a->n_defs = t->n;
    return KV_OK;
}
