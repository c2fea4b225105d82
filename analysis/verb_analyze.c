/* `kvtrace analyze`: command line of the analysis. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analyze.h"
#include "core/cli_args.h"
#include "core/cli_opts.h"

static const char USAGE[] =
    "usage: kvtrace analyze trace.h5 [--results DIR] [--detail LAYER,HEAD] [options] -o OUTDIR\n"
    "\n"
    "Measures what the KeyDiff and PrimeKV papers measure (SPEC §7) and writes the analysis\n"
    "directory `kvtrace plot` reads (docs/analysis_dir.md, docs/analyze.md):\n"
    "  spearman.csv  rho between key distinctiveness and attention per (layer, query head)\n"
    "                (needs /attention/colsum: without it only the header, and a warning)\n"
    "  logdet.csv    log det of the row-normalised keys' Gram matrix: full cache, and each run's\n"
    "                final cache recomputed from the trace keys\n"
    "  pca.csv, pca_var.csv, pca_runs.csv\n"
    "                keys on their top two principal axes, kept (1) or evicted (0) per run\n"
    "  detail.csv    cosines of the first 64 keys and attention of the first 64 queries\n"
    "  meta.csv, and copies of the results' summary.csv, timing.csv and results.csv\n"
    "\n"
    "  --results DIR        a `kvtrace sim` output directory (results.h5) of this trace\n"
    "  --detail L,H         the (layer, query head) of detail.csv (default: median rho)\n"
    "  --threads N          worker threads (default: one per CPU); outputs do not depend on it\n"
    "  -o, --output OUTDIR  output directory (required; refused if it exists, unless --force)\n"
    "  --force, --quiet, -h/--help\n";

/* "LAYER,HEAD": two non-negative integers (their upper bounds come from the trace). */
static int parse_detail(const char *verb, const char *s, void *opts, kv_err *err)
{
    analyze_opts *o = opts;
    char buf[64];
    const char *comma = strchr(s, ',');
    if (!comma || (size_t)(comma - s) >= sizeof buf)
        return cli_usage(err, verb, "--detail wants LAYER,HEAD, got '%s'", s);
    memcpy(buf, s, (size_t)(comma - s));
    buf[comma - s] = '\0';
    int rc = cli_parse_i64(verb, "--detail LAYER", buf, 0, 1 << 20, &o->detail_layer, err);
    if (!rc) rc = cli_parse_i64(verb, "--detail HEAD", comma + 1, 0, 1 << 20, &o->detail_head, err);
    return rc;
}

static const cli_opt OPTIONS[] = {
    {CLI_ROW("results", CLI_TEXT, analyze_opts, results)},
    {.name = "detail", .kind = CLI_CUSTOM, .parse = parse_detail},
    {CLI_ROW("threads", CLI_INT, analyze_opts, threads), .lo = 1, .hi = 256},
    {CLI_ROW("output", CLI_TEXT, analyze_opts, output)},
    {CLI_ROW("force", CLI_FLAG, analyze_opts, force)},
    {CLI_ROW("quiet", CLI_FLAG, analyze_opts, quiet)},
    {0},
};

int analyze_main(int argc, char **argv)
{
    kv_err err = {0};
    analyze_opts o = {.detail_layer = -1, .detail_head = -1};
    const char *v = "analyze";
    bool help = false;
    int first;
    int rc = cli_opts_parse(v, argc, argv, OPTIONS, &o, &help, &first, &err);
    if (!rc && help) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!rc && first + 1 != argc)
        rc = cli_usage(&err, v, first >= argc ? "missing trace.h5" : "expects exactly one trace");
    if (!rc && !o.output) rc = cli_usage(&err, v, "-o OUTDIR is required");
    char *command = rc ? NULL : cli_command_line(argc, argv);
    if (!rc && !command) rc = kv_fail(&err, KV_EFAIL, "analyze: out of memory");
    if (!rc) {
        o.trace = argv[first];
        o.command = command;
        rc = analyze_run(&o, &err);
    }
    free(command);
    return rc ? cli_report(&err) : 0;
}
