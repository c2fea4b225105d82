/* fit_write: a fit's outputs (docs/policy-search.md, "Outputs"): policy.defines (the expression,
 * every coefficient %.17g), fit.json, report.md, and --scores (every training row's fitted score). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr.h"
#include "search/fit.h"

_Static_assert(FIT_EXPR_MAX == sizeof(((expr_def *)0)->text), "a fitted definition is one expr takes");

static const char *const OBJECTIVES[] = {"ls", "ridge", "logistic", "rank"};

const char *fit_objective_name(fit_objective o)
{
    return OBJECTIVES[o];
}

static const char *loss_name(fit_objective o)
{
    return o == FIT_LS || o == FIT_RIDGE ? "mean squared error per row"
           : o == FIT_LOGISTIC           ? "mean log loss per row"
                                         : "mean pairwise log loss per sampled pair";
}

int fit_expression(const fit_input *in, const fit_result *r, const char *name, char *buf, size_t cap, kv_err *err)
{
    size_t at = (size_t)snprintf(buf, cap, "%s = %.17g*z(%s)", name, r->w[0], in->names[0]);
    for (int f = 1; f < r->F && at < cap; f++)
        at += (size_t)snprintf(buf + at, cap - at, " %c %.17g*z(%s)", r->w[f] < 0 ? '-' : '+', fabs(r->w[f]),
                               in->names[f]);
    if (at >= cap) return kv_fail(err, KV_EUSAGE, "fit: the expression is longer than %zu bytes: fit fewer features", cap - 1);
    /* the definition must be one expr takes back: parse it as --defines will (the name first: a bad
     * --name is a usage error, a column expr does not know is the file's) */
    expr_defs *d = kv_calloc(1, sizeof *d, "definitions", err);
    char probe[FIT_NAME_MAX + 8];
    snprintf(probe, sizeof probe, "%.*s = 1", FIT_NAME_MAX - 1, name);
    int rc = !d ? KV_EFAIL : strlen(name) >= FIT_NAME_MAX ? kv_fail(err, KV_EUSAGE, "fit: --name is too long")
                                                          : expr_define(d, probe, err);
    if (!rc) {
        memset(d, 0, sizeof *d);
        kv_err why = {0};
        if (expr_define(d, buf, &why))
            rc = kv_fail(err, KV_EINPUT, "%s: the fitted expression does not parse (a column the expression language "
                         "does not know?): %s", in->files[0], why.msg);
    }
    free(d);
    return rc;
}

/* The written expression run by the expression engine (expr_eval_columns) on every step's features as
 * the files hold them, against the fitted scores: the largest difference relative to the scale of
 * the sum (sum_f |w_f z_f| of the row). */
typedef struct {
    const fit_result *r;
    const expr_prog *p;
    int col[EXPR_MAX_FEATS];   /* the fitted column each of the program's features reads */
    double *cols, *got;
    int64_t cap;
    double worst;
} repro_ctx;

static int repro_step(void *ctx, const fit_step *st, kv_err *err)
{
    repro_ctx *c = ctx;
    const int nf = c->p->n_feats;
    if (st->n > c->cap) {
        free(c->cols);   /* got lies inside it */
        c->cols = kv_calloc((size_t)st->n * (size_t)(nf + 1), sizeof(double), "fit check", err);
        c->got = c->cols ? c->cols + (size_t)st->n * (size_t)nf : NULL;
        if (!c->cols) return err->code;
        c->cap = st->n;
    }
    const double *cols[EXPR_MAX_FEATS];
    for (int i = 0; i < nf; i++) {
        double *x = c->cols + (size_t)i * (size_t)st->n;
        for (int64_t j = 0; j < st->n; j++) x[j] = st->raw[j * st->F + c->col[i]];
        cols[i] = x;
    }
    int rc = expr_eval_columns(c->p, cols, st->n, c->got, err);
    for (int64_t j = 0; !rc && j < st->n; j++) {
        const double *z = st->z + j * st->F, want = fit_score(c->r, z);
        double scale = 0;
        for (int f = 0; f < st->F; f++) scale += fabs(c->r->w[f] * z[f]);
        const double d = fabs(c->got[j] - want) / (scale > 0 ? scale : 1.0);
        if (!(d <= c->worst)) c->worst = isnan(d) ? INFINITY : d;
    }
    return rc;
}

/* Runs the check: *worst the largest relative difference; over 1e-12 (or a feature the program reads
 * that is not a fitted column) nothing is written (docs/policy-search.md, "Outputs"). */
static int check_reproduces(const fit_input *in, const fit_result *r, const char *expr, double *worst, kv_err *err)
{
    expr_prog *p = kv_calloc(1, sizeof *p, "fit check", err);
    char name[64];
    int rc = p ? expr_parse(expr, name, p, err) : err->code;
    repro_ctx c = {.r = r, .p = p};
    expr_prog *one = rc ? NULL : kv_calloc(1, sizeof *one, "fit check", err);
    if (!rc && !one) rc = err->code;
    for (int i = 0; !rc && i < p->n_feats; i++) {
        c.col[i] = -1;
        for (int f = 0; f < in->F && c.col[i] < 0; f++) {   /* the column's feature and arguments, as parsed */
            char probe[FIT_NAME_MAX + 16];
            snprintf(probe, sizeof probe, "c = %s", in->names[f]);
            kv_err ignore = {0};
            if (expr_parse(probe, name, one, &ignore) == KV_OK && one->n_feats == 1 && one->feat[0].id == p->feat[i].id &&
                one->feat[0].a == p->feat[i].a && one->feat[0].b == p->feat[i].b)
                c.col[i] = f;
        }
        if (c.col[i] < 0)
            rc = kv_fail(err, KV_EFAIL, "fit: the written expression reads %s, which is not a fitted column",
                         EXPR_FEATURES[p->feat[i].id].name);
    }
    if (!rc) rc = fit_scan(in, repro_step, &c, err);
    if (!rc && !(c.worst <= 1e-12))
        rc = kv_fail(err, KV_EFAIL, "fit: the written expression does not reproduce the fitted scores (largest "
                     "difference %.3g of the score's scale, more than 1e-12); nothing written", c.worst);
    *worst = c.worst;
    free(c.cols), free(p), free(one);
    return rc;
}

static void header_lines(FILE *f, const fit_input *in, const fit_result *r, const fit_out *out)
{
    const fit_opts *o = out->opts;
    fprintf(f, "# kvtrace fit: objective %s, target %s, lambda %.17g%s\n", fit_objective_name(o->objective),
            o->objective == FIT_LS || o->objective == FIT_RIDGE
                ? (o->target == FIT_TARGET_KEEP ? "oracle_keep" : "future_attn") : "oracle_keep",
            o->lambda, o->objective == FIT_RANK ? " (pairs sampled per step, seeded)" : "");
    fprintf(f, "# command: %s\n", out->command ? out->command : "");
    for (int i = 0; i < in->n_files; i++)
        fprintf(f, "# training file: %s%s%s%s\n", in->files[i], in->model[i][0] ? " (model " : "", in->model[i],
                in->model[i][0] ? ")" : "");
    fprintf(f, "# rows %lld, steps %lld%s; training loss (%s) %.17g; objective %.17g\n", (long long)r->n_rows,
            (long long)r->n_steps, "", loss_name(o->objective), r->loss, r->objective);
    fprintf(f, "# recall of the oracle's kept set (top |kept| by this score, mean over steps) %.6f\n", r->recall);
    fprintf(f, "# intercept %.17g (omitted: a constant changes no ranking)\n", r->intercept);
    fprintf(f, "# this expression, run by the expression engine on the training rows, gives the fitted scores to "
               "%.3g of their scale (checked: at most 1e-12)\n", out->reproduced);
    for (int k = 0; k < in->F; k++)
        fprintf(f, "# standardised weight of z(%s): %.17g\n", in->names[k], r->w[k]);
}

static int write_defines(const char *dir, const fit_input *in, const fit_result *r, const fit_out *out, const char *expr,
                         kv_err *err)
{
    FILE *f = csv_create(dir, "policy.defines", NULL, err);
    if (!f) return KV_EFAIL;
    header_lines(f, in, r, out);
    fprintf(f, "%s\n", expr);
    return csv_close(f, "policy.defines", err);
}

static int write_json(const char *dir, const fit_input *in, const fit_result *r, const fit_out *out, const char *expr,
                      kv_err *err)
{
    json_t *j = json_object(), *w = json_object(), *feats = json_array(), *files = json_array();
    for (int k = 0; k < in->F; k++) {
        json_array_append_new(feats, json_string(in->names[k]));
        json_object_set_new(w, in->names[k], json_real(r->w[k]));
    }
    for (int i = 0; i < in->n_files; i++) json_array_append_new(files, json_string(in->files[i]));
    const fit_opts *o = out->opts;
    json_object_set_new(j, "name", json_string(out->name));
    json_object_set_new(j, "objective", json_string(fit_objective_name(o->objective)));
    json_object_set_new(j, "target", json_string(o->target == FIT_TARGET_KEEP || o->objective >= FIT_LOGISTIC
                                                     ? "oracle_keep" : "future_attn"));
    json_object_set_new(j, "lambda", json_real(o->lambda));
    json_object_set_new(j, "features", feats);
    json_object_set_new(j, "coefficients", w);
    json_object_set_new(j, "intercept", json_real(r->intercept));
    json_object_set_new(j, "loss", json_real(r->loss));
    json_object_set_new(j, "loss_kind", json_string(loss_name(o->objective)));
    json_object_set_new(j, "objective_value", json_real(r->objective));
    json_object_set_new(j, "recall", isfinite(r->recall) ? json_real(r->recall) : json_null());
    json_object_set_new(j, "n_rows", json_integer(r->n_rows));
    json_object_set_new(j, "n_steps", json_integer(r->n_steps));
    json_object_set_new(j, "n_pairs", json_integer(r->n_pairs));
    json_object_set_new(j, "iterations", json_integer(r->iterations));
    json_object_set_new(j, "converged", json_boolean(r->converged));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(j, "pairs_per_step", json_integer(o->pairs));
    json_object_set_new(j, "training_files", files);
    json_object_set_new(j, "definition", json_string(expr));
    json_object_set_new(j, "reproduced_max_rel_diff", json_real(out->reproduced));
    char path[4200];
    snprintf(path, sizeof path, "%s/fit.json", dir);
    const int bad = json_dump_file(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(j);
    return bad ? kv_fail(err, KV_EFAIL, "%s: write failed", path) : KV_OK;
}

static int write_report(const char *dir, const fit_input *in, const fit_result *r, const fit_out *out, const char *expr,
                        kv_err *err)
{
    FILE *f = csv_create(dir, "report.md", NULL, err);
    if (!f) return KV_EFAIL;
    const fit_opts *o = out->opts;
    fprintf(f, "# kvtrace fit: %s\n\nObjective `%s`, lambda %g; %lld rows in %lld eviction steps of %d file(s)%s.\n\n",
            out->name, fit_objective_name(o->objective), o->lambda, (long long)r->n_rows, (long long)r->n_steps,
            in->n_files, r->converged ? "" : " (**not converged**: the iteration limit was reached)");
    fprintf(f, "    %s\n\nUse it with `--defines policy.defines --policies %s` (sim; capture --evict).\n\n", expr, out->name);
    fprintf(f, "| feature | weight of z(feature) |\n| --- | --- |\n");
    for (int k = 0; k < in->F; k++) fprintf(f, "| `%s` | %.6g |\n", in->names[k], r->w[k]);
    fprintf(f, "\nTraining loss (%s): %.6g. On the training steps, the top |kept| candidates by this score hold "
               "%.2f%% of the oracle's kept set (mean over steps).\n", loss_name(o->objective), r->loss, 100 * r->recall);
    fprintf(f, "\nThe expression above, run by kvtrace's expression engine on the training rows, gives the fitted "
               "scores to %.3g of their scale (checked before anything was written: at most 1e-12).\n",
            out->reproduced);
    return csv_close(f, "report.md", err);
}

int fit_write(const char *dir, const fit_input *in, const fit_result *r, const fit_out *given, kv_err *err)
{
    char expr[FIT_EXPR_MAX];
    fit_out out = *given;
    int rc = fit_expression(in, r, out.name, expr, sizeof expr, err);
    if (!rc) rc = check_reproduces(in, r, expr, &out.reproduced, err);
    if (!rc) rc = write_defines(dir, in, r, &out, expr, err);
    if (!rc) rc = write_json(dir, in, r, &out, expr, err);
    if (!rc) rc = write_report(dir, in, r, &out, expr, err);
    return rc;
}

typedef struct {
    FILE *f;
    const fit_result *r;
    const fit_input *in;
} scores_ctx;

static int score_step(void *ctx, const fit_step *st, kv_err *err)
{
    (void)err;
    scores_ctx *c = ctx;
    for (int64_t j = 0; j < st->n; j++) {
        csv_field(c->f, c->in->files[st->file], true);
        fputc(',', c->f);
        csv_field(c->f, st->trace, true);
        fprintf(c->f, ",%lld,%.17g\n", (long long)(st->row0 + j), fit_score(c->r, st->z + j * st->F));
    }
    return KV_OK;
}

int fit_write_scores(const char *dir, const fit_input *in, const fit_result *r, kv_err *err)
{
    scores_ctx c = {.f = csv_create(dir, "scores.csv", "file,trace,row,score", err), .r = r, .in = in};
    if (!c.f) return KV_EFAIL;
    int rc = fit_scan(in, score_step, &c, err);
    const int rc2 = csv_close(c.f, "scores.csv", err);
    return rc ? rc : rc2;
}
