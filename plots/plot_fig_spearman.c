/* Figure 2: Spearman ρ between key distinctiveness and attention, per layer:
 * each query head a point, the layer mean a line, for rho_pairwise and
 * rho_anchor (docs/analyze.md#spearmancsv--layerq_headkv_headrho_pairwiserho_anchor). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plot_figures.h"

static const char PAIRWISE[] = "#3a3a3a", ANCHOR[] = "#e08214";

/* Index 0: "layer head rho_pairwise rho_anchor" per head; index 1: "layer mean_pairwise mean_anchor". */
static int write_data(const plot_data *d, const plot_ctx *ctx, plot_fig_out *out, const char *file, double *lo,
                      kv_err *err)
{
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    int64_t L = d->meta.L;
    double *sum = calloc((size_t)(4 * L), sizeof *sum); /* [L][pairwise sum, count, anchor sum, count] */
    if (!sum) {
        fclose(f);
        return kv_fail(err, KV_EFAIL, "plot: out of memory");
    }
    *lo = 0;
    fprintf(f, "# index 0, one row per (layer, query head): layer head rho_pairwise rho_anchor\n");
    for (size_t r = 0; r < d->n_rho; r++) {
        const plot_rho *p = &d->rho[r];
        fprintf(f, "%lld %lld ", (long long)p->layer, (long long)p->head);
        plot_num(f, p->rho_pairwise);
        fputc(' ', f);
        plot_num(f, p->rho_anchor);
        fputc('\n', f);
        double v[2] = {p->rho_pairwise, p->rho_anchor};
        for (int k = 0; k < 2; k++) {
            if (isnan(v[k])) continue;
            sum[4 * p->layer + 2 * k] += v[k], sum[4 * p->layer + 2 * k + 1] += 1;
            if (v[k] < *lo) *lo = v[k];
        }
    }
    fprintf(f, "\n\n# index 1, one row per layer: layer mean_rho_pairwise mean_rho_anchor (NaN: no head)\n");
    for (int64_t l = 0; l < L; l++) {
        fprintf(f, "%lld ", (long long)l);
        plot_num(f, sum[4 * l + 1] > 0 ? sum[4 * l] / sum[4 * l + 1] : NAN);
        fputc(' ', f);
        plot_num(f, sum[4 * l + 3] > 0 ? sum[4 * l + 2] / sum[4 * l + 3] : NAN);
        fputc('\n', f);
    }
    free(sum);
    return plot_close(f, ctx, file, err);
}

static void write_script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const char *data,
                         double lo)
{
    int64_t L = d->meta.L;
    plot_gp_preamble(f, ctx, name, "Spearman rho per layer", 1200, 500);
    fprintf(f, "set title 'Spearman ρ between key distinctiveness and attention received, per layer (%lld query "
               "heads each)'\n", (long long)d->meta.H);
    fprintf(f, "set xlabel 'layer'\nset ylabel 'Spearman ρ (rank correlation)'\n");
    fprintf(f, "set xrange [-0.6:%lld.6]\nset xtics %lld\n", (long long)L - 1, (long long)(L <= 16 ? 1 : (L + 15) / 16));
    fprintf(f, "set yrange [%.2f:1.05]\n", lo < 0 ? floor(lo * 10 - 0.5) / 10 : 0.0);
    fprintf(f, "set key outside right top\n");
    fprintf(f, "set arrow from graph 0, first 0 to graph 1, first 0 nohead lc rgb '#888888' dt 3\n");
    fprintf(f, "pw = '%s'; an = '%s'\n", PAIRWISE, ANCHOR);
    fprintf(f, "plot '%s' index 0 using ($1-0.12):3 with points pt 6 ps 0.9 lc rgb pw title 'rho_pairwise, one head', \\\n", data);
    fprintf(f, "     '' index 0 using ($1+0.12):4 with points pt 8 ps 0.9 lc rgb an title 'rho_anchor, one head', \\\n");
    fprintf(f, "     '' index 1 using 1:2 with linespoints pt 7 ps 1.2 lw 2 lc rgb pw title 'rho_pairwise, layer mean', \\\n");
    fprintf(f, "     '' index 1 using 1:3 with linespoints pt 9 ps 1.2 lw 2 dt 2 lc rgb an title 'rho_anchor, layer mean'\n");
}

int plot_fig_spearman(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_SPEARMAN]) return plot_skip(out, "spearman.csv is missing from the analysis directory.");
    if (!d->n_rho)
        return plot_skip(out, "spearman.csv has no rows (the trace has no /attention/colsum, which Spearman needs).");
    size_t finite = 0;
    for (size_t r = 0; r < d->n_rho; r++) finite += !isnan(d->rho[r].rho_pairwise) || !isnan(d->rho[r].rho_anchor);
    if (!finite) return plot_skip(out, "every ρ in spearman.csv is NaN (constant keys or attention).");
    char data[64], script[64];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(script, sizeof script, "%s.gp", name);
    double lo = 0;
    int rc = write_data(d, ctx, out, data, &lo, err);
    FILE *f;
    if (!rc) rc = plot_open(ctx, script, &f, err);
    if (rc) return rc;
    write_script(f, d, ctx, name, data, lo);
    rc = plot_close(f, ctx, script, err);
    snprintf(out->caption, sizeof out->caption,
             "Spearman rank correlation, per (layer, query head), between a key's distinctiveness (minus its mean "
             "cosine to the other keys: rho_pairwise; minus its cosine to the mean raw key: rho_anchor, the cheap "
             "variant) and the mean attention it receives from the queries that can see it. Small markers are "
             "single heads (pairwise left, anchor right of each layer), lines the layer means. How to read it: "
             "higher ρ means distinct keys receive more attention, which is what KeyDiff relies on; the KeyDiff "
             "paper reports about 0.94 on Llama-3.2-3B. ρ near 0 means distinctiveness says little about "
             "attention in that layer.");
    return rc;
}
