#include "plot_report.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/csv.h"
#include "core/version.h"
#include "results/results_schema.h"
#include "plot_html.h"

static const char CSS[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;max-width:1240px;"
    "margin:2em auto;padding:0 1em;color:#222;line-height:1.45}\n"
    "h1{font-size:1.7em;margin-bottom:.1em}h2{font-size:1.3em;margin-top:1.8em;border-bottom:1px solid #ddd}\n"
    ".sub{color:#666;margin-top:0}\n"
    "table{border-collapse:collapse;font-size:.92em;margin:.5em 0}\n"
    "th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}\n"
    "th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}\n"
    "pre{background:#f6f8fa;padding:.6em .8em;overflow-x:auto;white-space:pre-wrap;word-break:break-all}\n"
    "figure{margin:1em 0 2em 0}figure img{max-width:100%;border:1px solid #eee}\n"
    "figcaption{margin-top:.4em;color:#333}.files{display:block;color:#666;font-size:.9em;margin-top:.3em}\n"
    ".skipped{background:#fff8e1;border-left:4px solid #f0b400;padding:.5em .8em}\n"
    "nav ol{columns:2}\n";

static bool exists(const plot_ctx *ctx, const char *name)
{
    char path[4400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", ctx->dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* <a href="NAME">NAME</a> when the file exists; the bare name (no link) otherwise. */
static void link(FILE *f, const plot_ctx *ctx, const char *name)
{
    if (exists(ctx, name)) {
        fputs("<a href=\"", f);
        plot_html_escape(f, name);
        fputs("\">", f);
        plot_html_escape(f, name);
        fputs("</a>", f);
    } else {
        plot_html_escape(f, name);
    }
}

static void head(FILE *f, const plot_data *d)
{
    const char *model = plot_meta_get(&d->meta, "model");
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", f);
    fputs("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>kvtrace report: ", f);
    plot_html_escape(f, model);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", CSS);
    fputs("<h1>kvtrace report: ", f);
    plot_html_escape(f, model);
    fputs("</h1>\n<p class=\"sub\">KV-cache eviction analysis of trace <code>", f);
    plot_html_escape(f, plot_meta_get(&d->meta, "trace"));
    fprintf(f, "</code>: %lld layers, %lld query heads, %lld kv heads, head dim %lld, %lld tokens.</p>\n",
            (long long)d->meta.L, (long long)d->meta.H, (long long)d->meta.K, (long long)d->meta.D,
            (long long)d->meta.T);
}

static void contents(FILE *f, const plot_fig_out *figs)
{
    fputs("<nav><ol>\n<li><a href=\"#trace\">Trace and commands</a></li>\n", f);
    for (int i = 0; i < PLOT_N_FIGURES; i++)
        fprintf(f, "<li><a href=\"#%s\">%s</a>%s</li>\n", PLOT_FIGURES[i].name, PLOT_FIGURES[i].title,
                figs[i].skip[0] ? " (not drawn)" : "");
    fputs("<li><a href=\"#summary\">Summary table</a></li>\n<li><a href=\"#spans\">Span table</a></li>\n"
          "</ol></nav>\n", f);
}

static void meta_and_commands(FILE *f, const plot_data *d, const prov_record *prov)
{
    fputs("<h2 id=\"trace\">Trace and commands</h2>\n<table>\n<tr><th>key</th><th>value</th></tr>\n", f);
    for (size_t r = 0; r < d->meta.csv.n_rows; r++) {
        fputs("<tr><td>", f);
        plot_html_escape(f, csv_cell(&d->meta.csv, r, 0));
        fputs("</td><td>", f);
        plot_html_escape(f, csv_cell(&d->meta.csv, r, 1));
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n<p>The commands that produced this report, as they were typed, in order (their paths are "
          "relative to the directory they ran in; provenance.json beside this page has each input's sha256):</p>\n"
          "<pre class=\"commands\">", f);
    for (int i = 0; prov && i < prov->n_steps; i++) {
        plot_html_escape(f, prov->steps[i].command);
        fputc('\n', f);
    }
    if (prov) plot_html_escape(f, prov->command);
    fputs("</pre>\n", f);
}

static void figure(FILE *f, const plot_ctx *ctx, int i, const plot_fig_out *out)
{
    const char *name = PLOT_FIGURES[i].name;
    char image[96], script[96];
    snprintf(image, sizeof image, "%s.%s", name, plot_format_ext(ctx->format));
    snprintf(script, sizeof script, "%s.gp", name);
    fprintf(f, "<figure id=\"%s\">\n<h2>Figure %d. %s</h2>\n", name, i + 1, PLOT_FIGURES[i].title);
    if (out->skip[0] || !exists(ctx, image)) {
        fputs("<p class=\"skipped\">Not drawn: ", f);
        plot_html_escape(f, out->skip[0] ? out->skip : "the image is missing.");
        fputs("</p>\n</figure>\n", f);
        return;
    }
    if (ctx->format == PLOT_PDF)
        fprintf(f, "<object data=\"%s\" type=\"application/pdf\" width=\"100%%\" height=\"520\">"
                   "<a href=\"%s\">%s</a></object>\n", image, image, image);
    else
        fprintf(f, "<a href=\"%s\"><img src=\"%s\" alt=\"%s\"></a>\n", image, image, PLOT_FIGURES[i].title);
    fputs("<figcaption>", f);
    plot_html_escape(f, out->caption);
    fputs("\n<span class=\"files\">Image ", f);
    link(f, ctx, image);
    fputs("; gnuplot script ", f);
    link(f, ctx, script);
    fputs(" with data ", f);
    for (int k = 0; k < out->n_data; k++) {
        if (k) fputs(", ", f);
        link(f, ctx, out->data[k]);
    }
    fprintf(f, " (restyle: <code>cd</code> into this directory, edit, run <code>gnuplot %s</code>).</span>"
               "</figcaption>\n</figure>\n", script);
}

static void summary(FILE *f, const plot_data *d)
{
    fputs("<h2 id=\"summary\">Summary table</h2>\n", f);
    if (!d->n_summary) {
        fprintf(f, "<p class=\"skipped\">No summary: %s</p>\n",
                d->present[PF_SUMMARY] ? "summary.csv has no phase=all rows."
                                       : "summary.csv is missing (analyze ran without --results).");
        return;
    }
    int same = 0;
    for (size_t i = 0; i < d->n_summary; i++) same += d->summary[i].same_as[0] != 0;
    fputs("<p>From summary.csv, phase = all: means over layers, query heads and evaluated queries; final_logdet "
          "over layers and kv heads.", f);
    if (same)
        fprintf(f, " <b>%d row%s kept exactly the positions of an earlier configuration at every step</b> (the "
                   "column \"same as\"): their results are that configuration's, whatever their labels say.", same,
                same > 1 ? "s" : "");
    fputs("</p>\n<table>\n<tr><th>policy</th><th>params</th><th>allocator</th><th>chunk</th><th>budget</th>"
          "<th>out_rel_err_mean</th><th>attn_recall_mean</th><th>final_logdet_mean</th><th>same as</th></tr>\n", f);
    for (size_t i = 0; i < d->n_summary; i++) {
        const plot_summary *s = &d->summary[i];
        const plot_series *p = &d->series.s[s->series];
        fputs("<tr><td>", f);
        plot_html_escape(f, p->policy);
        fputs("</td><td>", f);
        plot_html_escape(f, p->params);
        fputs("</td><td>", f);
        plot_html_escape(f, p->alloc);
        fprintf(f, "</td><td class=\"num\">%lld</td><td class=\"num\">%lld</td><td class=\"num\">%.4g</td>"
                   "<td class=\"num\">%.4f</td><td class=\"num\">%.4g</td><td>", (long long)s->chunk,
                (long long)s->budget, s->err_mean, s->recall_mean, s->logdet_mean);
        plot_html_escape(f, s->same_as);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* "mean [lo, hi]" (just the mean without an interval: one trace) */
static void mean_ci(FILE *f, const plot_span *s, int k)
{
    fprintf(f, "<td class=\"num\">%.4f", s->mean[k]);
    if (s->n_traces > 1) fprintf(f, " [%.4f, %.4f]", s->lo[k], s->hi[k]);
    fputs("</td>", f);
}

/* The span table: every row of spans_summary.csv, in file order (span, configuration, budget, chunk). */
static void spans(FILE *f, const plot_data *d)
{
    fputs("<h2 id=\"spans\">Span table</h2>\n", f);
    if (!d->n_spans) {
        fprintf(f, "<p class=\"skipped\">No spans: %s</p>\n",
                d->present[PF_SPANS_SUMMARY] ? "spans_summary.csv has no rows."
                                             : "spans_summary.csv is missing (the traces have no spans).");
        return;
    }
    fputs("<p>From spans_summary.csv: each trace's value is its mean over layers and kv heads; the cell is the mean "
          "over the traces holding the span, then (several traces) its 95% percentile bootstrap interval over them "
          "[lo, hi].</p>\n<table>\n<tr><th>span</th><th>policy</th><th>params</th><th>allocator</th><th>budget</th>"
          "<th>chunk</th><th>traces</th><th>retention_mean</th><th>retention_final</th><th>attn_recall</th></tr>\n", f);
    for (size_t i = 0; i < d->n_spans; i++) {
        const plot_span *s = &d->spans[i];
        const plot_series *p = &d->series.s[s->series];
        const char *cells[4] = {d->span_names[s->span], p->policy, p->params, p->alloc};
        fputs("<tr>", f);
        for (int c = 0; c < 4; c++) fputs("<td>", f), plot_html_escape(f, cells[c]), fputs("</td>", f);
        fprintf(f, "<td class=\"num\">%lld</td><td class=\"num\">%lld</td><td class=\"num\">%lld</td>",
                (long long)s->budget, (long long)s->chunk, (long long)s->n_traces);
        for (int k = 0; k < PLOT_SPAN_STATS; k++) mean_ci(f, s, k);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* analyze --baseline's paired.csv, when the directory has one: the headline measures (error, recall, each span's
 * final retention) as a table, a difference whose interval excludes 0 in bold. */
static int paired(FILE *f, const plot_data *d, kv_err *err)
{
    csv_table c;
    bool present = false;
    int rc = csv_read(&c, d->dir, RESULTS_SCHEMA_PAIRED.file, &present, err);
    const results_dims dims = {.L = d->meta.L, .H = d->meta.H, .K = d->meta.K, .T = d->meta.T};
    if (!rc && present) rc = results_schema_check(&c, &RESULTS_SCHEMA_PAIRED, &dims, NULL, err);
    if (rc || !present || !c.n_rows) {
        csv_free(&c);
        return rc;
    }
    fputs("<h2 id=\"paired\">Paired differences against the baseline</h2>\n<p>From paired.csv (analyze --baseline): "
          "each configuration minus the baseline at the same budget and chunk, paired by trace, with the 95% "
          "bootstrap interval of the mean difference over the traces; <b>bold</b>: the interval excludes 0. "
          "Error (lower is better), recall and each span's final retention (higher is better); every measure is "
          "in the file.</p>\n<table>\n<tr><th>configuration</th><th>allocator</th><th>chunk</th><th>budget</th>"
          "<th>baseline</th><th>measure</th><th>traces</th><th>difference [95% CI]</th></tr>\n", f);
    for (size_t r = 0; r < c.n_rows; r++) {
        const char *metric = csv_cell(&c, r, 6);
        const size_t n = strlen(metric);
        if (strcmp(metric, "out_rel_err_mean") != 0 && strcmp(metric, "attn_recall_mean") != 0 &&
            !(n > 16 && strcmp(metric + n - 16, ":retention_final") == 0))
            continue;
        double v[3];
        for (int k = 0; k < 3; k++) csv_double(&c, r, 10 + k, true, &v[k], err);
        const bool clear = v[1] > 0 || v[2] < 0;
        fputs("<tr>", f);
        for (int k = 1; k < 4; k++) fputs("<td>", f), plot_html_escape(f, csv_cell(&c, r, k)), fputs("</td>", f);
        fputs("<td class=\"num\">", f), plot_html_escape(f, csv_cell(&c, r, 4)), fputs("</td><td>", f);
        plot_html_escape(f, csv_cell(&c, r, 5)), fputs("</td><td>", f), plot_html_escape(f, metric);
        fprintf(f, "</td><td class=\"num\">%s</td><td class=\"num\">%s%.4g [%.4g, %.4g]%s</td></tr>\n", csv_cell(&c, r, 7),
                clear ? "<b>" : "", v[0], v[1], v[2], clear ? "</b>" : "");
    }
    fputs("</table>\n", f);
    csv_free(&c);
    return KV_OK;
}

int plot_report_write(const plot_ctx *ctx, const plot_data *d, const plot_fig_out *figs, const prov_record *prov,
                      kv_err *err)
{
    FILE *f;
    int rc = plot_open(ctx, "report.html", &f, err);
    if (rc) return rc;
    head(f, d);
    contents(f, figs);
    meta_and_commands(f, d, prov);
    for (int i = 0; i < PLOT_N_FIGURES; i++) figure(f, ctx, i, &figs[i]);
    summary(f, d);
    spans(f, d);
    if ((rc = paired(f, d, err))) {
        fclose(f);
        return rc;
    }
    fprintf(f, "<p class=\"sub\">Written by kvtrace %s plot. Figures are gnuplot scripts with their data beside "
               "them in this directory.</p>\n</body>\n</html>\n", KVTRACE_VERSION);
    return plot_close(f, ctx, "report.html", err);
}
