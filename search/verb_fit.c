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
#include "policies/sets.h"
#include "search/fit.h"
#include "search/heldout.h"

static const char USAGE[] =
    "usage: kvtrace fit FEATURES.h5|FEATURES.csv... -o DIR [--objective ls|ridge|logistic|rank]\n"
    "                   [--lambda L] [--target future_attn|oracle_keep] [--name NAME]\n"
    "                   [--features F1,F2,...] [--seed N] [--pairs N] [--max-iter N] [--scores] [--force]\n"
    "                   [--test STUDY | --study STUDY --split F [--split-seed N]] --budgets LIST --chunk C\n"
    "                   [--baselines LIST] [--threads N] [--mixed-models]\n"
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
    "DIR/report.md. The intercept is left out of the expression (it changes no ranking).\n"
    "Held-out evaluation (sim in-process with the fitted policy and the baselines):\n"
    "  --test STUDY       the test traces (a study directory, its index.jsonl, or one trace file)\n"
    "  --study S --split F  split study S by prompt (seeded by --split-seed, default 0): a share F\n"
    "                     of its prompts trains (only the FEATURES rows of those prompts' ids are\n"
    "                     fitted), the rest tests; DIR/split.json lists both\n"
    "  --baselines LIST   default " POLICY_SET_FIT_BASELINES "\n"
    "  --budgets LIST, --chunk C  as sim's\n"
    "Writes DIR/heldout/ (sim's results), DIR/heldout.csv, DIR/heldout.md, DIR/heldout.svg.\n";

enum { MAX_BUDGETS = 64 };

typedef struct {
    const char *output, *name, *features, *test, *study, *baselines, *budget_list;
    int objective, target, pairs, max_iter, threads;
    double lambda, split;
    uint64_t seed, split_seed;
    bool scores, force, help, mixed_models;
    int64_t chunk, budgets[MAX_BUDGETS];
    cli_join_space join; /* --budgets given more than once, joined */
    int n_budgets;
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
    {CLI_ROW("test", CLI_TEXT, fit_args, test)},
    {CLI_ROW("study", CLI_TEXT, fit_args, study)},
    {CLI_ROW("split", CLI_F64, fit_args, split), .lo = 1e-9, .hi = 1 - 1e-9},
    {CLI_ROW("split-seed", CLI_U64, fit_args, split_seed)},
    {CLI_ROW("baselines", CLI_TEXT, fit_args, baselines)},
    {CLI_ROW("budgets", CLI_TEXT, fit_args, budget_list), CLI_JOINED(fit_args, join)},
    {CLI_ROW("chunk", CLI_I64, fit_args, chunk), .lo = 1, .hi = 1 << 30},
    {CLI_ROW("threads", CLI_INT, fit_args, threads), .lo = 1, .hi = 256},
    {CLI_ROW("mixed-models", CLI_FLAG, fit_args, mixed_models)},
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
    const bool held = a->test || a->study;
    if (a->test && a->study) return cli_usage(err, v, "give --test STUDY or --study S --split F, not both");
    if (a->study && isnan(a->split)) return cli_usage(err, v, "--study S needs --split F");
    if (!a->study && !isnan(a->split)) return cli_usage(err, v, "--split F splits --study S");
    if (held && !a->budget_list) return cli_usage(err, v, "held-out evaluation needs --budgets LIST");
    if (held && !a->chunk) return cli_usage(err, v, "held-out evaluation needs --chunk C");
    if (!held && (a->budget_list || a->chunk || a->baselines))
        return cli_usage(err, v, "--budgets, --chunk and --baselines are for held-out evaluation (--test or --study)");
    if (!a->baselines) a->baselines = POLICY_SET_FIT_BASELINES;
    if (a->budget_list)
        return cli_parse_budgets(v, "--budgets", a->budget_list, MAX_BUDGETS, a->budgets, NULL, &a->n_budgets, err);
    return KV_OK;
}

/* The held-out traces: --test's, or --study's split (train ids into in->only; the test subset in sub). */
typedef struct {
    study_set all, sub;
    const study_set *test;
    const char **train_ids;
    int *train, *test_i, n_train, n_test;
} heldout_set;

static int resolve_test(const fit_args *a, fit_input *in, heldout_set *h, kv_err *err)
{
    char *word = (char *)(a->test ? a->test : a->study);
    if (!word) return KV_OK;
    int rc = study_set_resolve("fit", &word, 1, &h->all, err);
    h->test = &h->all;
    if (rc || !a->study) return rc;
    const int n = h->all.n;
    h->train = kv_calloc((size_t)n, sizeof *h->train, "split", err);
    h->test_i = h->train ? kv_calloc((size_t)n, sizeof *h->test_i, "split", err) : NULL;
    h->train_ids = h->test_i ? kv_calloc((size_t)n, sizeof *h->train_ids, "split", err) : NULL;
    h->sub.t = h->train_ids ? kv_calloc((size_t)n, sizeof *h->sub.t, "split", err) : NULL;
    if (!h->sub.t) return KV_EFAIL;
    rc = heldout_split(&h->all, a->split, a->split_seed, h->train, &h->n_train, h->test_i, &h->n_test, err);
    for (int i = 0; !rc && i < h->n_train; i++) h->train_ids[i] = h->all.t[h->train[i]].id;
    for (int i = 0; !rc && i < h->n_test; i++) h->sub.t[i] = h->all.t[h->test_i[i]];
    h->sub.n = h->n_test, h->sub.index = h->all.index, h->test = &h->sub;
    in->only = h->train_ids, in->n_only = h->n_train;
    return rc;
}

static void heldout_free(heldout_set *h)
{
    free(h->sub.t), free(h->train_ids), free(h->train), free(h->test_i);
    study_set_free(&h->all);
}

static int write_split(const char *dir, const fit_args *a, const heldout_set *h, kv_err *err)
{
    FILE *f = csv_create(dir, "split.json", NULL, err);
    if (!f) return KV_EFAIL;
    fprintf(f, "{\"study\": \"%s\", \"split\": %.17g, \"seed\": %llu, \"train\": [", a->study, a->split,
            (unsigned long long)a->split_seed);
    for (int i = 0; i < h->n_train; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", h->all.t[h->train[i]].id);
    fprintf(f, "], \"test\": [");
    for (int i = 0; i < h->n_test; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", h->all.t[h->test_i[i]].id);
    fprintf(f, "]}\n");
    return csv_close(f, "split.json", err);
}

static int heldout(const fit_args *a, const fit_input *in, const heldout_set *h, const char *expr, const char *dir,
                   kv_err *err)
{
    char what[512];
    if (a->study)
        snprintf(what, sizeof what, "the study `%s` split by prompt (seed %llu, share %g): %d training prompt(s), %d test "
                 "(split.json)", a->study, (unsigned long long)a->split_seed, a->split, h->n_train, h->n_test);
    else snprintf(what, sizeof what, "trained on %lld rows of %d feature file(s), tested on %s", (long long)in->n_rows,
                  in->n_files, a->test);
    const heldout_opts o = {.definition = expr, .name = a->name, .baselines = a->baselines, .budgets = a->budgets,
                            .n_budgets = a->n_budgets, .chunk = a->chunk, .test = h->test,
                            .train_model = in->model[0], .train_what = what, .threads = a->threads,
                            .mixed_models = a->mixed_models};
    int rc = a->study ? write_split(dir, a, h, err) : KV_OK;
    return rc ? rc : heldout_run(&o, dir, err);
}

/* Fitted and checked first; then DIR is written whole. */
static int fit_and_write(fit_args *a, const char *const *files, int n, const char *command, kv_err *err)
{
    fit_input *in = kv_calloc(1, sizeof *in, "fit input", err);
    if (!in) return KV_EFAIL;
    const fit_opts o = {.objective = (fit_objective)a->objective, .target = (fit_target)a->target,
                        .lambda = a->lambda, .seed = a->seed, .pairs = a->pairs, .max_iter = a->max_iter};
    fit_result r;
    heldout_set h = {0};
    int rc = resolve_test(a, in, &h, err);
    if (!rc) rc = fit_input_open(in, files, n, a->features, err);
    if (!rc) rc = outfile_check_inputs(a->output, files, n, err);
    if (!rc) rc = fit_run(in, &o, &r, err);
    char expr[FIT_EXPR_MAX];
    if (!rc) rc = fit_expression(in, &r, a->name, expr, sizeof expr, err);   /* a bad --name before DIR */
    kv_outfile out = {.slot = -1};
    if (!rc) rc = outdir_begin(&out, a->output, a->force, err);
    if (!rc) {
        const fit_out fo = {.name = a->name, .command = command, .opts = &o};
        rc = fit_write(out.tmp_path, in, &r, &fo, err);
        if (!rc && a->scores) rc = fit_write_scores(out.tmp_path, in, &r, err);
        if (!rc && h.test) rc = heldout(a, in, &h, expr, out.tmp_path, err);
        if (!rc) rc = outdir_commit(&out, err);
        if (rc) outdir_abort(&out);
    }
    if (!rc)
        printf("%s: %s, %lld rows, %lld steps, loss %.6g, recall %.4f%s\n%s\n", a->output,
               fit_objective_name(o.objective), (long long)r.n_rows, (long long)r.n_steps, r.loss, r.recall,
               r.converged ? "" : " (not converged)", expr);
    heldout_free(&h);
    free(in);
    return rc;
}

int fit_main(int argc, char **argv)
{
    fit_args a = {.target = -1, .lambda = NAN, .split = NAN, .pairs = 64, .max_iter = 50};
    kv_err err = {0};
    int first = argc;
    char *command = cli_command_line(argc, argv);   /* the words as typed, before getopt permutes them */
    int rc = command ? cli_opts_parse("fit", argc, argv, OPTIONS, &a, &a.help, &first, &err)
                     : kv_fail(&err, KV_EFAIL, "out of memory");
    if (!rc && a.help) {
        fputs(USAGE, stdout);
        free(command);
        return 0;
    }
    if (!rc) rc = check_args(&a, argc - first, &err);
    if (!rc) rc = fit_and_write(&a, (const char *const *)argv + first, argc - first, command, &err);
    free(command);
    return cli_exit(rc, &err);
}
