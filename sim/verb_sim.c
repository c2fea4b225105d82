/* `kvtrace sim`: command line of the replay engine. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "sim/sim.h"

static const char USAGE[] =
    "usage: kvtrace sim trace.h5 --policies LIST --budgets LIST --chunk B [options] -o DIR\n"
    "\n"
    "Replays chunked eviction over a trace for every (policy x budget) (SPEC §4): per layer and\n"
    "kv head, the prompt arrives in chunks of B and the rest in chunks of --decode-chunk; the\n"
    "chunk's queries attend to the cache plus the chunk (measured against the full cache), then\n"
    "the policy keeps N. Writes results.csv, summary.csv, timing.csv and results.h5 to DIR.\n"
    "\n"
    "  --policies LIST      comma-separated policies, each name[:key=value...] (kvtrace policies)\n"
    "  --budgets LIST       comma-separated cache sizes N >= 1\n"
    "  --chunk B            prefill chunk (required)\n"
    "  --decode-chunk C     chunk after prompt_len (default 1)\n"
    "  --eval-stride S      measure only queries at positions i = 0 mod S (default 1)\n"
    "  --threads N          worker threads (default: one per CPU); results do not depend on it\n"
    "  -o, --output DIR     output directory (required)\n"
    "  --force, --quiet, -h/--help\n";

enum { OPT_POLICIES = 256, OPT_BUDGETS, OPT_CHUNK, OPT_DECODE, OPT_STRIDE, OPT_THREADS, OPT_FORCE, OPT_QUIET };

static const struct option OPTIONS[] = {
    {"policies", required_argument, NULL, OPT_POLICIES}, {"budgets", required_argument, NULL, OPT_BUDGETS},
    {"chunk", required_argument, NULL, OPT_CHUNK},       {"decode-chunk", required_argument, NULL, OPT_DECODE},
    {"eval-stride", required_argument, NULL, OPT_STRIDE}, {"threads", required_argument, NULL, OPT_THREADS},
    {"output", required_argument, NULL, 'o'},            {"force", no_argument, NULL, OPT_FORCE},
    {"quiet", no_argument, NULL, OPT_QUIET},             {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

enum { MAX_LIST = 256 };

/* The verb, its lists parsed into cfgs[MAX_LIST] and budgets[MAX_LIST]; the exit status. */
static int verb(int argc, char **argv, policy_config *cfgs, int64_t *budgets)
{
    kv_err err = {0};
    sim_opts o = {.decode_chunk = 1, .eval_stride = 1};
    const char *v = "sim";
    bool help = false;
    int64_t threads = 0;
    optind = 1;
    opterr = 0;
    int c, rc = KV_OK;
    while (!rc && (c = getopt_long(argc, argv, ":o:h", OPTIONS, NULL)) != -1) {
        switch (c) {
        case OPT_POLICIES:
            rc = policy_parse_list(v, optarg, cfgs, MAX_LIST, &o.n_policies, &err);
            o.policies = cfgs;
            break;
        case OPT_BUDGETS:
            rc = cli_parse_i64_list(v, "--budgets", optarg, 1, (int64_t)1 << 40, budgets, MAX_LIST, &o.n_budgets, &err);
            o.budgets = budgets;
            break;
        case OPT_CHUNK: rc = cli_parse_i64(v, "--chunk", optarg, 1, (int64_t)1 << 30, &o.chunk, &err); break;
        case OPT_DECODE: rc = cli_parse_i64(v, "--decode-chunk", optarg, 1, (int64_t)1 << 30, &o.decode_chunk, &err); break;
        case OPT_STRIDE: rc = cli_parse_i64(v, "--eval-stride", optarg, 1, (int64_t)1 << 30, &o.eval_stride, &err); break;
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
    if (!rc && !o.n_policies) rc = cli_usage(&err, v, "--policies LIST is required");
    if (!rc && !o.n_budgets) rc = cli_usage(&err, v, "--budgets LIST is required");
    if (!rc && !o.chunk) rc = cli_usage(&err, v, "--chunk B is required");
    if (!rc && !o.output) rc = cli_usage(&err, v, "-o DIR is required");
    if (!rc) {
        o.trace = argv[optind];
        o.threads = (int)threads;
        o.command = cli_command_line(argc, argv);
        rc = o.command ? sim_run(&o, NULL, &err) : kv_fail(&err, KV_EFAIL, "sim: out of memory");
        free((char *)o.command);
    }
    return rc ? cli_report(&err) : 0;
}

int sim_main(int argc, char **argv)
{
    kv_err err = {0};
    policy_config *cfgs = kv_calloc(MAX_LIST, sizeof *cfgs, "sim: policy list", &err);
    int64_t *budgets = kv_calloc(MAX_LIST, sizeof *budgets, "sim: budget list", &err);
    int status = cfgs && budgets ? verb(argc, argv, cfgs, budgets) : cli_report(&err);
    free(cfgs), free(budgets);
    return status;
}
