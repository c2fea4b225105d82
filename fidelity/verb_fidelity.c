/* `kvtrace fidelity`: command line of the in-model vs offline comparison. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_fetch.h"
#include "core/cli_args.h"
#include "fidelity/fidelity.h"

static const char USAGE[] =
    "usage: kvtrace fidelity [--model M] [--prompt TEXT | --prompt-file F | --tokens F] [--generate N]\n"
    "                        [--policies LIST] [--budgets LIST] [--chunk B] [options] -o DIR\n"
    "\n"
    "Eviction inside the model versus offline replay (SPEC §11). On one teacher-forced sequence\n"
    "(the prompt, plus the full model's greedy continuation with --generate) it runs the model\n"
    "once with the full cache and once per (policy x budget) with the policy evicting inside the\n"
    "run (prompt in chunks of B, then one token per step; caches of N + B rows), compares the\n"
    "next-token distributions position by position, replays the full-cache trace with sim for the\n"
    "same configurations, and reports how well offline replay ranks the policies.\n"
    "\n"
    "  --model M            as capture (default: stories260K.gguf)\n"
    "  --tokenizer F        llama2.c tokenizer.bin for a .bin checkpoint\n"
    "  --prompt TEXT, --prompt-file F, --tokens F   the prompt (none: BOS alone)\n"
    "  --generate N         greedy tokens of the full model after the prompt (default 0; 511 when no\n"
    "                       prompt is given)\n"
    "  --policies LIST      in-model policies, name[:key=value...] (default: every policy but full\n"
    "                       and oracle, with default parameters; oracle is offline only)\n"
    "  --budgets LIST       cache budgets N (default 32,64,128)\n"
    "  --chunk B            prefill chunk (default 32)\n"
    "  --threads N          sim's worker threads (default: one per CPU)\n"
    "  -o, --output DIR     output directory (required): fidelity.csv, positions.csv, summary.csv,\n"
    "                       misordered.csv, fidelity.png (+ .gp, .dat), report.html, full.h5, sim/\n"
    "  --force, --quiet, -h/--help\n";

enum { OPT_MODEL = 256, OPT_TOKENIZER, OPT_PROMPT, OPT_PROMPT_FILE, OPT_TOKENS, OPT_GENERATE, OPT_POLICIES,
       OPT_BUDGETS, OPT_CHUNK, OPT_THREADS, OPT_FORCE, OPT_QUIET };

static const struct option OPTIONS[] = {
    {"model", required_argument, NULL, OPT_MODEL},       {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"prompt", required_argument, NULL, OPT_PROMPT},     {"prompt-file", required_argument, NULL, OPT_PROMPT_FILE},
    {"tokens", required_argument, NULL, OPT_TOKENS},     {"generate", required_argument, NULL, OPT_GENERATE},
    {"policies", required_argument, NULL, OPT_POLICIES}, {"budgets", required_argument, NULL, OPT_BUDGETS},
    {"chunk", required_argument, NULL, OPT_CHUNK},       {"threads", required_argument, NULL, OPT_THREADS},
    {"output", required_argument, NULL, 'o'},            {"force", no_argument, NULL, OPT_FORCE},
    {"quiet", no_argument, NULL, OPT_QUIET},             {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

enum { MAX_LIST = 64 };

/* Every registered policy that can run in the model and evicts, with its defaults. */
static void default_policies(fidelity_opts *o, policy_config *cfgs)
{
    kv_err err = {0};
    o->n_policies = 0;
    for (const policy_iface *const *p = policy_all(); *p; p++)
        if (!(*p)->offline_only && !(*p)->never_evicts && policy_parse((*p)->name, &cfgs[o->n_policies], &err) == KV_OK)
            o->n_policies++;
}

static int parse_args(int argc, char **argv, fidelity_opts *o, policy_config *cfgs, int64_t *budgets, bool *help,
                      kv_err *err)
{
    const char *v = "fidelity";
    int64_t threads = 0, generate = -1;
    optind = 1;
    opterr = 0;
    int c, rc = KV_OK;
    while (!rc && (c = getopt_long(argc, argv, ":o:h", OPTIONS, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o->seq.model = optarg; break;
        case OPT_TOKENIZER: o->seq.tokenizer = optarg; break;
        case OPT_PROMPT: o->seq.prompt.text = optarg; break;
        case OPT_PROMPT_FILE: o->seq.prompt.text_file = optarg; break;
        case OPT_TOKENS: o->seq.prompt.tokens_file = optarg; break;
        case OPT_GENERATE: rc = cli_parse_i64(v, "--generate", optarg, 0, (int64_t)1 << 24, &generate, err); break;
        case OPT_POLICIES: rc = policy_parse_list(v, optarg, cfgs, MAX_LIST, &o->n_policies, err); break;
        case OPT_BUDGETS:
            rc = cli_parse_i64_list(v, "--budgets", optarg, 1, (int64_t)1 << 30, budgets, MAX_LIST, &o->n_budgets, err);
            break;
        case OPT_CHUNK: rc = cli_parse_i64(v, "--chunk", optarg, 1, (int64_t)1 << 20, &o->seq.chunk, err); break;
        case OPT_THREADS: rc = cli_parse_i64(v, "--threads", optarg, 1, 256, &threads, err); break;
        case 'o': o->output = optarg; break;
        case OPT_FORCE: o->force = true; break;
        case OPT_QUIET: o->quiet = true; break;
        case 'h': *help = true; break;
        default: rc = cli_bad_option(err, v, c, optopt, argv[optind - 1]); break;
        }
    }
    if (rc || *help) return rc;
    if (optind < argc) return cli_usage(err, v, "unexpected argument '%s'", argv[optind]);
    const int sources = prompt_sources(&o->seq.prompt);
    if (sources > 1) return cli_usage(err, v, "give at most one of --prompt, --prompt-file, --tokens");
    if (!o->output) return cli_usage(err, v, "-o DIR is required");
    o->seq.generate = generate >= 0 ? generate : sources ? 0 : 511;
    o->sim_threads = (int)threads;
    for (int p = 0; p < o->n_policies; p++)
        if (cfgs[p].iface->offline_only)
            return cli_usage(err, v, "--policies: %s reads the future, so it is offline only (kvtrace sim)",
                             cfgs[p].iface->name);
    if (!o->n_policies) default_policies(o, cfgs);
    if (!o->n_budgets) budgets[0] = 32, budgets[1] = 64, budgets[2] = 128, o->n_budgets = 3;
    o->policies = cfgs, o->budgets = budgets;
    return KV_OK;
}

/* What the options point into, for the length of the command. */
typedef struct {
    policy_config cfgs[MAX_LIST];
    int64_t budgets[MAX_LIST];
    char model_path[4096];
} fid_args;

int fidelity_main(int argc, char **argv)
{
    kv_err err = {0};
    fidelity_opts o;
    memset(&o, 0, sizeof o);
    o.seq.chunk = 32;
    bool help = false;
    fid_args *a = kv_calloc(1, sizeof *a, "fidelity options", &err);
    int rc = a ? parse_args(argc, argv, &o, a->cfgs, a->budgets, &help, &err) : err.code;
    if (!rc && help) {
        fputs(USAGE, stdout);
        free(a);
        return 0;
    }
    if (!rc && !o.seq.model && !(rc = model_default_path(a->model_path, sizeof a->model_path, true, &err)))
        o.seq.model = a->model_path;
    char *command = rc ? NULL : cli_command_line(argc, argv);
    if (!rc && !command) rc = kv_fail(&err, KV_EFAIL, "fidelity: out of memory");
    o.command = command;
    if (!rc) rc = fidelity_run(&o, &err);
    free(command);
    free(a);
    return rc ? cli_report(&err) : 0;
}
