/* `kvtrace analyze`: command line of the analysis. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/analyze.h"
#include "analysis/head_importance.h"
#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "provenance/provenance.h"
#include "results/results_dir.h"
#include "study/study.h"

static const char USAGE[] =
    "usage: kvtrace analyze trace.h5 [--results DIR] [--detail LAYER,HEAD] [options] -o OUTDIR\n"
    "       kvtrace analyze TRACES --results DIR [options] -o OUTDIR\n"
    "\n"
    "Measures what the KeyDiff and PrimeKV papers measure and writes the analysis\n"
    "directory `kvtrace plot` reads (every column: docs/outputs.md; formulas: docs/analyze.md):\n"
    "  spearman.csv  rho between key distinctiveness and attention per (layer, query head)\n"
    "                (needs /attention/colsum: without it only the header, and a warning)\n"
    "  logdet.csv    log det of the row-normalised keys' Gram matrix: full cache, and each run's\n"
    "                final cache recomputed from the trace keys\n"
    "  pca.csv, pca_var.csv\n"
    "                every key on its head's top two principal axes, and their variances\n"
    "  pca_kept.csv  the kept positions of each run's final cache, one row each\n"
    "  detail.csv    cosines of the first 64 keys and attention of the first 64 queries\n"
    "  budgets.csv   each run's rows kept per (layer, kv head): at the end, and the mean over steps\n"
    "  head_importance.csv\n"
    "                per (layer, kv head): the attention share outside the sinks and the recent window\n"
    "                (score), and the mean top attention weight (concentration); `sim --head-scores`\n"
    "                reads it (needs /queries: without them only the header, and a warning)\n"
    "  meta.csv, and copies of the results' summary.csv, timing.csv and results.csv\n"
    "  provenance.json  the command, the trace and results.h5 (path, size, sha256), the commands\n"
    "                that made them (docs/provenance.md)\n"
    "\n"
    "A study (TRACES: several trace files, a directory holding index.jsonl, or the index, as\n"
    "`kvtrace sim` takes them; or one trace whose --results swept --chunks): each trace's and\n"
    "chunk's analysis in OUTDIR/traces/ID/chunkB/, the means over traces with 95%% bootstrap\n"
    "intervals in study_spearman.csv and study_logdet.csv, and copies of sim's summary.csv,\n"
    "summary_by_trace.csv, timing.csv and results.csv (docs/analyze.md).\n"
    "\n"
    "  --results DIR        a `kvtrace sim` output directory (results.h5) of this trace; repeat it to\n"
    "                       merge runs of other configurations over the same trace (the same run in\n"
    "                       two directories cannot be merged: exit 3)\n"
    "  --detail L,H         the (layer, query head) of detail.csv (default: median rho)\n"
    "  --sinks S            head_importance.csv: the first S keys are sinks (default 4)\n"
    "  --recent W           head_importance.csv: the W most recent keys are the window (default 64)\n"
    "  --threads N          worker threads (default: one per CPU); outputs do not depend on it\n"
    "  --baseline CONFIG[@ALLOCATOR]\n"
    "                       paired.csv: every configuration minus this one (a config label, or a policy\n"
    "                       with one configuration; allocator default uniform) at the same budget and\n"
    "                       chunk, paired over traces, with 95%% bootstrap intervals (needs one --results)\n"
    "  --fidelity DIR       fidelity_join.csv: a `kvtrace fidelity --prompts` directory's in-model measures\n"
    "                       (KL, the answer's log-probability, exact match) beside sim's per trace, joined\n"
    "                       on (trace, config, allocator, budget, chunk) (needs one --results)\n"
    "  -o, --output OUTDIR  output directory (required; refused if it exists, unless --force)\n"
    "  --timestamp          record the time in provenance.json (SOURCE_DATE_EPOCH, when set, gives it;\n"
    "                       otherwise no time is recorded)\n"
    "  --force, --quiet, -h/--help\n";

/* What the command line fills. */
enum { MAX_RESULTS = 64 };

typedef struct {
    analyze_opts o;
    bool timestamp;
    const char *results[MAX_RESULTS];   /* every --results, in the order given */
} analyze_args;

/* --results DIR, repeatable: the directories are merged (analyze.c, read_results). */
static int parse_results(const char *verb, const char *dir, void *args, kv_err *err)
{
    analyze_args *a = args;
    if (a->o.n_results == MAX_RESULTS) return cli_usage(err, verb, "--results is given more than %d times", MAX_RESULTS);
    for (int i = 0; i < a->o.n_results; i++)
        if (strcmp(a->results[i], dir) == 0)
            return cli_usage(err, verb, "--results names %s twice: its runs cannot be merged with themselves", dir);
    a->results[a->o.n_results++] = dir;
    a->o.results = a->results[0], a->o.results_dirs = a->results;
    return KV_OK;
}

/* "LAYER,HEAD": two non-negative integers (their upper bounds come from the trace). */
static int parse_detail(const char *verb, const char *s, void *opts, kv_err *err)
{
    analyze_opts *o = &((analyze_args *)opts)->o;
    cli_list l;
    int rc = cli_list_split(verb, "--detail", s, 2, &l, err);
    if (!rc && l.n != 2) return cli_usage(err, verb, "--detail wants LAYER,HEAD, got '%s'", s);
    if (!rc) rc = cli_parse_i64(verb, "--detail LAYER", l.item[0], 0, 1 << 20, &o->detail_layer, err);
    if (!rc) rc = cli_parse_i64(verb, "--detail HEAD", l.item[1], 0, 1 << 20, &o->detail_head, err);
    return rc;
}

static const cli_opt OPTIONS[] = {
    {.name = "results", .kind = CLI_CUSTOM, .many = CLI_EACH, .parse = parse_results},
    {.name = "detail", .kind = CLI_CUSTOM, .parse = parse_detail},
    {CLI_ROW("threads", CLI_INT, analyze_args, o.threads), .lo = 1, .hi = 256},
    {CLI_ROW("sinks", CLI_I64, analyze_args, o.sinks), .lo = 0, .hi = 1 << 28},
    {CLI_ROW("recent", CLI_I64, analyze_args, o.recent), .lo = 1, .hi = 1 << 28},
    {CLI_ROW("baseline", CLI_TEXT, analyze_args, o.baseline)},
    {CLI_ROW("fidelity", CLI_TEXT, analyze_args, o.fidelity)},
    {CLI_ROW("output", CLI_TEXT, analyze_args, o.output)},
    {CLI_ROW("force", CLI_FLAG, analyze_args, o.force)},
    {CLI_ROW("quiet", CLI_FLAG, analyze_args, o.quiet)},
    {CLI_ROW("timestamp", CLI_FLAG, analyze_args, timestamp)},
    {0},
};

/* The record of the analysis: the command, the trace and results.h5 (each
 * hashed when it can be read; analyze_run says what is wrong with one that
 * cannot), and the commands that made them. */
static int provenance(prov_record *p, const analyze_opts *o, const study_set *s, bool timestamp, kv_err *err)
{
    int rc = prov_set_time(p, timestamp, err);
    if (!rc && s->index) rc = prov_add_file(p, "index", s->index, NULL, err);
    for (int i = 0; !rc && i < s->n; i++) rc = prov_add_trace(p, s->t[i].path, err);
    for (int i = 0; !rc && i < o->n_results; i++) {
        char h5[4200];
        snprintf(h5, sizeof h5, "%s/" RESULTS_FILE_H5, o->results_dirs[i]);
        if (access(h5, R_OK) == 0) rc = prov_add_file(p, "results", h5, NULL, err);
        if (!rc) rc = prov_add_upstream_dir(p, o->results_dirs[i], err);
    }
    if (!rc && o->fidelity) {   /* the files joined, hashed when readable (analyze_fidelity_join says what is wrong) */
        static const char *const FILES[] = {"fidelity.csv", "answer.csv"};
        for (int i = 0; !rc && i < 2; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", o->fidelity, FILES[i]);
            if (access(path, R_OK) == 0) rc = prov_add_file(p, "fidelity", path, NULL, err);
        }
        if (!rc) rc = prov_add_upstream_dir(p, o->fidelity, err);
    }
    return rc;
}

int analyze_main(int argc, char **argv)
{
    kv_err err = {0};
    analyze_args a = {.o = {.detail_layer = -1, .detail_head = -1, .sinks = HEAD_IMP_SINKS,
                            .recent = HEAD_IMP_RECENT}};
    analyze_opts *o = &a.o;
    const char *v = "analyze";
    bool help = false;
    prov_record prov;
    int rc = prov_begin(&prov, argc, argv, &err); /* the words as typed, before getopt permutes them */
    if (rc) return cli_exit(rc, &err);
    int first;
    rc = cli_opts_parse(v, argc, argv, OPTIONS, &a, &help, &first, &err);
    if (!rc && help) {
        fputs(USAGE, stdout);
        prov_free(&prov);
        return 0;
    }
    if (!rc && first >= argc) rc = cli_usage(&err, v, "missing trace.h5");
    if (!rc && !o->output) rc = cli_usage(&err, v, "-o OUTDIR is required");
    if (!rc && o->baseline && o->n_results != 1)
        rc = cli_usage(&err, v, "--baseline needs exactly one --results directory (its summary_by_trace.csv is paired)");
    if (!rc && o->fidelity && o->n_results != 1)
        rc = cli_usage(&err, v, "--fidelity needs exactly one --results directory (its summary_by_trace.csv is joined)");
    study_set set = {0};
    bool study = false;
    if (!rc) rc = study_set_resolve(v, argv + first, argc - first, &set, &err);
    if (!rc) {
        o->trace = set.t[0].path;
        study = set.n > 1 || set.index;
        rc = provenance(&prov, o, &set, a.timestamp, &err);
    }
    for (int i = 0; !rc && !study && i < o->n_results; i++) { /* a --chunks or study run: analyze_study_run's */
        rc = analyze_results_is_study(o->results_dirs[i], &study, &err);
        if (!rc && study && o->n_results > 1)
            rc = cli_usage(&err, v, "--results %s holds several traces or chunk sizes: a study's analysis takes one "
                           "--results directory", o->results_dirs[i]);
    }
    if (!rc) {
        o->prov = &prov;
        rc = study ? analyze_study_run(o, &set, &err) : analyze_run(o, &err);
    }
    study_set_free(&set);
    prov_free(&prov);
    return cli_exit(rc, &err);
}
