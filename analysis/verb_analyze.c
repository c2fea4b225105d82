/* `kvtrace analyze`: command line of the analysis. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analyze.h"
#include "core/cli_args.h"

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
    "  meta.csv, and copies of the results' summary.csv and timing.csv\n"
    "\n"
    "  --results DIR        a `kvtrace sim` output directory (results.h5) of this trace\n"
    "  --detail L,H         the (layer, query head) of detail.csv (default: median rho)\n"
    "  --threads N          worker threads (default: one per CPU); outputs do not depend on it\n"
    "  -o, --output OUTDIR  output directory (required; refused if it exists, unless --force)\n"
    "  --force, --quiet, -h/--help\n";

enum { OPT_RESULTS = 256, OPT_DETAIL, OPT_THREADS, OPT_FORCE, OPT_QUIET };

static const struct option OPTIONS[] = {
    {"results", required_argument, NULL, OPT_RESULTS}, {"detail", required_argument, NULL, OPT_DETAIL},
    {"threads", required_argument, NULL, OPT_THREADS}, {"output", required_argument, NULL, 'o'},
    {"force", no_argument, NULL, OPT_FORCE},           {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, 'h'},                  {NULL, 0, NULL, 0},
};

/* "LAYER,HEAD": two non-negative integers (their upper bounds come from the trace). */
static int parse_detail(const char *s, analyze_opts *o, kv_err *err)
{
    char buf[64];
    const char *comma = strchr(s, ',');
    if (!comma || (size_t)(comma - s) >= sizeof buf)
        return cli_usage(err, "analyze", "--detail wants LAYER,HEAD, got '%s'", s);
    memcpy(buf, s, (size_t)(comma - s));
    buf[comma - s] = '\0';
    int rc = cli_parse_i64("analyze", "--detail LAYER", buf, 0, 1 << 20, &o->detail_layer, err);
    if (!rc) rc = cli_parse_i64("analyze", "--detail HEAD", comma + 1, 0, 1 << 20, &o->detail_head, err);
    return rc;
}

int analyze_main(int argc, char **argv)
{
    kv_err err = {0};
    analyze_opts o = {.detail_layer = -1, .detail_head = -1};
    const char *v = "analyze";
    bool help = false;
    int64_t threads = 0;
    optind = 1;
    opterr = 0;
    int c, rc = KV_OK;
    while (!rc && (c = getopt_long(argc, argv, ":o:h", OPTIONS, NULL)) != -1) {
        switch (c) {
        case OPT_RESULTS: o.results = optarg; break;
        case OPT_DETAIL: rc = parse_detail(optarg, &o, &err); break;
        case OPT_THREADS: rc = cli_parse_i64(v, "--threads", optarg, 1, 256, &threads, &err); break;
        case 'o': o.output = optarg; break;
        case OPT_FORCE: o.force = true; break;
        case OPT_QUIET: o.quiet = true; break;
        case 'h': help = true; break;
        default: rc = cli_bad_option(&err, v, c, optopt, argv[optind - 1]); break;
        }
    }
    if (!rc && help) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!rc && optind + 1 != argc)
        rc = cli_usage(&err, v, optind >= argc ? "missing trace.h5" : "expects exactly one trace");
    if (!rc && !o.output) rc = cli_usage(&err, v, "-o OUTDIR is required");
    char *command = rc ? NULL : cli_command_line(argc, argv);
    if (!rc && !command) rc = kv_fail(&err, KV_EFAIL, "analyze: out of memory");
    if (!rc) {
        o.trace = argv[optind];
        o.command = command;
        o.threads = (int)threads;
        rc = analyze_run(&o, &err);
    }
    free(command);
    return rc ? cli_report(&err) : 0;
}
