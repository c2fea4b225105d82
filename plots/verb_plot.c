/* `kvtrace plot`: command line of the figure and report writer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "plot.h"
#include "plot_figures.h"
#include "plot_input.h"

static const char USAGE[] =
    "usage: kvtrace plot DIR [-o FIGDIR] [--format png|svg|pdf] [--pca-policies LIST] [--force] [--quiet]\n"
    "\n"
    "Draws the figures from an analysis directory written by kvtrace analyze, with\n"
    "gnuplot, and writes report.html beside them (one offline page with every figure, captions,\n"
    "the trace's metadata, the commands, the summary table and, with spans, the span table). Each\n"
    "figure is a gnuplot script figN_NAME.gp plus its data file(s): cd FIGDIR && gnuplot fig5_error.gp\n"
    "redraws one (docs/plot.md).\n"
    "\n"
    "  fig1_detail    key cosine similarity beside attention, first 64 tokens of the detail head\n"
    "  fig2_spearman  Spearman rho per layer (rho_pairwise, rho_anchor)\n"
    "  fig3_pca       PCA of keys kept vs evicted, one panel per --pca-policies entry\n"
    "  fig4_logdet    log-det of the final cache per policy and budget\n"
    "  fig5_error     out_rel_err (log axis) and attn_recall versus budget\n"
    "  fig6_timing    scoring time per candidate versus budget\n"
    "  fig7_layers    out_rel_err per layer at the smallest evicting budget\n"
    "  fig8_alloc     budgets per layer and head, and error versus memory (allocators)\n"
    "  fig9_chunks    out_rel_err versus the prefill chunk (sim --chunks)\n"
    "  fig10_spans    span retention and attention recall versus budget (traces with spans)\n"
    "\n"
    "  -o, --output FIGDIR  output directory (default DIR/figures)\n"
    "  --format F           png (default, 1200x500), svg or pdf\n"
    "  --pca-policies LIST  fig3's panels, comma-separated, at most 8 (default streaming,tova,keydiff,\n"
    "                       those present): a policy name (its first configuration) or a full config\n"
    "                       label as in the config column (keydiff:anchor=norm:metric=cos:window=0.2);\n"
    "                       an entry that matches no run is a usage error\n"
    "  --force              replace an existing FIGDIR\n"
    "  --quiet              no progress or closing line on stderr\n"
    "  --timestamp          record the time in FIGDIR/provenance.json (SOURCE_DATE_EPOCH, when set,\n"
    "                       gives it; otherwise no time is recorded, docs/provenance.md)\n"
    "  -h, --help           this text\n";

/* What the command line fills. */
typedef struct {
    plot_opts o;
    bool timestamp;
} plot_args;

static int parse_format(const char *verb, const char *arg, void *opts, kv_err *err)
{
    plot_opts *o = &((plot_args *)opts)->o;
    if (!plot_format_parse(arg, &o->format))
        return cli_usage(err, verb, "--format must be png, svg or pdf, got '%s'", arg);
    return KV_OK;
}

/* The list's form only; whether each entry names a run is known after reading (plot_fig_pca_check). */
static int parse_pca(const char *verb, const char *arg, void *opts, kv_err *err)
{
    (void)verb;
    plot_pca_list l;
    int rc = plot_pca_parse(arg, &l, err);
    if (!rc) ((plot_opts *)opts)->pca_policies = arg;
    return rc;
}

static const cli_opt OPTIONS[] = {
    {CLI_ROW("output", CLI_TEXT, plot_args, o.output)},
    {.name = "format", .kind = CLI_CUSTOM, .parse = parse_format},
    {.name = "pca-policies", .kind = CLI_CUSTOM, .parse = parse_pca},
    {CLI_ROW("force", CLI_FLAG, plot_args, o.force)},
    {CLI_ROW("quiet", CLI_FLAG, plot_args, o.quiet)},
    {CLI_ROW("timestamp", CLI_FLAG, plot_args, timestamp)},
    {0},
};

/* The record of the figures: the command, each file of the analysis
 * directory that plot reads, and the commands that made them. */
static int provenance(prov_record *p, const char *dir, bool timestamp, kv_err *err)
{
    int rc = prov_set_time(p, timestamp, err);
    for (int i = 0; !rc && i < PF_N; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, PLOT_FILES[i]);
        if (access(path, R_OK) == 0) rc = prov_add_file(p, "analysis", path, NULL, err);
    }
    return rc ? rc : prov_add_upstream_dir(p, dir, err);
}

int plot_main(int argc, char **argv)
{
    kv_err err = {0};
    plot_args a = {.o = {.format = PLOT_PNG}};
    const char *v = "plot";
    bool help = false;
    prov_record prov;
    int rc = prov_begin(&prov, argc, argv, &err); /* the words as typed, before getopt permutes them */
    if (rc) return cli_exit(rc, &err);
    int first;
    rc = cli_opts_parse(v, argc, argv, OPTIONS, &a, &help, &first, &err);
    if (!rc && help) {
        fputs(USAGE, stdout);
        prov_free(&prov);
        return 0;
    }
    if (!rc && first + 1 != argc)
        rc = cli_usage(&err, v, first >= argc ? "missing DIR (an analysis directory)" : "expects exactly one DIR");
    if (!rc) rc = provenance(&prov, argv[first], a.timestamp, &err);
    if (!rc) {
        a.o.input = argv[first];
        a.o.prov = &prov;
        rc = plot_run(&a.o, &err);
    }
    prov_free(&prov);
    return cli_exit(rc, &err);
}
