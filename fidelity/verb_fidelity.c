/* `kvtrace fidelity`: command line of the in-model vs offline comparison. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "model/model_fetch.h"
#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "fidelity/fidelity.h"
#include "userpol/user_policies.h"
#include "expr/expr.h"
#include "core/kv_mpi.h"

static const char USAGE[] =
    "usage: kvtrace fidelity [--model M] [--prompt TEXT | --prompt-file F | --tokens F | --prompts F.jsonl]\n"
    "                        [--generate N]\n"
    "                        [--policies LIST] [--allocators LIST] [--budgets LIST] [--chunk B | --chunks LIST]\n"
    "                        [options] -o DIR\n"
    "\n"
    "Eviction inside the model versus offline replay (docs/fidelity.md). On one teacher-forced sequence\n"
    "(the prompt, plus the full model's greedy continuation with --generate) it runs the model\n"
    "once with the full cache and once per (policy x allocator x budget) with the policy evicting\n"
    "inside the run (prompt in chunks of B, then one token per step; caches of N + B rows under\n"
    "uniform), compares the\n"
    "next-token distributions position by position, replays the full-cache trace with sim for the\n"
    "same configurations, and reports how well offline replay ranks the policies.\n"
    "\n"
    "  --model M            as capture (default: stories260K.gguf)\n"
    "  --tokenizer F        llama2.c tokenizer.bin for a .bin checkpoint\n"
    "  --prompt TEXT, --prompt-file F, --tokens F, --messages F.json   the prompt (none: BOS alone); text\n"
    "                       is encoded with the model's own tokenizer, as capture does, and kept in full.h5\n"
    "                       (/prompt_text)\n"
    PROMPT_CHAT_HELP
    "  --prompts FILE.jsonl the study over every prompt of a prompts file (as capture --prompts; docs/study.md),\n"
    "                       the model loaded once: each prompt's outputs in DIR/ID/, then in DIR fidelity.csv\n"
    "                       (a trace column), answer.csv (the answer's log-probability, full vs evicting run),\n"
    "                       summary.csv (means over prompts, 95% bootstrap intervals) and report.html\n"
    "  --generate N         greedy tokens of the full model after the prompt (default 0; 511 when no\n"
    "                       prompt is given)\n"
    "  --policies LIST      in-model policies, name[:key=value...] (default: every policy but full\n"
    "                       and oracle, with default parameters; oracle is offline only)\n"
    "  --alias NAME=SPEC    a name for one configuration (policy[:key=value...]), usable in --policies\n"
    "                       and as chunkkv's or criticalkv's base=; repeat for more\n"
    "  --plugin FILE.so     load policies and allocators from a plug-in built against kvtrace/policy.h\n"
    "                       (docs/plugins.md), or policies from FILE.py written in Python\n"
    "                       (docs/python-policies.md), usable in --policies, --alias and --allocators\n"
    "                       like a built-in; repeat for more\n"
    "  --define 'NAME = EXPR [; protect = ...]'\n"
    "                       a policy from a score expression (docs/expressions.md), usable in --policies;\n"
    "                       repeat for more (future_attn is refused here: offline only)\n"
    "  --defines FILE       one definition per line ('#' comments)\n"
    "  --allocators LIST    budget allocators, name[:key=value...] (default uniform: each (layer, kv\n"
    "                       head) keeps N); sim replays the full-cache trace under the same ones\n"
    "                       (docs/allocators.md; cake and global evict every layer at each chunk's end)\n"
    "  --head-scores FILE   with headkv or duo in --allocators (required by both): per-(layer, kv head)\n"
    "                       importance, a CSV layer,kv_head,score (kvtrace analyze's head_importance.csv);\n"
    "                       the in-model runs and sim read the same ranking\n"
    "  --budgets LIST       cache budgets N (default 32,64,128)\n"
    "  --chunk B            prefill chunk (default 32)\n"
    "  --chunks LIST        comma-separated prefill chunks, swept like budgets as sim --chunks does (instead of\n"
    "                       --chunk): every configuration at each chunk, compared within each budget and chunk\n"
    "  --allow-beyond-context  run past the model's trained context (as capture: RoPE angles never\n"
    "                       trained; without it exit 2)\n"
    "  --threads N          threads of the model runs and of sim (default: one per CPU); results do not depend on it\n"
    "  -o, --output DIR     output directory (required): fidelity.csv, positions.csv, summary.csv,\n"
    "                       misordered.csv, fidelity.png (+ .gp, .dat), report.html, full.h5, sim/\n"
    "  --timestamp          record the time in provenance.json (SOURCE_DATE_EPOCH, when set, gives it;\n"
    "                       otherwise no time is recorded, docs/provenance.md)\n"
    "  --force, --quiet, -h/--help\n";

enum { MAX_LIST = 64 };

/* What the command line fills: the options, and what they point into. */
typedef struct {
    fidelity_opts o;
    int64_t generate;        /* -1: not given */
    bool help, timestamp;
    policy_config cfgs[MAX_LIST];
    alloc_config allocs[MAX_LIST];
    int64_t budgets[MAX_LIST];
    int64_t chunks[MAX_LIST];     /* --chunks, or --chunk alone */
    char model_path[4096];
    user_policies user;           /* --alias, --plugin, --define, --defines (userpol/) */
    cli_join_space join;          /* the repeated list options' joined text */
    const char *policies;     /* --policies, parsed once every --alias is known */
    const char *allocators;   /* --allocators, parsed once every --plugin is loaded */
} fid_args;

static int parse_policies(const char *verb, const char *arg, void *args, kv_err *err)
{
    (void)verb;
    (void)err;
    ((fid_args *)args)->policies = arg;
    return KV_OK;
}

static int parse_allocators(const char *verb, const char *arg, void *args, kv_err *err)
{
    (void)verb;
    (void)err;
    ((fid_args *)args)->allocators = arg;
    return KV_OK;
}

static int parse_budgets(const char *verb, const char *arg, void *args, kv_err *err)
{
    fid_args *a = args;
    return cli_parse_budgets(verb, "--budgets", arg, MAX_LIST, a->budgets, NULL, &a->o.n_budgets, err);
}

/* --chunks LIST: prefill chunks swept like budgets, each once. */
static int parse_chunks(const char *verb, const char *arg, void *args, kv_err *err)
{
    fid_args *a = args;
    return cli_parse_i64_list(verb, "--chunks", arg, 1, 1 << 20, a->chunks, MAX_LIST, &a->o.n_chunks, err);
}

static const cli_opt OPTIONS[] = {
    {CLI_ROW("model", CLI_TEXT, fid_args, o.seq.model)},
    {CLI_ROW("tokenizer", CLI_TEXT, fid_args, o.seq.tokenizer)},
    {CLI_ROW("prompt", CLI_TEXT, fid_args, o.seq.prompt.text)},
    {CLI_ROW("prompt-file", CLI_TEXT, fid_args, o.seq.prompt.text_file)},
    {CLI_ROW("tokens", CLI_TEXT, fid_args, o.seq.prompt.tokens_file)},
    PROMPT_CHAT_OPTIONS(fid_args, o.seq.prompt),
    {CLI_ROW("prompts", CLI_TEXT, fid_args, o.prompts)},
    {CLI_ROW("generate", CLI_I64, fid_args, generate), .lo = 0, .hi = 1 << 24},
    {.name = "policies", .kind = CLI_CUSTOM, CLI_JOINED(fid_args, join), .parse = parse_policies},
    USER_POLICY_OPTIONS(fid_args, user),
    {.name = "allocators", .kind = CLI_CUSTOM, CLI_JOINED(fid_args, join), .parse = parse_allocators},
    {.name = "budgets", .kind = CLI_CUSTOM, CLI_JOINED(fid_args, join), .parse = parse_budgets},
    {CLI_ROW("chunk", CLI_I64, fid_args, o.seq.chunk), .lo = 1, .hi = 1 << 20},
    {.name = "chunks", .kind = CLI_CUSTOM, CLI_JOINED(fid_args, join), .parse = parse_chunks},
    {CLI_ROW("head-scores", CLI_TEXT, fid_args, o.head_scores)},
    {CLI_ROW("allow-beyond-context", CLI_FLAG, fid_args, o.seq.beyond_context)},
    {CLI_ROW("threads", CLI_INT, fid_args, o.sim_threads), .lo = 1, .hi = 256},
    {CLI_ROW("output", CLI_TEXT, fid_args, o.output)},
    {CLI_ROW("force", CLI_FLAG, fid_args, o.force)},
    {CLI_ROW("quiet", CLI_FLAG, fid_args, o.quiet)},
    {CLI_ROW("timestamp", CLI_FLAG, fid_args, timestamp)},
    {0},
};

/* Every registered policy that can run in the model and evicts, with its defaults. */
static void default_policies(fidelity_opts *o, policy_config *cfgs)
{
    kv_err err = {0};
    o->n_policies = 0;
    for (const policy_iface *const *p = policy_all(); *p; p++)
        if (policy_parse((*p)->name, &cfgs[o->n_policies], &err) == KV_OK && plan_evicts(&cfgs[o->n_policies]) &&
            !plan_policy_inputs(&cfgs[o->n_policies]).future)
            o->n_policies++;
}

/* --head-scores goes with an allocator that reads it, and one that needs it gets it: the in-model
 * runs go along with the full run, so there is no full-cache ranking before them. */
static int check_head_scores(const fidelity_opts *o, kv_err *err)
{
    return plan_check_head_scores(o->allocators, o->n_allocators, o->head_scores != NULL, false, "fidelity",
                                  "--allocators", err);
}

static int parse_args(int argc, char **argv, fid_args *a, kv_err *err)
{
    const char *v = "fidelity";
    fidelity_opts *o = &a->o;
    a->generate = -1;
    int first;
    int rc = cli_opts_parse(v, argc, argv, OPTIONS, a, &a->help, &first, err);
    if (rc || a->help) return rc;
    if ((rc = user_policies_ready(&a->user, err))) return rc;
    if (a->policies && (rc = policy_parse_list_in(&a->user.aliases, v, a->policies, a->cfgs, MAX_LIST, &o->n_policies, err)))
        return rc;
    if (a->allocators && (rc = alloc_parse_list_in(a->user.alloc_plugins.list, v, a->allocators, a->allocs, MAX_LIST,
                                                   &o->n_allocators, err)))
        return rc;
    if (first < argc) return cli_usage(err, v, "unexpected argument '%s'", argv[first]);
    if (o->seq.chunk && o->n_chunks) return cli_usage(err, v, "give --chunk B or --chunks LIST, not both");
    if (!o->n_chunks) a->chunks[0] = o->seq.chunk ? o->seq.chunk : 32, o->n_chunks = 1;
    o->chunks = a->chunks, o->seq.chunk = a->chunks[0];
    const int sources = prompt_sources(&o->seq.prompt);
    if (sources > 1) return cli_usage(err, v, "give at most one of --prompt, --prompt-file, --tokens, --messages");
    if (sources && o->prompts)
        return cli_usage(err, v, "--prompts takes the prompts from its file: not with --prompt, --prompt-file, "
                         "--tokens, --messages");
    if ((rc = prompt_chat_check(&o->seq.prompt, v, o->prompts != NULL, err))) return rc;
    if (!o->output) return cli_usage(err, v, "-o DIR is required");
    o->seq.generate = a->generate >= 0 ? a->generate : sources || o->prompts ? 0 : 511;
    for (int p = 0; p < o->n_policies; p++)
        if ((rc = plan_check_online(&a->cfgs[p], v, "--policies", err))) return rc;
    if (!o->n_policies) default_policies(o, a->cfgs);
    if (!o->n_budgets) a->budgets[0] = 32, a->budgets[1] = 64, a->budgets[2] = 128, o->n_budgets = 3;
    rc = o->n_allocators ? KV_OK : plan_default_allocator(&a->allocs[0], err);
    if (!o->n_allocators) o->n_allocators = 1;
    o->policies = a->cfgs, o->allocators = a->allocs, o->budgets = a->budgets;
    return rc ? rc : check_head_scores(o, err);
}

static int fidelity_verb(int argc, char **argv)
{
    kv_err err = {0};
    prov_record prov;
    int rc = prov_begin(&prov, argc, argv, &err); /* the words as typed, before getopt permutes them */
    if (rc) return cli_exit(rc, &err);
    fid_args *a = kv_calloc(1, sizeof *a, "fidelity options", &err);
    rc = a ? parse_args(argc, argv, a, &err) : err.code;
    fidelity_opts *o = a ? &a->o : NULL;
    if (!rc && a->help) {
        fputs(USAGE, stdout);
        user_policies_close(&a->user);
        free(a);
        prov_free(&prov);
        return 0;
    }
    if (!rc) rc = model_resolve(o->seq.model, a->model_path, sizeof a->model_path, &o->seq.model, &err);
    if (!rc) rc = prov_set_time(&prov, a->timestamp, &err);
    if (!rc) o->prov = &prov, rc = o->prompts ? fidelity_prompts(o, &err) : fidelity_run(o, &err);
    prov_free(&prov);
    if (a) user_policies_close(&a->user);
    free(a);
    return cli_exit(rc, &err);
}

/* Under mpirun: refused unless one process (-n 1; docs/mpi.md): its capture and replay are one
 * model's over one trace each, nothing to split; MPI is shut down either way. */
int fidelity_main(int argc, char **argv)
{
    int rank, size, status;
    kv_mpi_world(&rank, &size);
    if (size > 1) {
        status = KV_EUSAGE;
        if (rank == 0)
            fprintf(stderr, "kvtrace: error: fidelity: runs as one process (mpirun -n %d given); run it without "
                    "mpirun, or split a study's prompts over several fidelity runs\n", size);
    } else {
        status = fidelity_verb(argc, argv);
    }
    kv_mpi_finalize();
    return status;
}
