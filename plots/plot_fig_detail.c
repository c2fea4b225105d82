/* Figure 1: the cosine similarity of the first 64 keys of one kv head beside
 * one query head's attention over the same tokens (two heatmaps). */
#include <math.h>
#include <stdio.h>

#include "plot_figures.h"

/* fig1_detail.dat: "key query cos attn", one scan line per query row (image order). */
static int write_data(const plot_detail *m, const plot_ctx *ctx, plot_fig_out *out, const char *file, kv_err *err)
{
    FILE *f;
    int rc = plot_open_data(ctx, out, file, &f, err);
    if (rc) return rc;
    fprintf(f, "# key_position query_position cos attn  (cos: keys i and j of the kv head; attn: weight of query i on key j)\n");
    for (int64_t i = 0; i < m->n; i++) {
        for (int64_t j = 0; j < m->n; j++) {
            fprintf(f, "%lld %lld ", (long long)j, (long long)i);
            plot_num(f, m->cos[i * m->n + j]);
            fputc(' ', f);
            plot_num(f, m->attn[i * m->n + j]);
            fputc('\n', f);
        }
        fputc('\n', f);
    }
    return plot_close(f, ctx, file, err);
}

static void write_script(FILE *f, const plot_data *d, const plot_ctx *ctx, const char *name, const char *data)
{
    const plot_meta *m = &d->meta;
    int64_t n = d->detail.n, kv = m->detail_head / (m->H / m->K);
    plot_gp_preamble(f, ctx, name, "key cosine similarity beside attention, first tokens", 1200, 560);
    fprintf(f, "set multiplot layout 1,2 title 'Layer %lld, query head %lld (kv head %lld): first %lld tokens' "
               "font ',13'\n", (long long)m->detail_layer, (long long)m->detail_head, (long long)kv, (long long)n);
    fprintf(f, "set size ratio -1\nunset grid\nunset key\nset border 15\nset tics out\n");
    fprintf(f, "set xrange [-0.5:%lld.5]\nset yrange [%lld.5:-0.5]\n", (long long)n - 1, (long long)n - 1);
    fprintf(f, "set xlabel 'key position j (token)'\nset ylabel 'key position i (token)'\n");
    fprintf(f, "set title 'Cosine similarity of keys, cos(k_i, k_j)'\n");
    fprintf(f, "set cbrange [-1:1]\nset cblabel 'cosine'\n");
    fprintf(f, "set palette defined (-1 '#2166ac', -0.5 '#92c5de', 0 '#f7f7f7', 0.5 '#f4a582', 1 '#b2182b')\n");
    fprintf(f, "plot '%s' using 1:2:3 with image notitle\n\n", data);
    fprintf(f, "# attention on a log colour scale (1e-4 .. 1); NaN (white) above the diagonal\n");
    fprintf(f, "set ylabel 'query position i (token)'\n");
    fprintf(f, "set title 'Attention weight of query i on key j'\n");
    fprintf(f, "set cbrange [-4:0]\nset cblabel 'attention weight (log scale)'\n");
    fprintf(f, "set cbtics ('1e-4' -4, '1e-3' -3, '0.01' -2, '0.1' -1, '1' 0)\n");
    fprintf(f, "set palette defined (0 '#fff7ec', 1 '#fdd49e', 2 '#fc8d59', 3 '#d7301f', 4 '#7f0000')\n");
    fprintf(f, "plot '%s' using 1:2:($4 > 0 ? ($4 < 1e-4 ? -4 : log10($4)) : NaN) with image notitle\n", data);
    fprintf(f, "unset multiplot\n");
}

int plot_fig_detail(const plot_data *d, const plot_ctx *ctx, const char *name, plot_fig_out *out, kv_err *err)
{
    if (!d->present[PF_DETAIL]) return plot_skip(out, "detail.csv is missing from the analysis directory.");
    if (!d->detail.n) return plot_skip(out, "detail.csv has no rows.");
    if (d->detail.n < 2) return plot_skip(out, "detail.csv holds a single token (T = 1): no matrix to draw.");
    char data[64], script[64];
    snprintf(data, sizeof data, "%s.dat", name);
    snprintf(script, sizeof script, "%s.gp", name);
    int rc = write_data(&d->detail, ctx, out, data, err);
    FILE *f;
    if (!rc) rc = plot_open(ctx, script, &f, err);
    if (rc) return rc;
    write_script(f, d, ctx, name, data);
    rc = plot_close(f, ctx, script, err);
    const plot_meta *m = &d->meta;
    snprintf(out->caption, sizeof out->caption,
             "Left: cosine similarity between the keys of the first %lld tokens of layer %lld, kv head %lld "
             "(blue: pointing apart, red: pointing alike). Right: the attention weights of query head %lld over "
             "the same tokens (row = query, column = key; log colour scale; white above the diagonal, where "
             "causality forbids attention). How to read it: bright columns on the right are keys that many "
             "queries attend to (often the attention sink at position 0); when the same columns are blue on the "
             "left, the keys that stand out from the rest are the ones attended to, the premise of KeyDiff.",
             (long long)d->detail.n, (long long)m->detail_layer, (long long)(m->detail_head / (m->H / m->K)),
             (long long)m->detail_head);
    return rc;
}
