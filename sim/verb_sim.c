/* `kvtrace sim`: command line of the replay engine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "expr/expr.h"
#include "provenance/provenance.h"
#include "userpol/user_policies.h"
#include "sim/sim.h"
#include "core/kv_mpi.h"

static const char USAGE[] =
    "usage: kvtrace sim TRACES --policies LIST --budgets LIST --chunk B [options] -o DIR\n"
    "\n"
    "TRACES: one trace.h5, several (a study: one per prompt), a directory holding index.jsonl\n"
    "(kvtrace capture --prompts writes one), or the index file itself (docs/study.md).\n"
    "Replays chunked eviction over a trace for every (policy x budget) (docs/sim.md): per layer and\n"
    "kv head, the prompt arrives in chunks of B and the rest in chunks of --decode-chunk; the\n"
    "chunk's queries attend to the cache plus the chunk (measured against the full cache), then\n"
    "the policy keeps N. Writes results.csv, summary.csv, timing.csv and results.h5 to DIR.\n"
    "\n"
    "  --policies LIST      comma-separated policies, each name[:key=value...] (kvtrace policies)\n"
    "                       or an alias\n"
    "  --alias NAME=SPEC    a name for one configuration (SPEC = policy[:key=value...]), usable in\n"
    "                       --policies and as chunkkv's or criticalkv's base=; repeat for more\n"
    "  --plugin FILE.so     load policies and allocators from a plug-in built against kvtrace/policy.h\n"
    "                       (docs/plugins.md), or policies from FILE.py written in Python\n"
    "                       (docs/python-policies.md), usable in --policies, --alias and --allocators\n"
    "                       like a built-in; repeat for more\n"
    "  --define 'NAME = EXPR [; protect = ...]'\n"
    "                       a policy from a score expression over per-candidate features\n"
    "                       (docs/expressions.md, kvtrace policies --features); repeat for more\n"
    "  --defines FILE       one definition per line ('#' comments)\n"
    "  --budgets LIST       comma-separated cache sizes: N >= 1 rows per (layer, kv head) on average,\n"
    "                       or F% of the trace's T (N = floor(F/100 * T))\n"
    "  --allocators LIST    how each layer and kv head shares the total L*K*N, each name[:key=value...]\n"
    "                       (uniform, pyramid, adakv, headkv, duo, cake, global; kvtrace policies;\n"
    "                       default uniform: N each)\n"
    "  --head-scores FILE   per-(layer, kv head) importance for headkv and duo: a CSV whose first\n"
    "                       columns are layer,kv_head,score (kvtrace analyze writes one)\n"
    "  --max-memory GIB     refuse a lock-step replay (cake, global: every layer at once) estimated\n"
    "                       above GIB (default 16)\n"
    "  --step-counts        results.h5 records every step's candidates and kept rows per (layer, kv head)\n"
    "  --chunk B            prefill chunk (required, or --chunks)\n"
    "  --chunks LIST        comma-separated prefill chunks, swept like budgets (instead of --chunk)\n"
    "  --decode-chunk C     chunk after prompt_len (default 1)\n"
    "  --eval-stride S      measure only queries at positions i = 0 mod S (default 1)\n"
    "  --threads N          worker threads (default: one per CPU); results do not depend on it\n"
    "  -o, --output DIR     output directory (required)\n"
    "  --timestamp          record the time in provenance.json and results.h5 (SOURCE_DATE_EPOCH, when\n"
    "                       set, gives it; otherwise no time is recorded, docs/provenance.md)\n"
    "  --mixed-models       a study may hold traces of different models (refused otherwise)\n"
    "  --force, --quiet, -h/--help\n";

enum { MAX_LIST = 256 };

/* What the command line fills: the options, and the lists they point into. */
typedef struct {
    sim_opts o;
    bool help, timestamp;
    policy_config cfgs[MAX_LIST];
    user_policies user;           /* --alias, --plugin, --define, --defines (userpol/) */
    cli_join_space join;          /* the repeated list options' joined text */
    const char *policies;         /* --policies, parsed once every --alias is known */
    alloc_config allocs[MAX_LIST];
    const char *allocators;       /* --allocators, parsed once every --plugin is loaded */
    int64_t budgets[MAX_LIST];
    double fractions[MAX_LIST];
    int64_t chunks[MAX_LIST];     /* --chunks */
} sim_args;

static int parse_policies(const char *verb, const char *arg, void *args, kv_err *err)
{
    (void)verb;
    (void)err;
    ((sim_args *)args)->policies = arg;
    return KV_OK;
}

static int parse_allocators(const char *verb, const char *arg, void *args, kv_err *err)
{
    (void)verb;
    (void)err;
    ((sim_args *)args)->allocators = arg;
    return KV_OK;
}

/* N >= 1, or F% of T (resolved by sim_run once the trace is open). */
static int parse_budgets(const char *verb, const char *arg, void *args, kv_err *err)
{
    sim_args *a = args;
    a->o.budgets = a->budgets, a->o.budget_fractions = a->fractions;
    return cli_parse_budgets(verb, "--budgets", arg, MAX_LIST, a->budgets, a->fractions, &a->o.n_budgets, err);
}

/* --chunks LIST: prefill chunks swept like budgets, each once. */
static int parse_chunks(const char *verb, const char *arg, void *args, kv_err *err)
{
    sim_args *a = args;
    a->o.chunks = a->chunks;
    return cli_parse_i64_list(verb, "--chunks", arg, 1, 1 << 30, a->chunks, MAX_LIST, &a->o.n_chunks, err);
}

static const cli_opt OPTIONS[] = {
    {.name = "policies", .kind = CLI_CUSTOM, CLI_JOINED(sim_args, join), .parse = parse_policies},
    USER_POLICY_OPTIONS(sim_args, user),
    {.name = "budgets", .kind = CLI_CUSTOM, CLI_JOINED(sim_args, join), .parse = parse_budgets},
    {.name = "allocators", .kind = CLI_CUSTOM, CLI_JOINED(sim_args, join), .parse = parse_allocators},
    {.name = "chunks", .kind = CLI_CUSTOM, CLI_JOINED(sim_args, join), .parse = parse_chunks},
    {CLI_ROW("step-counts", CLI_FLAG, sim_args, o.step_counts)},
    {CLI_ROW("head-scores", CLI_TEXT, sim_args, o.head_scores)},
    {CLI_ROW("max-memory", CLI_F64, sim_args, o.max_memory_gib), .lo = 1e-6, .hi = 1e6},
    {CLI_ROW("chunk", CLI_I64, sim_args, o.chunk), .lo = 1, .hi = 1 << 30},
    {CLI_ROW("decode-chunk", CLI_I64, sim_args, o.decode_chunk), .lo = 1, .hi = 1 << 30},
    {CLI_ROW("eval-stride", CLI_I64, sim_args, o.eval_stride), .lo = 1, .hi = 1 << 30},
    {CLI_ROW("threads", CLI_INT, sim_args, o.threads), .lo = 1, .hi = 256},
    {CLI_ROW("output", CLI_TEXT, sim_args, o.output)},
    {CLI_ROW("mixed-models", CLI_FLAG, sim_args, o.mixed_models)},
    {CLI_ROW("resume", CLI_FLAG, sim_args, o.resume)},
    {CLI_ROW("rank-times", CLI_FLAG, sim_args, o.rank_times)},
    {CLI_ROW("force", CLI_FLAG, sim_args, o.force)},
    {CLI_ROW("quiet", CLI_FLAG, sim_args, o.quiet)},
    {CLI_ROW("timestamp", CLI_FLAG, sim_args, timestamp)},
    {0},
};

/* The record of the results: the command, the traces (each hashed when it
 * can be read; sim_run says what is wrong with one that cannot, and checks
 * the hashes against a study's index) and the commands that made them, the
 * index, and the --head-scores file. */
static int provenance(prov_record *p, const study_set *s, const char *head_scores, bool timestamp, kv_err *err)
{
    int rc = prov_set_time(p, timestamp, err);
    if (!rc && s->index) rc = prov_add_file(p, "index", s->index, NULL, err);
    for (int i = 0; !rc && i < s->n; i++) rc = prov_add_trace(p, s->t[i].path, err);
    /* the head-importance file (headkv, duo) is an input too; sim_run says what is wrong with one that cannot be read */
    if (!rc && head_scores && access(head_scores, R_OK) == 0) rc = prov_add_file(p, "head_scores", head_scores, NULL, err);
    return rc;
}

/* The verb on its parsed arguments; the exit status. */
static int verb(int argc, char **argv, sim_args *a)
{
    kv_err err = {0};
    sim_opts *o = &a->o;
    const char *v = "sim";
    o->decode_chunk = 1, o->eval_stride = 1, o->work_folder = true;
    prov_record prov;
    int rc = prov_begin(&prov, argc, argv, &err); /* the words as typed, before getopt permutes them */
    if (rc) return cli_exit(rc, &err);
    int first;
    rc = cli_opts_parse(v, argc, argv, OPTIONS, a, &a->help, &first, &err);
    if (!rc && a->help) {
        fputs(USAGE, stdout);
        prov_free(&prov);
        return 0;
    }
    if (!rc) rc = user_policies_ready(&a->user, &err);
    if (!rc && a->policies) {
        o->policies = a->cfgs;
        rc = policy_parse_list_in(&a->user.aliases, v, a->policies, a->cfgs, MAX_LIST, &o->n_policies, &err);
    }
    if (!rc && a->allocators) {
        o->allocators = a->allocs;
        rc = alloc_parse_list_in(a->user.alloc_plugins.list, v, a->allocators, a->allocs, MAX_LIST, &o->n_allocators, &err);
    }
    if (!rc && first >= argc) rc = cli_usage(&err, v, "missing trace.h5 (or the traces of a study)");
    if (!rc && !o->n_policies) rc = cli_usage(&err, v, "--policies LIST is required");
    if (!rc && !o->n_budgets) rc = cli_usage(&err, v, "--budgets LIST is required");
    if (!rc && o->chunk && o->n_chunks) rc = cli_usage(&err, v, "give --chunk B or --chunks LIST, not both");
    if (!rc && !o->chunk && !o->n_chunks) rc = cli_usage(&err, v, "--chunk B (or --chunks LIST) is required");
    if (!rc && o->n_chunks > 1 && o->step_counts)
        rc = cli_usage(&err, v, "--step-counts records one chunk size's steps; give one chunk (--chunk B)");
    if (!rc && !o->output) rc = cli_usage(&err, v, "-o DIR is required");
    study_set set = {0};
    if (!rc) rc = study_set_resolve(v, argv + first, argc - first, &set, &err);
    if (!rc) rc = provenance(&prov, &set, o->head_scores, a->timestamp, &err);
    if (!rc) {
        o->trace = set.t[0].path, o->study = &set;
        o->prov = &prov;
        rc = sim_run(o, NULL, &err);
    }
    study_set_free(&set);
    prov_free(&prov);
    int rank, size;
    kv_mpi_world(&rank, &size);
    if (rc && rank != 0) return cli_status(rc, &err);   /* under mpirun rank 0 alone says what failed, naming the rank */
    return cli_exit(rc, &err);
}

int sim_main(int argc, char **argv)
{
    kv_err err = {0};
    sim_args *a = kv_calloc(1, sizeof *a, "sim: options", &err);
    int status = a ? verb(argc, argv, a) : cli_report(&err);
    if (a) user_policies_close(&a->user);
    free(a);
    kv_mpi_finalize();   /* when mpirun started this process (docs/mpi.md) */
    return status;
}
