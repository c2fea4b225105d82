/* Figure 3: the keys of the detail layer's kv head in the plane of their top
 * two principal components, kept versus evicted, one panel per entry of
 * --pca-policies (default streaming, tova, keydiff: whichever are present)
 * at one budget. An entry is a policy name (its first configuration, in
 * summary.csv's order) or a configuration's full label (the config column). */
#include <stdio.h>
#include <string.h>

#include "core/cli_args.h"
#include "plot_figures.h"

static const char DEFAULT_PCA[] = "streaming,tova,keydiff";

int plot_pca_parse(const char *list, plot_pca_list *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    cli_list l;
    int rc = cli_list_split("plot", "--pca-policies", list, PLOT_MAX_PCA, &l, err);
    for (int i = 0; !rc && i < l.n; i++) {
        if (strlen(l.item[i]) >= sizeof out->entry[0])
            return cli_usage(err, "plot", "--pca-policies entry '%.60s...' is too long", l.item[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(l.item[j], l.item[i]) == 0) return cli_list_repeat("plot", "--pca-policies", &l, j, i,
                                                                          "the entry", l.item[i], err);
        snprintf(out->entry[out->n++], sizeof out->entry[0], "%s", l.item[i]);
    }
    return rc;
}

/* Whether run r is what `entry` names: its config label, or (no colon) its policy. */
static bool matches(const plot_data *d, size_t r, const char *entry)
{
    const plot_series *s = &d->series.s[d->runs[r].series];
    return strcmp(s->config, entry) == 0 || (!strchr(entry, ':') && strcmp(s->policy, entry) == 0);
}

/* The run `entry` names at `budget` with the lowest variant number (the
 * configuration met first, in summary.csv's order), or -1. */
static int find_run(const plot_data *d, const char *entry, int64_t budget)
{
    int best = -1;
    for (size_t r = 0; r < d->n_runs; r++) {
        const plot_series *s = &d->series.s[d->runs[r].series];
        if (d->runs[r].budget == budget && matches(d, r, entry) &&
            (best < 0 || s->variant < d->series.s[d->runs[best].series].variant))
            best = (int)r;
    }
    return best;
}

static bool present(const plot_data *d, const char *entry)
{
    for (size_t r = 0; r < d->n_runs; r++)
        if (matches(d, r, entry)) return true;
    return false;
}

int plot_fig_pca_check(const plot_data *d, const char *list, kv_err *err)
{
    plot_pca_list l;
    int rc = list ? plot_pca_parse(list, &l, err) : KV_OK;
    for (int k = 0; list && !rc && k < l.n; k++)
        if (!present(d, l.entry[k]))
            rc = cli_usage(err, "plot", "--pca-policies: '%s' matches no run in %s/pca_kept.csv (give a "
                         "policy name or a config label as in its config column)", l.entry[k], d->dir);
    return rc;
}

/* Picks the budget: the smallest at which every present entry has a run;
 * failing that, the smallest at which the most of them do. Fills runs[]. */
static int pick_runs(const plot_data *d, const plot_pca_list *l, int *runs, int64_t *budget, int *n_present)
{
    int best = 0;
    bool here[PLOT_MAX_PCA] = {false};
    *n_present = 0;
    for (int p = 0; p < l->n; p++) *n_present += here[p] = present(d, l->entry[p]);
    for (size_t r = 0; r < d->n_runs; r++) {
        int64_t b = d->runs[r].budget;
        int count = 0;
        for (int p = 0; p < l->n; p++) count += here[p] && find_run(d, l->entry[p], b) >= 0;
        if (count > best || (count == best && count > 0 && b < *budget)) best = count, *budget = b;
    }
    int n = 0;
    for (int p = 0; best && p < l->n; p++) {
        int r = find_run(d, l->entry[p], *budget);
        if (r >= 0) runs[n++] = r;
    }
    return n;
}

/* fig3_pca.dat: "position pc1 pc2 kept_1 .. kept_n" (one kept column per panel). */
static int write_data(const plot_data *d, const plot_ctx *ctx, plot_fig_out *out, const char *file, const int *runs,
                      int n, kv_err *err)
{
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    const plot_pca *p = &d->pca;
    fprintf(f, "# layer %lld, kv head %lld: position pc1 pc2", (long long)p->layer, (long long)p->kv_head);
    for (int k = 0; k < n; k++) fprintf(f, " kept_%d", k + 1);
    fprintf(f, "\n# kept columns (1 = in the final cache):");
    for (int k = 0; k < n; k++)
        fprintf(f, " kept_%d = %s budget=%lld;", k + 1, d->series.s[d->runs[runs[k]].series].config,
                (long long)d->runs[runs[k]].budget);
    fputc('\n', f);
    for (int64_t t = 0; t < p->n; t++) {
        fprintf(f, "%lld ", (long long)t);
        plot_num(f, p->pc1[t]);
        fputc(' ', f);
        plot_num(f, p->pc2[t]);
        for (int k = 0; k < n; k++) fprintf(f, " %d", p->kept[(size_t)runs[k] * (size_t)p->n + (size_t)t]);
        fputc('\n', f);
    }
    return plot_close(f, ctx, file, err);
}

static void axis_label(FILE *f, const plot_pca *p, char axis, int pc, double var)
{
    if (p->has_var && p->var_total > 0)
        fprintf(f, "set %clabel 'PC%d (%.1f%% of key variance)'\n", axis, pc, 100.0 * var / p->var_total);
    else
        fprintf(f, "set %clabel 'PC%d'\n", axis, pc);
}

static void write_script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const char *data,
                         const int *runs, int n, int64_t budget)
{
    const plot_pca *p = &d->pca;
    plot_gp_preamble(f, ctx, name, "PCA of keys, kept vs evicted", n <= 3 ? 1200 : 400 * n, 500);
    fprintf(f, "set multiplot layout 1,%d title 'Keys of layer %lld, kv head %lld (detail head %lld) on PC1 and PC2 "
               "at budget N = %lld: kept in colour, evicted in grey' font ',13'\n",
            n, (long long)p->layer, (long long)p->kv_head, (long long)d->meta.detail_head, (long long)budget);
    axis_label(f, p, 'x', 1, p->var_pc1);
    axis_label(f, p, 'y', 2, p->var_pc2);
    fprintf(f, "unset key\nset offsets graph 0.03, graph 0.03, graph 0.03, graph 0.03\n");
    for (int k = 0; k < n; k++) {
        const plot_series *s = &d->series.s[d->runs[runs[k]].series];
        int64_t kept = 0;
        for (int64_t t = 0; t < p->n; t++) kept += p->kept[(size_t)runs[k] * (size_t)p->n + (size_t)t];
        fputs("set title ", f); /* two lines: the configuration, then the counts */
        plot_gp_quote(f, s->label);
        fprintf(f, " . \"\\n%lld kept, %lld evicted\"\n", (long long)kept, (long long)(p->n - kept));
        int col = 4 + k;
        fprintf(f, "plot '%s' using 2:($%d == 0 ? $3 : NaN) with points pt 7 ps 0.45 lc rgb '#c8c8c8' "
                   "title 'evicted', \\\n", data, col);
        fprintf(f, "     '' using 2:($%d == 1 ? $3 : NaN) with points pt %d ps 0.7 lc rgb '%s' title 'kept'\n", col,
                plot_point_type(s->variant), plot_policy_colour(s->policy));
    }
    fprintf(f, "unset multiplot\n");
}

static void caption(const plot_data *d, plot_fig_out *out, const int *runs, int n, int n_present, int64_t budget)
{
    char names[1024] = "";
    for (int k = 0; k < n; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? (k + 1 == n ? " and " : ", ") : "",
                 d->series.s[d->runs[runs[k]].series].label);
    snprintf(out->caption, sizeof out->caption,
             "Every key of layer %lld, kv head %lld (the kv head of detail head %lld) projected on the top two "
             "principal components of that head's keys; coloured keys are in the final cache of %s at budget "
             "N = %lld (%s), grey keys were evicted. How to read it: a "
             "policy that keeps keys spread over the cloud (large volume) keeps diverse keys; one whose kept keys "
             "sit in a corner or along one direction keeps similar ones. Recency (streaming) keeps the newest "
             "keys wherever they lie; KeyDiff keeps the keys far from the mean direction.",
             (long long)d->pca.layer, (long long)d->pca.kv_head, (long long)d->meta.detail_head, names, (long long)budget,
             n == n_present ? "the smallest budget all of them ran with"
                            : "no budget is common to all of them: the smallest at which the most of them ran");
}

int plot_fig_pca(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_PCA]) return plot_skip(out, "pca.csv is missing from the analysis directory.");
    if (!d->has_pca) return plot_skip(out, "pca.csv has no rows.");
    plot_pca_list l;
    const char *list = ctx->pca_policies ? ctx->pca_policies : DEFAULT_PCA;
    int rc = plot_pca_parse(list, &l, err);
    if (rc) return rc;
    int runs[PLOT_MAX_PCA];
    int64_t budget = 0;
    int n_present = 0;
    int n = d->n_runs ? pick_runs(d, &l, runs, &budget, &n_present) : 0;
    if (!n)
        return plot_skip(out, d->n_runs ? "none of %s is among the runs in pca_kept.csv."
                                        : "no runs (analyze ran without --results), so nothing was kept or evicted%s.",
                         d->n_runs ? list : "");
    char data[64], script[64];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(script, sizeof script, "%s.gp", name);
    rc = write_data(d, ctx, out, data, runs, n, err);
    FILE *f;
    if (!rc) rc = plot_open(ctx, script, &f, err);
    if (rc) return rc;
    write_script(f, d, ctx, name, data, runs, n, budget);
    rc = plot_close(f, ctx, script, err);
    caption(d, out, runs, n, n_present, budget);
    return rc;
}
