/* kvtrace: one program, many verbs (README.md#using-it). main() owns exiting: verbs
 * return an exit status (0 ok, 1 failure, 2 usage, 3 bad input file). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "analysis/analyze.h"
#include "core/cli_args.h"
#include "core/h5util.h"
#include "core/outfile.h"
#include "core/parallel.h"
#include "capture/capture.h"
#include "core/version.h"
#include "model/model_fetch.h"
#include "fidelity/fidelity.h"
#include "plots/plot.h"
#include "search/features.h"
#include "search/fit.h"
#include "policies/policy.h"
#include "sim/sim.h"
#include "synth/synth.h"
#include "verbs.h"

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);  /* each verb prints its own --help */
} verb;

static const verb VERBS[] = {
    {"capture", "run a model and write a trace", capture_main},
    {"info", "a trace's metadata, datasets, shapes, storage type and size", info_main},
    {"synth", "a synthetic trace of a real model's shape", synth_main},
    {"sim", "replay eviction under many policies and budgets", sim_main},
    {"analyze", "Spearman, log-det, PCA and the data every figure needs", analyze_main},
    {"plot", "gnuplot figures and report.html from an analysis directory", plot_main},
    {"fidelity", "in-model eviction versus offline replay", fidelity_main},
    {"tokenize", "text to token ids (and back) with a model's tokenizer", tokenize_main},
    {"prompts", "prompt sets for capture --prompts: needle in a haystack, RULER's tasks", prompts_main},
    {"features", "per-candidate features and targets at every eviction step (policy search)", features_main},
    {"fit", "fit a score expression on feature files; held-out evaluation", fit_main},
    {"policies", "every policy, its parameters and defaults", policies_main},
    {"demo", "the whole pipeline on the default model", demo_main},
    {"fetch", "put a model kvtrace knows by name in the user cache, checked", model_fetch_main},
};
enum { N_VERBS = sizeof VERBS / sizeof VERBS[0] };

static void print_usage(FILE *f)
{
    fprintf(f, "usage: kvtrace VERB [options]   (kvtrace VERB --help for each verb)\n\n"
               "A KV-cache eviction lab: capture a model run into an HDF5 trace once, then\n"
               "replay eviction policies and budgets offline and measure what they cost.\n\nverbs:\n");
    for (int i = 0; i < N_VERBS; i++)
        fprintf(f, "  %-9s %s\n", VERBS[i].name, VERBS[i].summary);
    fprintf(f, "\nexit codes: 0 success, 1 failure, 2 usage error, 3 invalid or corrupt input file\n"
               "options: -h, --help   --version\n");
}

static int run_verb(int argc, char **argv);

/* HDF5 closes what is still open at exit; after a failed write (a full disk)
 * HDF5 1.10's own exit-time close of that file crashes. So HDF5 registers no
 * exit handler: the library is closed here after a verb that succeeded, or
 * one that failed with nothing of HDF5's left open (the trace writer makes
 * its aborted file's last flush succeed into /dev/null, so it closes too).
 * SIGXFSZ (a file-size limit, ulimit -f) is ignored, so such a write fails
 * with EFBIG and is reported like a full disk (docs/reliability.md). */
int main(int argc, char **argv)
{
    H5dont_atexit();
    /* every OpenBLAS call on one thread, whatever OPENBLAS_NUM_THREADS says: how a product is split
     * over threads is kvtrace's own, fixed (docs/reproducibility.md) */
    kv_blas_single_threaded();
    signal(SIGXFSZ, SIG_IGN);
    int rc = run_verb(argc, argv);
    if (rc == 0 || H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0) H5close();
    return rc;
}

static int run_verb(int argc, char **argv)
{
    h5u_quiet();
    outfile_install_signal_cleanup();
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0) {
        printf("kvtrace %s\n", KVTRACE_VERSION);
        return 0;
    }
    for (int i = 0; i < N_VERBS; i++) {
        if (strcmp(name, VERBS[i].name) != 0) continue;
        return VERBS[i].run(argc - 1, argv + 1);
    }
    kv_err err = {0};
    kv_fail(&err, KV_EUSAGE, "unknown verb '%s' (see 'kvtrace --help')", name);
    return cli_report(&err);
}
