/* `kvtrace features`: the command line of search/features.h (docs/features.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "expr/expr.h"
#include "policies/sets.h"
#include "provenance/provenance.h"
#include "userpol/user_policies.h"
#include "search/features.h"

static const char USAGE[] =
    "usage: kvtrace features TRACES -o FILE.h5 [options]\n"
    "\n"
    "TRACES: one trace.h5, several, a directory holding index.jsonl or the index file (as sim).\n"
    "Replays each trace like `kvtrace sim` at one budget and chunk with the cache driven by one\n"
    "policy, and writes for every eviction step and every candidate the feature vector (the\n"
    "features of score expressions, computed by the same code) and the targets: future_attn\n"
    "(the future attention mass it receives: the oracle's score), oracle_keep (the oracle keeps\n"
    "it), age (now - position). HDF5, one group per trace (docs/features.md), or --csv.\n"
    "\n"
    "  --policy P              the policy driving the cache (default oracle): any policy,\n"
    "                          alias, --define'd expression or plug-in policy (docs/features.md says\n"
    "                          why it matters: on-policy data)\n"
    "  --budget N              cache size per (layer, kv head) (default 64)\n"
    "  --chunk C               prefill chunk (default 16); decode tokens arrive one at a time\n"
    "  --features LIST         comma-separated features, each name or name(args) as in an expression\n"
    "                          (default: every feature but future_attn; kvtrace policies --features)\n"
    "  --sample-steps F        keep a seeded fraction F in (0, 1] of the eviction steps (whole steps)\n"
    "  --sample-candidates F   keep a seeded fraction F in (0, 1] of each step's candidates\n"
    "  --seed S                the sampling's seed (default 0)\n"
    "  --csv                   write FILE as CSV (small runs: pandas reads it directly)\n"
    "  --mixed-models          the traces may be of different models or shapes (refused otherwise, as in sim)\n"
    "  --threads K             worker threads (default: one per CPU); the file does not depend on it\n"
    "  --alias NAME=SPEC, --define 'NAME = EXPR', --defines FILE, --plugin FILE.so|FILE.py\n"
    "                          as in sim\n"
    "  -o, --output FILE       the output (required)\n"
    "  --force, --quiet, -h/--help\n";

typedef struct {
    feat_opts o;
    bool help;
    const char *policy, *features;
    double steps, cands;
    policy_config driver;
    user_policies user;           /* --alias, --plugin, --define, --defines (userpol/) */
    study_set set;
} feat_args;

static const cli_opt OPTIONS[] = {
    {CLI_ROW("policy", CLI_TEXT, feat_args, policy)},
    {CLI_ROW("features", CLI_TEXT, feat_args, features)},
    USER_POLICY_OPTIONS(feat_args, user),
    {CLI_ROW("budget", CLI_I64, feat_args, o.budget), .lo = 1, .hi = (double)(1 << 30)},
    {CLI_ROW("chunk", CLI_I64, feat_args, o.chunk), .lo = 1, .hi = 1 << 30},
    {CLI_ROW("sample-steps", CLI_F64, feat_args, steps), .lo = 1e-12, .hi = 1},
    {CLI_ROW("sample-candidates", CLI_F64, feat_args, cands), .lo = 1e-12, .hi = 1},
    {CLI_ROW("seed", CLI_U64, feat_args, o.seed)},
    {CLI_ROW("csv", CLI_FLAG, feat_args, o.csv)},
    {CLI_ROW("mixed-models", CLI_FLAG, feat_args, o.mixed_models)},
    {CLI_ROW("threads", CLI_INT, feat_args, o.threads), .lo = 1, .hi = 256},
    {CLI_ROW("output", CLI_TEXT, feat_args, o.output)},
    {CLI_ROW("force", CLI_FLAG, feat_args, o.force)},
    {CLI_ROW("quiet", CLI_FLAG, feat_args, o.quiet)},
    {0},
};

/* The driver's configuration and the text recorded for it (an expression's definition, else its name). */
static int driver(feat_args *a, kv_err *err)
{
    int rc = user_policies_ready(&a->user, err);
    if (!rc) rc = policy_parse_in(&a->user.aliases, a->policy ? a->policy : POLICY_SET_FUTURE, &a->driver, err);
    if (rc) return rc;
    const char *def = expr_definition(a->driver.iface);
    a->o.driver = &a->driver;
    a->o.driver_text = def ? def : a->policy ? a->policy : POLICY_SET_FUTURE;
    return KV_OK;
}

static int verb(int argc, char **argv, feat_args *a)
{
    kv_err err = {0};
    const char *v = "features";
    a->o.budget = 64, a->o.chunk = 16, a->steps = 1.0, a->cands = 1.0;
    prov_record prov;
    int rc = prov_begin(&prov, argc, argv, &err);   /* the command as typed, for the file's `command` */
    if (rc) return cli_exit(rc, &err);
    int first;
    rc = cli_opts_parse(v, argc, argv, OPTIONS, a, &a->help, &first, &err);
    if (!rc && a->help) {
        fputs(USAGE, stdout);
        prov_free(&prov);
        return 0;
    }
    if (!rc) rc = driver(a, &err);
    if (!rc && a->features) rc = feat_cols_parse(a->features, &a->o.cols, &err);
    else if (!rc) feat_cols_default(&a->o.cols);
    if (!rc && first >= argc) rc = cli_usage(&err, v, "missing trace.h5 (or the traces of a study)");
    if (!rc && !a->o.output) rc = cli_usage(&err, v, "-o FILE is required");
    if (!rc) rc = study_set_resolve(v, argv + first, argc - first, &a->set, &err);
    if (!rc) rc = prov_set_time(&prov, false, &err);   /* SOURCE_DATE_EPOCH only */
    if (!rc && a->set.index) rc = prov_add_file(&prov, "index", a->set.index, NULL, &err);
    for (int i = 0; !rc && i < a->set.n; i++) rc = prov_add_trace(&prov, a->set.t[i].path, &err);
    if (!rc) {
        a->o.set = &a->set, a->o.sample_steps = a->steps, a->o.sample_candidates = a->cands;
        a->o.command = prov.command, a->o.prov = &prov;
        rc = feat_run(&a->o, &err);
    }
    study_set_free(&a->set);
    prov_free(&prov);
    return cli_exit(rc, &err);
}

int features_main(int argc, char **argv)
{
    kv_err err = {0};
    feat_args *a = kv_calloc(1, sizeof *a, "features: options", &err);
    int status = a ? verb(argc, argv, a) : cli_report(&err);
    if (a) user_policies_close(&a->user);
    free(a);
    return status;
}
