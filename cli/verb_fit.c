/* `kvtrace fit FEATURES... -o DIR`: a score expression fitted on feature files
 * (search/fit.h, docs/policy-search.md). Everything is fitted and checked before DIR exists;
 * DIR appears whole (outdir) or not at all. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "core/outfile.h"
#include "search/fit.h"
#include "verbs.h"

static const char USAGE[] =
    "usage: kvtrace fit FEATURES.h5|FEATURES.csv... -o DIR [--objective ls|ridge|logistic|rank]\n"
    "                   [--lambda L] [--target future_attn|oracle_keep] [--name NAME]\n"
    "                   [--features F1,F2,...] [--seed N] [--pairs N] [--max-iter N] [--scores] [--force]\n"
    "\n"
    "Fits score = sum_i w_i z(f_i) on feature files (`kvtrace features`), every feature\n"
    "standardised over each eviction step's candidates as the expression language's z() does.\n"
    "  --objective  ls (default): least squares on --target (default future_attn);\n"
    "               ridge: plus lambda |w|^2 (--lambda, default 1);\n"
    "               logistic: log loss on oracle_keep, IRLS (lambda/2 |w|^2, default 1e-4);\n"
    "               rank: within each step the oracle-kept should outrank the evicted: log loss\n"
    "               on --pairs (default 64) sampled (kept, evicted) differences (--seed, default 0)\n"
    "  --features   the columns fitted (default: every feature of the first file, at most 16)\n"
    "  --name       the policy's name in policy.defines (default: fitted)\n"
    "  --scores     also DIR/scores.csv: every training row's fitted score (%.17g)\n"
    "Writes DIR/policy.defines (use: sim --defines DIR/policy.defines --policies NAME), DIR/fit.json,\n"
    "DIR/report.md. The intercept is left out of the expression (it changes no ranking).\n";

typedef struct {
    const char *output, *name, *features;
    int objective, target, pairs, max_iter;
    double lambda;
    uint64_t seed;
    bool scores, force, help;
} fit_args;

static const cli_opt OPTIONS[] = {
    {CLI_ROW("objective", CLI_CHOICE, fit_args, objective), .choices = "ls|ridge|logistic|rank"},
    {CLI_ROW("target", CLI_CHOICE, fit_args, target), .choices = "future_attn|oracle_keep"},
    {CLI_ROW("lambda", CLI_F64, fit_args, lambda), .lo = 0, .hi = 1e12},
    {CLI_ROW("name", CLI_TEXT, fit_args, name)},
    {CLI_ROW("features", CLI_TEXT, fit_args, features)},
    {CLI_ROW("seed", CLI_U64, fit_args, seed)},
    {CLI_ROW("pairs", CLI_INT, fit_args, pairs), .lo = 1, .hi = 1 << 20},
    {CLI_ROW("max-iter", CLI_INT, fit_args, max_iter), .lo = 1, .hi = 10000},
    {CLI_ROW("scores", CLI_FLAG, fit_args, scores)},
    {CLI_ROW("force", CLI_FLAG, fit_args, force)},
    {CLI_ROW("output", CLI_TEXT, fit_args, output)},
    {0},
};

static int check_args(fit_args *a, int n_files, kv_err *err)
{
    const char *v = "fit";
    if (n_files < 1) return cli_usage(err, v, "missing FEATURES files");
    if (!a->output) return cli_usage(err, v, "-o DIR is required");
    if (a->objective == FIT_LS && !isnan(a->lambda) && a->lambda != 0)
        return cli_usage(err, v, "--lambda applies to ridge, logistic and rank, not ls");
    if (a->objective >= FIT_LOGISTIC && a->target == FIT_TARGET_ATTN)
        return cli_usage(err, v, "--objective %s fits oracle_keep; --target future_attn is for ls and ridge",
                         a->objective == FIT_RANK ? "rank" : "logistic");
    if (isnan(a->lambda)) a->lambda = a->objective == FIT_RIDGE ? 1.0 : a->objective == FIT_LS ? 0.0 : 1e-4;
    if (a->target == -1) a->target = a->objective >= FIT_LOGISTIC ? FIT_TARGET_KEEP : FIT_TARGET_ATTN;
    if (!a->name) a->name = "fitted";
    return KV_OK;
}

/* Fitted and checked first; then DIR is written whole. */
static int fit_and_write(fit_args *a, const char *const *files, int n, const char *command, kv_err *err)
{
    fit_input *in = kv_calloc(1, sizeof *in, "fit input", err);
    if (!in) return KV_EFAIL;
    const fit_opts o = {.objective = (fit_objective)a->objective, .target = (fit_target)a->target,
                        .lambda = a->lambda, .seed = a->seed, .pairs = a->pairs, .max_iter = a->max_iter};
    fit_result r;
    int rc = fit_input_open(in, files, n, a->features, err);
    if (!rc) rc = outfile_check_inputs(a->output, files, n, err);
    if (!rc) rc = fit_run(in, &o, &r, err);
    char expr[512];
    if (!rc) rc = fit_expression(in, &r, a->name, expr, sizeof expr, err);   /* a bad --name before DIR */
    kv_outfile out = {.slot = -1};
    if (!rc) rc = outdir_begin(&out, a->output, a->force, err);
    if (!rc) {
        const fit_out fo = {.name = a->name, .command = command, .opts = &o};
        rc = fit_write(out.tmp_path, in, &r, &fo, err);
        if (!rc && a->scores) rc = fit_write_scores(out.tmp_path, in, &r, err);
        if (!rc) rc = outdir_commit(&out, err);
        if (rc) outdir_abort(&out);
    }
    if (!rc)
        printf("%s: %s, %lld rows, %lld steps, loss %.6g, recall %.4f%s\n%s\n", a->output,
               fit_objective_name(o.objective), (long long)r.n_rows, (long long)r.n_steps, r.loss, r.recall,
               r.converged ? "" : " (not converged)", expr);
    free(in);
    return rc;
}

int verb_fit(int argc, char **argv)
{
    fit_args a = {.target = -1, .lambda = NAN, .pairs = 64, .max_iter = 50};
    kv_err err = {0};
    int first = argc;
    int rc = cli_opts_parse("fit", argc, argv, OPTIONS, &a, &a.help, &first, &err);
    if (!rc && a.help) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!rc) rc = check_args(&a, argc - first, &err);
    char *command = rc ? NULL : cli_command_line(argc, argv);
    if (!rc) rc = fit_and_write(&a, (const char *const *)argv + first, argc - first, command, &err);
    free(command);
    return rc ? cli_report(&err) : 0;
}
