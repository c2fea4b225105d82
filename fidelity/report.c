/* The fidelity figure and report.html (see report.h). */
#include "fidelity/report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/version.h"
#include "fidelity/rank.h"
#include "plots/plot_gnuplot.h"
#include "plots/plot_html.h"
#include "plots/plot_style.h"

/* The first configuration of each (policy, params, allocator) series: one data block per series. */
static bool series_head(const fid_results *r, int i)
{
    for (int j = 0; j < i; j++)
        if (fid_same_series(&r->c[j], &r->c[i])) return false;
    return true;
}

/* Series of the same policy with other params or allocator are its variants 0, 1, ... in order of appearance. */
static int variant_of(const fid_results *r, int i)
{
    int v = 0;
    const fid_config *c = &r->c[i];
    for (int j = 0; j < i; j++) /* each earlier distinct series of the policy once */
        v += r->c[j].pc->iface == c->pc->iface && !fid_same_series(&r->c[j], c) && series_head(r, j);
    return v;
}

static int write_data(const fid_results *r, const plot_ctx *ctx, int *blocks, kv_err *err)
{
    FILE *f;
    int rc = plot_open(ctx, "fidelity.dat", &f, err);
    if (rc) return rc;
    fputs("# one block (index) per policy configuration, one row per budget and chunk:\n"
          "# out_rel_err_mean kl_mean budget attn_recall_mean greedy_agree chunk\n", f);
    *blocks = 0;
    for (int i = 0; i < r->n; i++) {
        if (!series_head(r, i) || !fid_ranked(&r->c[i])) continue;
        fprintf(f, "%s# %s %s %s\n", *blocks ? "\n\n" : "", r->c[i].pc->iface->name, r->c[i].pc->canonical,
                r->c[i].alloc);
        for (int j = i; j < r->n; j++) {
            const fid_config *c = &r->c[j];
            if (!fid_same_series(c, &r->c[i])) continue;
            fprintf(f, "%.9g %.9g %lld %.9g %.9g %lld\n", c->out_rel_err_mean, c->kl_mean, (long long)c->budget,
                    c->attn_recall_mean, c->greedy_agree, (long long)c->chunk);
        }
        (*blocks)++;
    }
    return plot_close(f, ctx, "fidelity.dat", err);
}

/* The legend's label of configuration i: the policy; for a variant its params and allocator (when not uniform). */
static void series_label(const fid_results *r, int i, char *label, size_t cap)
{
    const fid_config *c = &r->c[i];
    const bool v = variant_of(r, i) > 0, params = v && c->pc->canonical[0], alloc = v && !alloc_is_uniform(c->ac);
    snprintf(label, cap, "%s%s%s%s%s", c->pc->iface->name, params ? " " : "", params ? c->pc->canonical : "",
             alloc ? " " : "", alloc ? c->alloc : "");
}

/* The legend's width in pixels (plot_key_width of its longest label). */
static int key_px(const fid_results *r)
{
    size_t longest = 8;
    for (int i = 0; i < r->n; i++) {
        if (!series_head(r, i) || !fid_ranked(&r->c[i])) continue;
        char label[600];
        series_label(r, i, label, sizeof label);
        if (strlen(label) > longest) longest = strlen(label);
    }
    return plot_key_width(longest, 10);
}

/* The axis range of one panel around its points: a factor of 1.6 beyond
 * them on a log axis, 0 to 10% above the highest on a linear one. */
static void panel_range(FILE *f, const fid_results *r, int64_t budget, int64_t chunk, bool logscale, bool y)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < r->n; i++) {
        const fid_config *c = &r->c[i];
        if (!fid_ranked(c) || c->budget != budget || c->chunk != chunk) continue;
        const double v = y ? c->kl_mean : c->out_rel_err_mean;
        if (isfinite(v)) lo = v < lo ? v : lo, hi = v > hi ? v : hi;
    }
    if (!(hi >= lo)) fprintf(f, "set %crange [*:*]\n", y ? 'y' : 'x');
    else if (logscale) fprintf(f, "set %crange [%.6g:%.6g]\n", y ? 'y' : 'x', lo / 1.6, hi * 1.6);
    else fprintf(f, "set %crange [0:%.6g]\n", y ? 'y' : 'x', hi > 0 ? hi * 1.1 : 1.0);
}

/* One panel per budget and chunk (within-budget ρ is the headline, and no point labels
 * can overlap): x offline error, y online KL, one colour (and point type per
 * variant) per policy, the key once at the right. */
static void panel(FILE *f, const fid_results *r, const fid_headline *h, int b, bool first, bool last, bool logscale)
{
    char t[32], g[64];
    const fid_rank *k = &h->within[b];
    fprintf(f, "set title \"%s: rho = %s\\n%lld of %lld pairs mis-ordered\"\n", fid_group_text(h, b, g, 64),
            fid_rho_text(k->rho_err, t, 32), (long long)k->misordered, (long long)k->pairs);
    panel_range(f, r, h->budget[b], h->chunk[b], logscale, false);
    panel_range(f, r, h->budget[b], h->chunk[b], logscale, true);
    if (last) fprintf(f, "set key at screen 0.995, screen 0.84 top right maxrows %d\n", r->n);
    else fprintf(f, "unset key\n");
    if (!first) fprintf(f, "unset ylabel\n");
    fputs("plot ", f);
    int blk = 0;
    for (int i = 0; i < r->n; i++) {
        if (!series_head(r, i) || !fid_ranked(&r->c[i])) continue;
        const fid_config *c = &r->c[i];
        char label[600];
        series_label(r, i, label, sizeof label);
        fprintf(f, "%s'fidelity.dat' index %d using ($3 == %lld && $6 == %lld ? $1 : NaN):2 with points ps 1.6 lc "
                   "rgb '%s' pt %d title ", blk ? ", \\\n     " : "", blk, (long long)h->budget[b], (long long)h->chunk[b],
                plot_policy_colour(c->pc->iface->name), plot_point_type(variant_of(r, i)) | 1);
        plot_gp_quote(f, label);
        blk++;
    }
    fputs("\n", f);
}

static void write_script(FILE *f, const fid_results *r, const plot_ctx *ctx, bool logscale)
{
    fid_headline h;
    fid_headline_compute(r, &h);
    int drawn = 0;   /* a budget with no ranked configuration (sim measured no query: N >= T) has no panel */
    for (int b = 0; b < h.n; b++) drawn += h.within[b].n_configs > 0;
    const int key = key_px(r);   /* the legend's own column at the right, as wide as its labels */
    const int cols = drawn < 3 ? drawn : 3, rows = (drawn + 2) / 3;
    const int width = 400 * cols + 30 + key, height = 400 * rows + 110;
    plot_gp_preamble(f, ctx, "fidelity", "offline output error versus online KL, one panel per budget", width, height);
    char t1[32], t2[32];
    fprintf(f, "set multiplot layout %d,%d margins %.3f,%.3f,%.3f,%.3f spacing 0.06,0.16 title \"Offline replay vs "
               "eviction inside the model, one point per configuration: Spearman rho within each budget (mean %s)\\n"
               "(pooled over all budgets rho = %s, inflated by the budget effect: a larger N lowers both error and "
               "KL)\" font ',11'\n",
            rows, cols, 70.0 / width, 1.0 - (key + 24.0) / width, 55.0 / height, 1.0 - 95.0 / height,
            fid_rho_text(h.rho_err, t1, 32), fid_rho_text(h.pooled.rho_err, t2, 32));
    fprintf(f, "set xlabel 'offline: sim out_rel_err, mean'\n");
    fprintf(f, "set ylabel 'online: KL(p_full || p_evict), mean (nats)'\n");
    if (logscale) fprintf(f, "set logscale xy 10\nset format xy '%%g'\n");
    for (int b = 0, k = 0; b < h.n; b++)
        if (h.within[b].n_configs > 0) panel(f, r, &h, b, k == 0, k == drawn - 1, logscale), k++;
    fprintf(f, "unset multiplot\n");
    fid_headline_free(&h);
}

int fid_write_figure(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err)
{
    (void)o;
    plot_ctx ctx = {.dir = dir, .format = PLOT_PNG};
    int blocks = 0;
    int rc = write_data(r, &ctx, &blocks, err);
    if (rc || blocks == 0) return rc; /* nothing evicts: no figure */
    bool logscale = true;
    for (int i = 0; i < r->n; i++)
        if (fid_ranked(&r->c[i]) && !(r->c[i].out_rel_err_mean > 0 && r->c[i].kl_mean > 0)) logscale = false;
    FILE *f;
    if ((rc = plot_open(&ctx, "fidelity.gp", &f, err))) return rc;
    write_script(f, r, &ctx, logscale);
    if ((rc = plot_close(f, &ctx, "fidelity.gp", err))) return rc;
    return plot_gnuplot_run(dir, "fidelity.gp", "fidelity.png", err);
}

/* ---- report.html ---------------------------------------------------------- */

static void table_row(FILE *f, const fid_results *r, const fid_config *c)
{
    fputs("<tr><td>", f);
    plot_html_escape(f, c->pc->iface->name);
    fputs("</td><td>", f);
    plot_html_escape(f, c->pc->canonical);
    fputs("</td><td>", f);
    plot_html_escape(f, c->alloc);
    fprintf(f, "</td><td class=num>%lld</td><td class=num>%.4g</td><td class=num>%.4g</td><td class=num>%.1f%%</td>"
               "<td class=num>%.3f</td><td class=num>%.4g</td><td class=num>%.4f</td></tr>\n",
            (long long)c->budget, c->kl_mean, c->kl_p95, 100.0 * c->greedy_agree, c->ppl_evict - r->ppl_full,
            c->out_rel_err_mean, c->attn_recall_mean);
}

static void pairs_list(FILE *f, const fid_results *r)
{
    fputs("<ul>\n", f);
    int n = 0;
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < r->n; j++) {
            const fid_config *a = &r->c[i], *b = &r->c[j];
            if (!fid_misordered(a, b)) continue;
            fprintf(f, "<li>N = %lld: offline prefers <b>", (long long)a->budget);
            plot_html_escape(f, a->pc->iface->name);
            fputs("</b> <code>", f);
            plot_html_escape(f, a->pc->canonical);
            fputs(" ", f);
            plot_html_escape(f, a->alloc);
            fprintf(f, "</code> (err %.4g vs %.4g) over <b>", a->out_rel_err_mean, b->out_rel_err_mean);
            plot_html_escape(f, b->pc->iface->name);
            fputs("</b> <code>", f);
            plot_html_escape(f, b->pc->canonical);
            fputs(" ", f);
            plot_html_escape(f, b->alloc);
            fprintf(f, "</code>, but in the model its KL is higher (%.4g vs %.4g)</li>\n", a->kl_mean, b->kl_mean);
            n++;
        }
    if (!n) fputs("<li>none: offline replay orders every pair of policies as the model does</li>\n", f);
    fputs("</ul>\n", f);
}

/* The headline: ρ within each budget (a table), then the pooled ρ, labelled. */
static void rank_section(FILE *f, const fid_results *r)
{
    fid_headline h;
    fid_headline_compute(r, &h);
    char t[32];
    fputs("<h2>How well offline replay ranks policies</h2>\n<p>Spearman &rho; between sim's out_rel_err and the "
          "online KL <b>within each budget</b> (the question a user asks: at this N, which policy is better?):</p>\n"
          "<table><tr><th>group</th><th>configurations</th><th>&rho;(out_rel_err, KL)</th>"
          "<th>&rho;(1 &minus; attn_recall, KL)</th><th>pairs mis-ordered</th></tr>\n", f);
    for (int b = 0; b < h.n; b++) {
        const fid_rank *k = &h.within[b];
        char g[64];
        fprintf(f, "<tr><td>%s</td><td class=num>%lld</td><td class=num><b>%s</b></td>", fid_group_text(&h, b, g, 64),
                (long long)k->n_configs, fid_rho_text(k->rho_err, t, 32));
        fprintf(f, "<td class=num>%s</td><td class=num>%lld of %lld</td></tr>\n", fid_rho_text(k->rho_recall, t, 32),
                (long long)k->misordered, (long long)k->pairs);
    }
    fprintf(f, "</table>\n<p>Mean over the budgets: <b>%s</b>", fid_rho_text(h.rho_err, t, 32));
    fprintf(f, " (with 1 &minus; attn_recall: %s). ", fid_rho_text(h.rho_recall, t, 32));
    fprintf(f, "Pooled over all %lld configurations of every budget, &rho; = %s", (long long)h.pooled.n_configs,
            fid_rho_text(h.pooled.rho_err, t, 32));
    fprintf(f, " (%s): higher, but inflated by the budget effect, since a larger N lowers both the offline error "
               "and the online KL, so the budget alone ranks most pairs across budgets. %lld of %lld same-budget "
               "pairs are ordered the other way round in the model:</p>\n",
            fid_rho_text(h.pooled.rho_recall, t, 32), (long long)h.misordered, (long long)h.pairs);
    fid_headline_free(&h);
}

int fid_write_report(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err)
{
    plot_ctx ctx = {.dir = dir, .format = PLOT_PNG};
    FILE *f;
    int rc = plot_open(&ctx, "report.html", &f, err);
    if (rc) return rc;
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>kvtrace fidelity: ", f);
    plot_html_escape(f, o->seq.model);
    fputs("</title>\n<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
          "table{border-collapse:collapse;font-size:.92em}th,td{border:1px solid #ddd;padding:.25em .6em}"
          "th{background:#f4f4f4}td.num{text-align:right}pre{background:#f6f8fa;padding:.6em;white-space:pre-wrap}"
          "img{max-width:100%}</style>\n</head>\n<body>\n<h1>Fidelity: offline replay vs eviction inside the model</h1>\n", f);
    fputs("<p>Model <code>", f);
    plot_html_escape(f, o->seq.model);
    char chunks[400] = "";
    for (int k = 0, used = 0; k < o->n_chunks && used < (int)sizeof chunks - 24; k++)
        used += snprintf(chunks + used, sizeof chunks - (size_t)used, "%s%lld", k ? ", " : "", (long long)o->chunks[k]);
    fprintf(f, "</code>, %lld tokens (prompt %lld, in chunks of B = %s, then one token per step), teacher-forced; "
               "full-cache perplexity %.4f. Written by kvtrace %s.</p>\n", (long long)r->T, (long long)r->prompt_len,
            chunks, r->ppl_full, KVTRACE_VERSION);
    if (o->prov) {
        fputs("<pre>", f);
        plot_html_escape(f, o->prov->command);
        fputs("</pre>\n", f);
    }
    rank_section(f, r);
    pairs_list(f, r);
    fputs("<figure><img src=\"fidelity.png\" alt=\"offline error vs online KL\"><figcaption>One point per "
          "configuration, one panel per budget N (panel title: its Spearman &rho; and mis-ordered pairs), one colour "
          "per policy; a policy above and to the left of another is one that offline replay underrates. Data "
          "fidelity.dat, script fidelity.gp."
          "</figcaption></figure>\n", f);
    fputs("<h2>Per configuration</h2>\n<table><tr><th>policy</th><th>params</th><th>allocator</th><th>N</th><th>KL mean</th>"
          "<th>KL p95</th><th>greedy agree</th><th>&Delta; ppl</th><th>out_rel_err</th><th>attn_recall</th></tr>\n", f);
    for (int i = 0; i < r->n; i++) table_row(f, r, &r->c[i]);
    fputs("</table>\n<p>KL and agreement over positions t &ge; N; perplexity over the whole sequence. Files: "
          "fidelity.csv, positions.csv, summary.csv, misordered.csv, full.h5 (the full-cache trace), sim/ "
          "(sim's results on it).</p>\n</body>\n</html>\n", f);
    return plot_close(f, &ctx, "report.html", err);
}
