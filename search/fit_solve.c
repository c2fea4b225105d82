/* fit_solve: the objectives (docs/policy-search.md, "Objectives").
 *
 * ls, ridge: min sum (y - b - w.z)^2 + lambda |w|^2 (b unpenalised). The rows are folded one step
 *   at a time into the R factor of [1 z y] (a streamed QR, dgeqrf on R stacked over the step's rows:
 *   the normal equations are never formed), then the small problem [R; sqrt(lambda) I] is solved by
 *   dgelsd (minimum norm when a column is constant, e.g. a feature whose z is 0 everywhere).
 * logistic: min sum log(1 + e^{-s(b + w.z)}) + lambda/2 |w|^2 on y = oracle_keep (s = 2y - 1), by
 *   Newton = IRLS: one pass over the files per iteration accumulates the Hessian X'WX + lambda I and
 *   the gradient; dposv solves for the step; a step that raises the objective is halved.
 * rank: the same logistic loss on pairwise differences d = z_kept - z_evicted (label 1, no
 *   intercept): per step, `pairs` pairs (kept, evicted) drawn with replacement from a stream seeded by
 *   (seed, the step's ordinal), so every pass draws the same pairs; all pairs when fewer exist. */
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "search/fit.h"

enum { P_MAX = FIT_MAX_F + 2 };

typedef struct {
    const fit_opts *o;
    int F, P;                      /* P: parameters (intercept first unless rank) */
    double theta[P_MAX];
    double *a;                     /* ls: the stacked matrix, column-major */
    int64_t a_rows;
    double R[P_MAX * P_MAX];       /* ls: R of [1 z y], column-major P+1 square */
    double H[P_MAX * P_MAX], g[P_MAX], obj;   /* Newton: at theta */
    double loss;                   /* eval */
    double recall;
    int64_t n_rows, n_steps, n_pairs, n_recall;
} solver;

/* The row's design vector: [1, z] or z (rank). */
static void design(const solver *s, const double *z, double *x)
{
    int k = 0;
    if (s->o->objective != FIT_RANK) x[k++] = 1.0;
    for (int f = 0; f < s->F; f++) x[k++] = z[f];
}

static double target(const solver *s, const fit_step *st, int64_t j)
{
    return s->o->target == FIT_TARGET_KEEP ? (double)st->keep[j] : st->attn[j];
}

/* ---- least squares: the streamed QR ---------------------------------------- */
static int ls_step(void *ctx, const fit_step *st, kv_err *err)
{
    solver *s = ctx;
    const int P = s->P + 1;
    const int64_t m = P + st->n;
    if (m > s->a_rows) {
        double *a = realloc(s->a, (size_t)m * (size_t)P * sizeof *a);
        if (!a) return kv_fail(err, KV_EFAIL, "out of memory");
        s->a = a, s->a_rows = m;
    }
    double x[P_MAX];
    for (int c = 0; c < P; c++) {
        for (int r = 0; r < P; r++) s->a[(size_t)c * (size_t)m + (size_t)r] = s->R[c * P + r];
    }
    for (int64_t j = 0; j < st->n; j++) {
        design(s, st->z + j * st->F, x);
        x[s->P] = target(s, st, j);
        for (int c = 0; c < P; c++) s->a[(size_t)c * (size_t)m + (size_t)(P + j)] = x[c];
    }
    double tau[P_MAX + 1];
    if (LAPACKE_dgeqrf(LAPACK_COL_MAJOR, (lapack_int)m, P, s->a, (lapack_int)m, tau) != 0)
        return kv_fail(err, KV_EFAIL, "fit: dgeqrf failed");
    for (int c = 0; c < P; c++)
        for (int r = 0; r < P; r++) s->R[c * P + r] = r <= c ? s->a[(size_t)c * (size_t)m + (size_t)r] : 0.0;
    s->n_rows += st->n, s->n_steps++;
    return KV_OK;
}

static int ls_solve(solver *s, kv_err *err)
{
    const int P = s->P, m = 2 * P, Q = P + 1;
    double A[2 * P_MAX * P_MAX] = {0}, b[2 * P_MAX] = {0}, sv[P_MAX];
    for (int c = 0; c < P; c++)
        for (int r = 0; r <= c; r++) A[c * m + r] = s->R[c * Q + r];
    for (int r = 0; r < P; r++) b[r] = s->R[P * Q + r];
    const double lam = s->o->objective == FIT_RIDGE ? s->o->lambda : 0.0;
    for (int c = 1; c < P; c++) A[c * m + P + c] = sqrt(lam);   /* the intercept (column 0) unpenalised */
    lapack_int rank;
    if (LAPACKE_dgelsd(LAPACK_COL_MAJOR, m, P, 1, A, m, b, m, sv, 1e-12, &rank) != 0)
        return kv_fail(err, KV_EFAIL, "fit: dgelsd failed");
    memcpy(s->theta, b, (size_t)P * sizeof *b);
    return KV_OK;
}

/* ---- Newton on the logistic loss (logistic, rank) --------------------------- */
static double log1pexp(double t)
{
    return t > 0 ? t + log1p(exp(-t)) : log1p(exp(t));
}

/* One row x with label y in {0, 1}: its loss at theta, and its Hessian and gradient terms. */
static double newton_row(solver *s, const double *x, double y, bool accumulate)
{
    double t = 0;
    for (int c = 0; c < s->P; c++) t += s->theta[c] * x[c];
    const double p = 1.0 / (1.0 + exp(-t)), loss = y > 0.5 ? log1pexp(-t) : log1pexp(t);
    if (accumulate) {
        const double w = p * (1.0 - p);
        for (int c = 0; c < s->P; c++) {
            s->g[c] += (y - p) * x[c];
            for (int r = 0; r <= c; r++) s->H[c * s->P + r] += w * x[r] * x[c];
        }
    }
    return loss;
}

/* The ranking pairs of a step: up to o->pairs (kept, evicted) index pairs, the same every pass. */
static int64_t pairs_of(const solver *s, const fit_step *st, int64_t *kept, int64_t *evicted, int64_t *pk, int64_t *pe)
{
    int64_t nk = 0, ne = 0;
    for (int64_t j = 0; j < st->n; j++) {
        if (st->keep[j]) kept[nk++] = j;
        else evicted[ne++] = j;
    }
    if (!nk || !ne) return 0;
    int64_t n = 0;
    if (nk * ne <= s->o->pairs) {
        for (int64_t a = 0; a < nk; a++)
            for (int64_t b = 0; b < ne; b++) pk[n] = kept[a], pe[n++] = evicted[b];
        return n;
    }
    kv_rng r;
    rng_init(&r, s->o->seed, (uint64_t)st->ordinal, 0x7a6b, 0);
    for (; n < s->o->pairs; n++) pk[n] = kept[rng_below(&r, (uint64_t)nk)], pe[n] = evicted[rng_below(&r, (uint64_t)ne)];
    return n;
}

typedef struct {
    solver *s;
    bool accumulate;
    int64_t *buf;       /* rank: kept, evicted [n] each, then the pairs [2 * pairs] */
    int64_t cap;
} newton_pass;

static int newton_step(void *ctx, const fit_step *st, kv_err *err)
{
    newton_pass *np = ctx;
    solver *s = np->s;
    double x[P_MAX];
    s->n_rows += st->n, s->n_steps++;
    if (s->o->objective == FIT_LOGISTIC) {
        for (int64_t j = 0; j < st->n; j++) design(s, st->z + j * st->F, x), s->loss += newton_row(s, x, st->keep[j], np->accumulate);
        return KV_OK;
    }
    const int64_t need = 2 * st->n + 2 * (int64_t)s->o->pairs;
    if (need > np->cap) {
        int64_t *b = realloc(np->buf, (size_t)need * sizeof *b);
        if (!b) return kv_fail(err, KV_EFAIL, "out of memory");
        np->buf = b, np->cap = need;
    }
    int64_t *pk = np->buf + 2 * st->n, *pe = pk + s->o->pairs;
    const int64_t n = pairs_of(s, st, np->buf, np->buf + st->n, pk, pe);
    for (int64_t i = 0; i < n; i++) {
        for (int f = 0; f < s->F; f++) x[f] = st->z[pk[i] * st->F + f] - st->z[pe[i] * st->F + f];
        s->loss += newton_row(s, x, 1.0, np->accumulate);
    }
    s->n_pairs += n;
    return KV_OK;
}

/* One pass at theta: the objective, and (accumulate) H and g with the penalty. */
static int newton_pass_run(const fit_input *in, solver *s, bool accumulate, kv_err *err)
{
    newton_pass np = {.s = s, .accumulate = accumulate};
    memset(s->H, 0, sizeof s->H), memset(s->g, 0, sizeof s->g);
    s->loss = 0, s->n_rows = s->n_steps = s->n_pairs = 0;
    int rc = fit_scan(in, newton_step, &np, err);
    free(np.buf);
    const int w0 = s->o->objective == FIT_RANK ? 0 : 1;
    double pen = 0;
    for (int c = w0; c < s->P; c++) {
        pen += 0.5 * s->o->lambda * s->theta[c] * s->theta[c];
        s->H[c * s->P + c] += s->o->lambda, s->g[c] -= s->o->lambda * s->theta[c];
    }
    s->obj = s->loss + pen;
    return rc;
}

static int newton(const fit_input *in, solver *s, fit_result *r, kv_err *err)
{
    double prev[P_MAX], delta[P_MAX] = {0}, prev_obj = INFINITY, step = 1;
    int rc = KV_OK;
    for (r->iterations = 0; !rc && r->iterations < s->o->max_iter; r->iterations++) {
        rc = newton_pass_run(in, s, true, err);
        if (rc) break;
        if (s->obj > prev_obj * (1 + 1e-15) && step > 1e-10) {  /* the last step overshot: halve it */
            step *= 0.5;
            for (int c = 0; c < s->P; c++) s->theta[c] = prev[c] + step * delta[c];
            continue;
        }
        const double gain = prev_obj - s->obj;
        if (gain >= 0 && gain <= 1e-12 * fmax(1.0, fabs(s->obj))) {
            r->converged = true;
            break;
        }
        double H[P_MAX * P_MAX];
        memcpy(H, s->H, sizeof H), memcpy(delta, s->g, sizeof s->g);
        if (LAPACKE_dposv(LAPACK_COL_MAJOR, 'U', s->P, 1, H, s->P, delta, s->P) != 0)
            return kv_fail(err, KV_EFAIL, "fit: the Hessian is singular (a constant feature? give --lambda > 0)");
        memcpy(prev, s->theta, sizeof prev), prev_obj = s->obj, step = 1;
        double big = 0;
        for (int c = 0; c < s->P; c++) s->theta[c] += delta[c], big = fmax(big, fabs(delta[c]));
        if (big <= 1e-12) {
            r->converged = true;
            rc = newton_pass_run(in, s, false, err);
            break;
        }
    }
    if (!rc && !r->converged) rc = newton_pass_run(in, s, false, err);   /* the loss at the last theta */
    return rc;
}

/* ---- evaluation: the training loss and the recall of the oracle's kept set --- */
typedef struct {
    double s;
    int64_t j;
} scored;

static int by_score_desc(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? 1 : -1;
    return (x->j < y->j) - (x->j > y->j);   /* ties: the later position first, as the engine keeps */
}

typedef struct {
    solver *s;
    fit_result *r;
    scored *buf;
    int64_t cap;
} eval_pass;

static int eval_step(void *ctx, const fit_step *st, kv_err *err)
{
    eval_pass *e = ctx;
    solver *s = e->s;
    if (st->n > e->cap) {
        scored *b = realloc(e->buf, (size_t)st->n * sizeof *b);
        if (!b) return kv_fail(err, KV_EFAIL, "out of memory");
        e->buf = b, e->cap = st->n;
    }
    int64_t kept = 0;
    for (int64_t j = 0; j < st->n; j++) {
        const double sc = fit_score(e->r, st->z + j * st->F);
        e->buf[j] = (scored){sc, j}, kept += st->keep[j];
        const double res = target(s, st, j) - e->r->intercept - sc;
        if (s->o->objective == FIT_LS || s->o->objective == FIT_RIDGE) s->loss += res * res;
    }
    s->n_rows += st->n, s->n_steps++;
    if (kept > 0 && kept < st->n) {
        qsort(e->buf, (size_t)st->n, sizeof *e->buf, by_score_desc);
        int64_t hit = 0;
        for (int64_t i = 0; i < kept; i++) hit += st->keep[e->buf[i].j];
        s->recall += (double)hit / (double)kept, s->n_recall++;
    }
    return KV_OK;
}

double fit_score(const fit_result *r, const double *z_row)
{
    double t = r->w[0] * z_row[0];
    for (int f = 1; f < r->F; f++) t = t + r->w[f] * z_row[f];
    return t;
}

int fit_run(const fit_input *in, const fit_opts *o, fit_result *r, kv_err *err)
{
    memset(r, 0, sizeof *r);
    solver s = {.o = o, .F = in->F, .P = in->F + (o->objective == FIT_RANK ? 0 : 1)};
    int rc = KV_OK;
    if (o->objective == FIT_LS || o->objective == FIT_RIDGE) {
        rc = fit_scan(in, ls_step, &s, err);
        if (!rc) rc = ls_solve(&s, err);
        r->converged = !rc;
    } else {
        rc = newton(in, &s, r, err);
        r->n_pairs = s.n_pairs;
    }
    if (rc) {
        free(s.a);
        return rc;
    }
    const int w0 = o->objective == FIT_RANK ? 0 : 1;
    r->F = in->F, r->intercept = w0 ? s.theta[0] : 0.0;
    for (int f = 0; f < in->F; f++) r->w[f] = s.theta[w0 + f];
    const double newton_loss = s.loss, newton_obj = s.obj;
    eval_pass e = {.s = &s, .r = r};
    s.loss = 0, s.n_rows = s.n_steps = 0;
    rc = fit_scan(in, eval_step, &e, err);
    free(e.buf), free(s.a);
    r->n_rows = s.n_rows, r->n_steps = s.n_steps;
    if (!rc && !s.n_steps) rc = kv_fail(err, KV_EINPUT, "%s: no rows of the traces fitted on", in->files[0]);
    r->recall = s.n_recall ? s.recall / (double)s.n_recall : NAN;
    if (o->objective == FIT_LS || o->objective == FIT_RIDGE) {
        double pen = 0;
        for (int f = 0; f < in->F; f++) pen += r->w[f] * r->w[f];
        r->objective = s.loss + (o->objective == FIT_RIDGE ? o->lambda * pen : 0.0);
        r->loss = s.loss / (double)s.n_rows;
    } else {
        r->objective = newton_obj;
        r->loss = newton_loss / (double)(o->objective == FIT_RANK ? (r->n_pairs ? r->n_pairs : 1) : r->n_rows);
    }
    return rc;
}
