/* `kvtrace plot`: command line of the figure and report writer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "plot.h"

static const char USAGE[] =
    "usage: kvtrace plot DIR [-o FIGDIR] [--format png|svg|pdf] [--force] [--quiet]\n"
    "\n"
    "Draws the figures of SPEC §9 from an analysis directory written by kvtrace analyze, with\n"
    "gnuplot, and writes report.html beside them (one offline page with every figure, captions,\n"
    "the trace's metadata, the commands and the summary table). Each figure is a gnuplot script\n"
    "figN_NAME.gp plus its data file(s): cd FIGDIR && gnuplot fig5_error.gp redraws one (docs/plot.md).\n"
    "\n"
    "  fig1_detail    key cosine similarity beside attention, first 64 tokens of the detail head\n"
    "  fig2_spearman  Spearman rho per layer (rho_pairwise, rho_anchor)\n"
    "  fig3_pca       PCA of keys kept vs evicted: streaming, tova, keydiff\n"
    "  fig4_logdet    log-det of the final cache per policy and budget\n"
    "  fig5_error     out_rel_err (log axis) and attn_recall versus budget\n"
    "  fig6_timing    scoring time per candidate versus budget\n"
    "  fig7_layers    out_rel_err per layer at the smallest evicting budget\n"
    "\n"
    "  -o, --output FIGDIR  output directory (default DIR/figures)\n"
    "  --format F           png (default, 1200x500), svg or pdf\n"
    "  --force              replace an existing FIGDIR\n"
    "  --quiet              no progress or closing line on stderr\n"
    "  -h, --help           this text\n";

static int parse_format(const char *verb, const char *arg, void *opts, kv_err *err)
{
    plot_opts *o = opts;
    if (!plot_format_parse(arg, &o->format))
        return cli_usage(err, verb, "--format must be png, svg or pdf, got '%s'", arg);
    return KV_OK;
}

static const cli_opt OPTIONS[] = {
    {CLI_ROW("output", CLI_TEXT, plot_opts, output)},
    {.name = "format", .kind = CLI_CUSTOM, .parse = parse_format},
    {CLI_ROW("force", CLI_FLAG, plot_opts, force)},
    {CLI_ROW("quiet", CLI_FLAG, plot_opts, quiet)},
    {0},
};

int plot_main(int argc, char **argv)
{
    kv_err err = {0};
    plot_opts o = {.format = PLOT_PNG};
    const char *v = "plot";
    bool help = false;
    int first;
    int rc = cli_opts_parse(v, argc, argv, OPTIONS, &o, &help, &first, &err);
    if (!rc && help) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!rc && first + 1 != argc)
        rc = cli_usage(&err, v, first >= argc ? "missing DIR (an analysis directory)" : "expects exactly one DIR");
    if (!rc) {
        o.input = argv[first];
        char *command = cli_command_line(argc, argv);
        o.command = command;
        rc = command ? plot_run(&o, &err) : kv_fail(&err, KV_EFAIL, "plot: out of memory");
        free(command);
    }
    return rc ? cli_report(&err) : 0;
}
