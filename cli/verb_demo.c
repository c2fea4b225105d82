/* `kvtrace demo`: the whole pipeline on the default model (README.md#what-the-demo-finds):
 * capture a ~500-token stories260K run (prompt plus greedy continuation),
 * replay every policy at several budgets, analyze, plot, and leave
 * report.html in figures/ (where the plot command it lists writes it). Each step is the verb a user would run, with
 * the same arguments; the demo only chooses them. Everything is written into a
 * temporary directory beside DIR and renamed into place at the end, so DIR is
 * whole or absent. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/analyze.h"
#include "capture/capture.h"
#include "fidelity/fidelity.h"
#include "model/model_fetch.h"
#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "core/outfile.h"
#include "core/progress.h"
#include "allocators/alloc_sets.h"
#include "plots/plot.h"
#include "policies/sets.h"
#include "provenance/provenance.h"
#include "sim/sim.h"
#include "verbs.h"

#define DEMO_PROMPT "Once upon a time"
#define DEMO_GENERATE "495"   /* T = 5 prompt tokens + 495 = 500, within the 512 it was trained on */
#define DEMO_CHUNK "32"
/* the sweeps: the registries' named sets (policies/sets.h, allocators/alloc_sets.h) */
#define DEMO_POLICIES POLICY_SET_DEMO
#define DEMO_ALL_POLICIES POLICY_SET_DEMO_ALL   /* --all-policies: the demo stays under 10 s without it */
#define DEMO_BUDGETS "32,64,128,256"
#define DEMO_ALLOC_POLICIES POLICY_SET_DEMO_ALLOC
#define DEMO_ALLOCATORS ALLOC_SET_DEMO
#define DEMO_ALLOC_BUDGETS "10%,25%"
/* the needle study: a haystack the demo writes, six prompts */
#define DEMO_NEEDLE_POLICIES POLICY_SET_DEMO_NEEDLE
#define DEMO_STEPS 13

/* The needle study's task: the haystack the demo writes (nothing is downloaded), the needle, the
 * question and its answer. */
typedef struct {
    const char *haystack, *needle, *question, *answer;
} demo_task;

/* stories260K (the default): TinyStories-like sentences, the model's own kind of text; it cannot
 * answer (a 260K-parameter story model), but the study's plumbing runs on it in seconds. */
static const demo_task STORY_TASK = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\n"
    "One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high.\n"
    "Her friend Tom came to play too. They played with the ball all day and laughed a lot.\n"
    "When the sun went down, Lily went home. Her mom gave her a warm bowl of soup.\n"
    "Lily was happy. She went to bed and dreamed about the big red ball and her friend Tom.\n",
    "The secret code is 4721.", "What is the secret code?", "4721"};

/* Any other model: RULER's pass key in repeated filler, a task SmolLM2-135M-Instruct solves with the
 * full cache (README, "What the demo finds"). */
static const demo_task PASSKEY_TASK = {
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n",
    "The pass key is 71432. Remember it. 71432 is the pass key.", "What is the pass key? The pass key is", "71432"};

/* The task for the demo's model: the story for the default (no --model, or --model stories260k). */
static const demo_task *task_of(const char *model_spec)
{
    return !model_spec || strcmp(model_spec, "stories260k") == 0 ? &STORY_TASK : &PASSKEY_TASK;
}

static const char USAGE[] =
    "usage: kvtrace demo [-o DIR] [--model M] [--force] [--quiet] [--all-policies] [--short]\n"
    "\n"
    "The whole pipeline on the default model, into DIR (default out/demo):\n"
    "  1. capture  stories260K, prompt \"" DEMO_PROMPT "\" + " DEMO_GENERATE " greedy tokens, chunk " DEMO_CHUNK
    ",\n              W_o and the KVzip reconstruction pass recorded -> trace.h5\n"
    "  2. sim      " DEMO_POLICIES "\n"
    "              at budgets " DEMO_BUDGETS ", chunk " DEMO_CHUNK " -> results/\n"
    "  3. analyze  Spearman, log-det, PCA, detail matrices -> analysis/\n"
    "  4. plot     the figures and report.html -> figures/ (as the command the report lists says)\n"
    "  5-7.        the allocator study: sim " DEMO_ALLOC_POLICIES " under " DEMO_ALLOCATORS "\n"
    "              at budgets " DEMO_ALLOC_BUDGETS " of T, then analyze and plot -> allocators/ (its own\n"
    "              report.html: budgets per layer and head, error against memory)\n"
    "  8-10.       the needle study: prompts needle on a haystack the demo writes (the default model: a\n"
    "              story and a secret code; any other --model: RULER's pass key in repeated filler; lengths 128,256,\n"
    "              depths 0,0.5,1), capture --prompts, sim " DEMO_NEEDLE_POLICIES " at budgets 32,64,\n"
    "              chunks 16,32 -> needle/ (needle/results/spans_summary.csv: the needle's retention)\n"
    "  11.         fidelity --prompts on the needle prompts: the same policies inside the model, the\n"
    "              answer's log-probability and exact match against the full run's -> needle/fidelity/\n"
    "  12-13.      analyze (paired against streaming, the in-model answers joined) and plot the needle\n"
    "              study -> needle/analysis/, needle/figures/ (its own report.html: span retention with\n"
    "              confidence intervals, depth x length heat maps, paired differences)\n"
    "The default model is found in $KVTRACE_MODEL_DIR or ~/.cache/kvtrace, and downloaded\n"
    "there (sha256 checked) when absent. Prints the report's path at the end.\n"
    "\n"
    "  -o DIR       output directory (default out/demo); refused if it exists, unless --force\n"
    "  --model M    another model (anything capture --model takes)\n"
    "  --force      replace DIR\n"
    "  --quiet      no progress lines\n"
    "  --timestamp  record the time in every step's provenance (SOURCE_DATE_EPOCH, when set, gives it)\n"
    "  --all-policies  step 2 also runs compactor (every registered policy; about 10 s more on 2 cores)\n"
    "  --short      steps 1-4 only: the one trace through capture, sim, analyze and plot (a third of the time)\n"
    "DIR/provenance.json records the demo's command, the model's sha256 and every step's command,\n"
    "which report.html shows too: run from DIR, they rebuild its outputs (docs/provenance.md).\n";

typedef struct {
    const char *model, *out;
    const char *model_spec; /* --model as given (a name or a path; NULL: the default), for the task */
    bool force, quiet, timestamp, all_policies, short_run;
    prov_record *prov;  /* the demo's record: each step's command is added as it starts */
} demo_opts;

static const cli_opt OPTIONS[] = {
    {CLI_ROW("output", CLI_TEXT, demo_opts, out)},
    {CLI_ROW("model", CLI_TEXT, demo_opts, model)},
    {CLI_ROW("force", CLI_FLAG, demo_opts, force)},
    {CLI_ROW("quiet", CLI_FLAG, demo_opts, quiet)},
    {CLI_ROW("timestamp", CLI_FLAG, demo_opts, timestamp)},
    {CLI_ROW("all-policies", CLI_FLAG, demo_opts, all_policies)},
    {CLI_ROW("short", CLI_FLAG, demo_opts, short_run)},
    {0},
};

enum { STEP_ARGS = 24 };

/* Runs one verb's main with argv[0..n) built by the caller (NULL entries are
 * options not given, left out), after recording its command line exactly as
 * the verb records its own. */
static int step(const demo_opts *o, int n, const char *what, int (*verb)(int, char **), const char **args, int len)
{
    const char *argv[STEP_ARGS + 1];
    int argc = 0;
    for (int i = 0; i < len && argc < STEP_ARGS; i++)
        if (args[i]) argv[argc++] = args[i];
    argv[argc] = NULL;
    char *command = cli_command_line(argc, (char **)argv);
    kv_err err = {0};
    int rc = command ? prov_add_step(o->prov, argv[0], command, &err) : kv_fail(&err, KV_EFAIL, "demo: out of memory");
    free(command);
    if (rc) return cli_exit(rc, &err);
    if (!o->quiet) fprintf(stderr, "kvtrace demo: [%d/%d] %s\n", n, DEMO_STEPS, what);
    optind = 1;
    const double t0 = kv_now_seconds();
    rc = verb(argc, (char **)argv);
    if (!rc) printf("kvtrace demo: [%d/%d] %s: %.1f s\n", n, DEMO_STEPS, what, kv_now_seconds() - t0);
    return rc;
}

/* needle/haystack.txt, the needle study's haystack. */
static int write_haystack(const demo_task *t)
{
    FILE *f = mkdir("needle", 0777) == 0 ? fopen("needle/haystack.txt", "w") : NULL;
    bool ok = f && fputs(t->haystack, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    if (ok) return 0;
    fprintf(stderr, "kvtrace: error: needle/haystack.txt: cannot write: %s\n", strerror(errno));
    return 1;
}

/* The steps run inside the demo's directory with relative paths, so that
 * the commands sim, analyze and plot record (and the report shows) can be
 * rerun from DIR as they are. */
static int run_steps(const demo_opts *o, const char *model)
{
    const char *q = o->quiet ? "--quiet" : NULL, *ts = o->timestamp ? "--timestamp" : NULL;
    const char *cap[] = {"capture", "--model", model, "--prompt", DEMO_PROMPT, "--generate", DEMO_GENERATE,
                         "--chunk", DEMO_CHUNK, "--record", "keys,values,queries,wo", "--kvzip", "-o", "trace.h5",
                         q, ts};
    const char *policies = o->all_policies ? DEMO_ALL_POLICIES : DEMO_POLICIES;
    const char *sim[] = {"sim", "trace.h5", "--policies", policies, "--budgets", DEMO_BUDGETS, "--chunk", DEMO_CHUNK,
                         "-o", "results", q, ts};
    const char *ana[] = {"analyze", "trace.h5", "--results", "results", "-o", "analysis", q, ts};
    const char *plt[] = {"plot", "analysis", "-o", "figures", q, ts};
    const char *asim[] = {"sim", "trace.h5", "--policies", DEMO_ALLOC_POLICIES, "--allocators", DEMO_ALLOCATORS,
                          "--budgets", DEMO_ALLOC_BUDGETS, "--chunk", DEMO_CHUNK, "-o", "allocators/results", q, ts};
    const char *aana[] = {"analyze", "trace.h5", "--results", "allocators/results", "-o", "allocators/analysis", q,
                          ts};
    const char *aplt[] = {"plot", "allocators/analysis", "-o", "allocators/figures", q, ts};
    const demo_task *task = task_of(o->model_spec);
    const char *ngen[] = {"prompts", "needle", "--haystack", "needle/haystack.txt", "--needle", task->needle,
                          "--question", task->question, "--answer", task->answer, "--depths", "0,0.5,1", "--lengths",
                          "128,256", "--model", model, "-o", "needle/prompts.jsonl"};
    const char *ncap[] = {"capture", "--prompts", "needle/prompts.jsonl", "--model", model, "--chunk", DEMO_CHUNK,
                          "-o", "needle/study", q, ts};
    const char *nsim[] = {"sim", "needle/study", "--policies", DEMO_NEEDLE_POLICIES, "--budgets", "32,64",
                          "--chunks", "16,32", "-o", "needle/results", q, ts};
    const char *nana[] = {"analyze", "needle/study", "--results", "needle/results", "--baseline", POLICY_SET_DEMO_NEEDLE_BASELINE,
                          "--fidelity", "needle/fidelity", "-o", "needle/analysis", q, ts};
    const char *nplt[] = {"plot", "needle/analysis", "-o", "needle/figures", q, ts};
    const char *nfid[] = {"fidelity", "--prompts", "needle/prompts.jsonl", "--model", model, "--policies",
                          DEMO_NEEDLE_POLICIES, "--budgets", "32,64", "--chunk", "16", "-o", "needle/fidelity", q, ts};
#define STEP(N, WHAT, MAIN, ARGS) step(o, N, WHAT, MAIN, ARGS, (int)(sizeof ARGS / sizeof ARGS[0]))
    int rc = STEP(1, "capture", capture_main, cap);
    if (!rc) rc = STEP(2, "sim", sim_main, sim);
    if (!rc) rc = STEP(3, "analyze", analyze_main, ana);
    if (!rc) rc = STEP(4, "plot", plot_main, plt);
    if (rc || o->short_run) return rc;
    if (mkdir("allocators", 0777) != 0) {
        fprintf(stderr, "kvtrace: error: allocators: cannot create: %s\n", strerror(errno));
        rc = 1;
    }
    if (!rc) rc = STEP(5, "sim: allocators", sim_main, asim);
    if (!rc) rc = STEP(6, "analyze: allocators", analyze_main, aana);
    if (!rc) rc = STEP(7, "plot: allocators", plot_main, aplt);
    if (!rc && strncmp(model, "random:", 7) != 0) { /* a random model has no tokenizer */
        if (!rc) rc = write_haystack(task);
        if (!rc) rc = STEP(8, "prompts: needle", prompts_main, ngen);
        if (!rc) rc = STEP(9, "capture: needle study", capture_main, ncap);
        if (!rc) rc = STEP(10, "sim: needle study (spans.csv)", sim_main, nsim);
        if (!rc) rc = STEP(11, "fidelity: needle study (the answer's log-probability and exact match)", fidelity_main,
                           nfid);
        if (!rc) rc = STEP(12, "analyze: needle study (paired, in-model answers joined)", analyze_main, nana);
        if (!rc) rc = STEP(13, "plot: needle study (span retention, heat maps)", plot_main, nplt);
    }
#undef STEP
    return rc;
}

static int run_pipeline(const demo_opts *o, const char *tmp, kv_err *err)
{
    char model[PATH_MAX];
    if (strncmp(o->model, "random:", 7) == 0) {
        if (snprintf(model, sizeof model, "%s", o->model) >= (int)sizeof model)
            return kv_fail(err, KV_EUSAGE, "demo: --model is too long");
    } else if (!realpath(o->model, model)) return kv_fail(err, KV_EFAIL, "%s: %s", o->model, strerror(errno));
    int here = open(".", O_RDONLY | O_DIRECTORY);
    if (here < 0 || chdir(tmp) != 0) {
        if (here >= 0) close(here);
        return kv_fail(err, KV_EFAIL, "%s: cannot enter: %s", tmp, strerror(errno));
    }
    int rc = run_steps(o, model);
    const int back = fchdir(here);
    close(here);
    if (back != 0) return kv_fail(err, KV_EFAIL, "cannot return to the working directory: %s", strerror(errno));
    if (rc) { /* the step said what is wrong, in its one error line */
        fprintf(stderr, "kvtrace demo: the step above failed; nothing was kept\n");
        return rc;
    }
    rc = prov_add_model(o->prov, model, err);
    return rc ? rc : prov_write_json(o->prov, tmp, err);
}

static int parse_args(int argc, char **argv, demo_opts *o, bool *help, kv_err *err)
{
    int first;
    int rc = cli_opts_parse("demo", argc, argv, OPTIONS, o, help, &first, err);
    if (!rc && first < argc) return cli_usage(err, "demo", "unexpected argument '%s'", argv[first]);
    return rc;
}

int demo_main(int argc, char **argv)
{
    kv_err err = {0};
    demo_opts o = {.out = "out/demo"};
    bool help = false;
    char model[4200];
    prov_record prov;
    int rc = prov_begin(&prov, argc, argv, &err); /* the words as typed, before getopt permutes them */
    if (rc) return cli_exit(rc, &err);
    o.prov = &prov;
    rc = parse_args(argc, argv, &o, &help, &err);
    if (!rc && help) {
        fputs(USAGE, stdout);
        prov_free(&prov);
        return 0;
    }
    o.model_spec = o.model;
    if (!rc) rc = model_resolve(o.model, model, sizeof model, &o.model, &err);
    if (!rc) rc = prov_set_time(&prov, o.timestamp, &err);
    kv_outfile out;
    const char *inputs[] = {o.model};
    if (!rc) rc = outfile_check_inputs(o.out, inputs, 1, &err);
    if (!rc) rc = outdir_begin(&out, o.out, o.force, &err);
    if (rc) {
        prov_free(&prov);
        return cli_report(&err);
    }
    const double t0 = kv_now_seconds();
    rc = run_pipeline(&o, out.tmp_path, &err);
    prov_free(&prov);
    if (!rc) rc = outdir_commit(&out, &err);
    else outdir_abort(&out);
    if (rc) return err.code == KV_OK ? rc : cli_report(&err);
    if (o.short_run) printf("kvtrace demo: done in %.1f s; the report is %s/figures/report.html\n", kv_now_seconds() - t0,
                            o.out);
    else printf("kvtrace demo: done in %.1f s; the report is %s/figures/report.html (the allocator study's: "
                "%s/allocators/figures/report.html)\n", kv_now_seconds() - t0, o.out, o.out);
    return 0;
}
