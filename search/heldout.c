/* heldout: sim over the held-out traces with the fitted policy and the baselines, then the table,
 * the verdict and the figure (heldout.h). */
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "core/h5util.h"
#include "core/rng.h"
#include "expr/expr.h"
#include "plots/plot_gnuplot.h"
#include "policies/sets.h"
#include "plots/plot_style.h"
#include "search/heldout.h"
#include "sim/sim.h"

enum { MAX_POLICIES = 32, MAX_ROWS = 32 * 64 };

typedef struct {
    char policy[64];
    int64_t budget;
    int n_traces;
    double err[3], rec[3];   /* mean, ci_lo, ci_hi */
} row;

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int heldout_split(const study_set *s, double fraction, uint64_t seed, int *train, int *n_train, int *test,
                  int *n_test, kv_err *err)
{
    if (s->n < 2) return kv_fail(err, KV_EUSAGE, "fit: --split needs a study of at least 2 prompts (%d given)", s->n);
    int *p = kv_calloc((size_t)s->n, sizeof *p, "split", err);
    if (!p) return KV_EFAIL;
    for (int i = 0; i < s->n; i++) p[i] = i;
    kv_rng r;
    rng_init(&r, seed, (uint64_t)s->n, 0x5b1u, 0);
    for (int i = s->n - 1; i > 0; i--) {   /* Fisher-Yates */
        const int j = (int)rng_below(&r, (uint64_t)i + 1), t = p[i];
        p[i] = p[j], p[j] = t;
    }
    int k = (int)lround(fraction * s->n);
    k = k < 1 ? 1 : k > s->n - 1 ? s->n - 1 : k;
    memcpy(train, p, (size_t)k * sizeof *p), memcpy(test, p + k, (size_t)(s->n - k) * sizeof *p);
    *n_train = k, *n_test = s->n - k;
    qsort(train, (size_t)k, sizeof *train, cmp_int), qsort(test, (size_t)(s->n - k), sizeof *test, cmp_int);
    free(p);
    return KV_OK;
}

/* sim over the test traces into DIR/heldout. */
static int run_sim(const heldout_opts *o, const char *dir, char names[][64], int *n_names, kv_err *err)
{
    expr_defs *defs = kv_calloc(1, sizeof *defs, "definitions", err);
    policy_aliases *al = defs ? kv_calloc(1, sizeof *al, "aliases", err) : NULL;
    policy_config *cfg = al ? kv_calloc(MAX_POLICIES, sizeof *cfg, "policies", err) : NULL;
    int rc = cfg ? expr_define(defs, o->definition, err) : KV_EFAIL, n = 0;
    if (!rc) rc = expr_defs_attach(defs, al, err);
    char list[4096];
    snprintf(list, sizeof list, "%s%s%s", o->name, o->baselines[0] ? "," : "", o->baselines);
    if (!rc) rc = policy_parse_list_in(al, "fit", list, cfg, MAX_POLICIES, &n, err);
    char out[4200];
    snprintf(out, sizeof out, "%s/heldout", dir);
    sim_opts s = {.trace = o->test->t[0].path, .study = o->test, .output = out, .policies = cfg, .n_policies = n,
                  .budgets = (int64_t *)o->budgets, .n_budgets = o->n_budgets, .chunk = o->chunk,
                  .decode_chunk = 1, .eval_stride = 1, .threads = o->threads, .quiet = true,
                  .mixed_models = o->mixed_models};
    if (!rc) rc = sim_run(&s, NULL, err);
    for (int i = 0; !rc && i < n; i++) snprintf(names[i], 64, "%s", cfg[i].iface->name);
    *n_names = rc ? 0 : n;
    free(cfg), free(al), free(defs);
    return rc;
}

static int col(const csv_table *t, const char *name, kv_err *err)
{
    const int c = csv_column(t, name);
    return c >= 0 ? c : -kv_fail(err, KV_EFAIL, "%s: no column %s", t->path, name);
}

/* The phase=all rows of sim's summary.csv. */
static int read_summary(const char *dir, row *rows, int *n, kv_err *err)
{
    char d[4200];
    snprintf(d, sizeof d, "%s/heldout", dir);
    csv_table t = {0};
    bool present;
    int rc = csv_read(&t, d, "summary.csv", &present, err);
    static const char *const NAMES[] = {"policy", "budget", "phase", "n_traces", "out_rel_err_mean",
                                        "out_rel_err_mean_ci_lo", "out_rel_err_mean_ci_hi", "attn_recall_mean",
                                        "attn_recall_mean_ci_lo", "attn_recall_mean_ci_hi"};
    int c[10];
    for (int k = 0; !rc && k < 10; k++)
        if ((c[k] = col(&t, NAMES[k], err)) < 0) rc = KV_EFAIL;
    *n = 0;
    for (size_t j = 0; !rc && j < t.n_rows; j++) {
        if (strcmp(csv_cell(&t, j, c[2]), "all") != 0 || *n >= MAX_ROWS) continue;
        row *r = &rows[(*n)++];
        int64_t v;
        snprintf(r->policy, sizeof r->policy, "%s", csv_cell(&t, j, c[0]));
        rc = csv_int(&t, j, c[1], 1, INT64_MAX, &r->budget, err);
        if (!rc) rc = csv_int(&t, j, c[3], 0, 1 << 30, &v, err);
        r->n_traces = (int)v;
        for (int k = 0; !rc && k < 3; k++) rc = csv_double(&t, j, c[4 + k], true, &r->err[k], err);
        for (int k = 0; !rc && k < 3; k++) rc = csv_double(&t, j, c[7 + k], true, &r->rec[k], err);
    }
    csv_free(&t);
    return rc;
}

static void test_model(const heldout_opts *o, char *model, size_t cap)
{
    snprintf(model, cap, "?");
    hid_t f = H5Fopen(o->test->t[0].path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return;
    h5u_read_attr_str(f, o->test->t[0].path, "model_name", model, cap, &(bool){0}, &(kv_err){0});
    H5Fclose(f);
}

static int write_csv(const char *dir, const row *r, int n, kv_err *err)
{
    FILE *f = csv_create(dir, "heldout.csv", "policy,budget,n_traces,out_rel_err_mean,out_rel_err_ci_lo,"
                         "out_rel_err_ci_hi,attn_recall_mean,attn_recall_ci_lo,attn_recall_ci_hi", err);
    if (!f) return KV_EFAIL;
    for (int i = 0; i < n; i++)
        fprintf(f, "%s,%lld,%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n", r[i].policy, (long long)r[i].budget, r[i].n_traces,
                r[i].err[0], r[i].err[1], r[i].err[2], r[i].rec[0], r[i].rec[1], r[i].rec[2]);
    return csv_close(f, "heldout.csv", err);
}

/* One budget's verdict: the fitted policy against the best baseline by mean error (oracle aside), by
 * the paired difference over the test traces; a line of heldout.md and a row of heldout_verdict.csv. */
static int verdict(FILE *f, FILE *v, const heldout_opts *o, const char *dir, const row *r, int n, int64_t budget,
                   kv_err *err)
{
    const row *fit = NULL, *best = NULL;
    for (int i = 0; i < n; i++) {
        if (r[i].budget != budget) continue;
        if (strcmp(r[i].policy, o->name) == 0) fit = &r[i];
        else if (!policy_name_offline(r[i].policy) && (!best || r[i].err[0] < best->err[0])) best = &r[i];
    }
    if (!fit || !best) return KV_OK;
    double d[3];
    int rc = heldout_paired(dir, o->name, best->policy, budget, o->test, d, err);
    if (rc) return rc;
    const char *how = d[2] < 0 ? "lower error: it wins (the interval of the difference is below 0)"
                      : d[1] > 0 ? "higher error: it loses (the interval of the difference is above 0)"
                                 : "no clear difference (the interval of the difference holds 0)";
    fprintf(f, "- N = %lld: `%s` %.4g against the best baseline `%s` %.4g; paired difference over the %d test "
               "traces %+.4g [%+.4g, %+.4g]: %s.\n", (long long)budget, o->name, fit->err[0], best->policy,
            best->err[0], o->test->n, d[0], d[1], d[2], how);
    fprintf(v, "%lld,%s,%.9g,%.9g,%.9g,%s\n", (long long)budget, best->policy, d[0], d[1], d[2],
            d[2] < 0 ? "win" : d[1] > 0 ? "loss" : "unclear");
    return KV_OK;
}

static int write_md(const char *dir, const heldout_opts *o, const row *r, int n, bool figure, kv_err *err)
{
    FILE *f = csv_create(dir, "heldout.md", NULL, err);
    if (!f) return KV_EFAIL;
    char model[256];
    test_model(o, model, sizeof model);
    const bool same = o->train_model && strcmp(o->train_model, model) == 0;
    fprintf(f, "# Held-out evaluation of `%s`\n\n", o->name);
    if (same) fprintf(f, "Fit and tested on %s; ", model);
    else fprintf(f, "Fit on %s, tested on %s; ", o->train_model && o->train_model[0] ? o->train_model : "?", model);
    fprintf(f, "%s; %d test trace(s), chunk %lld. Mean over the test traces of each trace's mean "
               "`out_rel_err` and `attn_recall` (phase all), with the 95%% percentile bootstrap interval over "
               "traces (sim's `summary.csv`, `heldout/`).\n\n", o->train_what, o->test->n, (long long)o->chunk);
    fprintf(f, "| policy | N | out_rel_err mean [95%% CI] | attn_recall mean [95%% CI] |\n| --- | --- | --- | --- |\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "| `%s` | %lld | %.4g [%.4g, %.4g] | %.4f [%.4f, %.4f] |\n", r[i].policy, (long long)r[i].budget,
                r[i].err[0], r[i].err[1], r[i].err[2], r[i].rec[0], r[i].rec[1], r[i].rec[2]);
    fprintf(f, "\nThe fitted policy's error against the best baseline (by mean error, oracle aside) at each budget; "
               "the difference is out_rel_err(fitted) - out_rel_err(baseline) per test trace, its mean and 95%% "
               "percentile bootstrap interval over the traces (heldout_verdict.csv):\n\n");
    FILE *v = csv_create(dir, "heldout_verdict.csv", "budget,baseline,diff_mean,diff_ci_lo,diff_ci_hi,verdict", err);
    int rc = v ? KV_OK : KV_EFAIL;
    for (int b = 0; !rc && b < o->n_budgets; b++) rc = verdict(f, v, o, dir, r, n, o->budgets[b], err);
    if (v) rc = csv_close(v, "heldout_verdict.csv", err) ? (rc ? rc : KV_EFAIL) : rc;
    if (rc) {
        fclose(f);
        return rc;
    }
    fprintf(f, "\n%s\n", figure ? "![error and recall versus budget](heldout.svg)"
                                : "(no figure: gnuplot did not run; heldout.gp and heldout.dat are here)");
    return csv_close(f, "heldout.md", err);
}

/* heldout.svg: out_rel_err (log) and attn_recall versus budget, one line per policy, 95% bands. */
static bool write_figure(const char *dir, const row *r, int n, char names[][64], int n_names, kv_err *err)
{
    FILE *d = csv_create(dir, "heldout.dat", NULL, err), *g = d ? csv_create(dir, "heldout.gp", NULL, err) : NULL;
    if (!g) {
        if (d) fclose(d);
        return false;
    }
    for (int p = 0; p < n_names; p++) {
        fprintf(d, "# %s\n", names[p]);
        for (int i = 0; i < n; i++)
            if (strcmp(r[i].policy, names[p]) == 0)
                fprintf(d, "%lld %.9g %.9g %.9g %.9g %.9g %.9g\n", (long long)r[i].budget, r[i].err[0], r[i].err[1],
                        r[i].err[2], r[i].rec[0], r[i].rec[1], r[i].rec[2]);
        fprintf(d, "\n\n");
    }
    fprintf(g, "set terminal svg size 1000,420 dynamic noenhanced font 'Sans,11'\nset output 'heldout.svg'\n"
               "set multiplot layout 1,2 title 'Held-out: error and recall versus budget (bands: 95%% CI over traces)'\n"
               "set xlabel 'budget N'\nset offsets graph 0.05, graph 0.05, 0, 0\nset xtics (");
    for (int i = 0, k = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < i; j++) seen = seen || r[j].budget == r[i].budget;
        if (!seen) fprintf(g, "%s%lld", k++ ? ", " : "", (long long)r[i].budget);
    }
    fprintf(g, ")\nset logscale y\nset ylabel 'out_rel_err (mean)'\nunset key\nplot ");
    for (int pass = 0; pass < 2; pass++) {
        if (pass) fprintf(g, "unset logscale y\nset ylabel 'attn_recall (mean)'\nset key outside right top font ',9'\nplot ");
        for (int p = 0; p < n_names; p++)
            fprintf(g, "%s'heldout.dat' index %d using 1:%d:%d with filledcurves fs transparent solid 0.2 noborder "
                       "lc rgb '%s' notitle, '' index %d using 1:%d with linespoints lw 2 lc rgb '%s' title '%s'",
                    p ? ", " : "", p, pass ? 6 : 3, pass ? 7 : 4, plot_policy_colour(names[p]), p, pass ? 5 : 2,
                    p == 0 ? "#000000" : plot_policy_colour(names[p]), names[p]);
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    const int rc = csv_close(d, "heldout.dat", err) | csv_close(g, "heldout.gp", err);
    kv_err quiet = {0};
    return !rc && plot_gnuplot_run(dir, "heldout.gp", "heldout.svg", &quiet) == KV_OK;
}

int heldout_run(const heldout_opts *o, const char *dir, kv_err *err)
{
    char names[MAX_POLICIES][64];
    int n_names = 0, n = 0;
    row *rows = kv_calloc(MAX_ROWS, sizeof *rows, "held-out rows", err);
    int rc = rows ? run_sim(o, dir, names, &n_names, err) : KV_EFAIL;
    if (!rc) rc = read_summary(dir, rows, &n, err);
    if (!rc) rc = write_csv(dir, rows, n, err);
    const bool fig = !rc && write_figure(dir, rows, n, names, n_names, err);
    if (!rc && err->code) rc = err->code;
    if (!rc) rc = write_md(dir, o, rows, n, fig, err);
    free(rows);
    return rc;
}
