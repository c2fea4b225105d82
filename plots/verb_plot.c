/* `kvtrace plot`: command line of the figure and report writer. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
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
    "  fig5_error     out_rel_err and attn_recall versus budget\n"
    "  fig6_timing    scoring time per candidate versus budget\n"
    "\n"
    "  -o, --output FIGDIR  output directory (default DIR/figures)\n"
    "  --format F           png (default, 1200x500), svg or pdf\n"
    "  --force              replace an existing FIGDIR\n"
    "  --quiet              no progress or closing line on stderr\n"
    "  -h, --help           this text\n";

enum { OPT_FORMAT = 256, OPT_FORCE, OPT_QUIET };

static const struct option OPTIONS[] = {
    {"output", required_argument, NULL, 'o'}, {"format", required_argument, NULL, OPT_FORMAT},
    {"force", no_argument, NULL, OPT_FORCE},  {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
};

int plot_main(int argc, char **argv)
{
    kv_err err = {0};
    plot_opts o = {.format = PLOT_PNG};
    const char *v = "plot";
    bool help = false;
    optind = 1;
    opterr = 0;
    int c, rc = KV_OK;
    while (!rc && (c = getopt_long(argc, argv, ":o:h", OPTIONS, NULL)) != -1) {
        switch (c) {
        case 'o': o.output = optarg; break;
        case OPT_FORMAT:
            if (!plot_format_parse(optarg, &o.format))
                rc = cli_usage(&err, v, "--format must be png, svg or pdf, got '%s'", optarg);
            break;
        case OPT_FORCE: o.force = true; break;
        case OPT_QUIET: o.quiet = true; break;
        case 'h': help = true; break;
        default: rc = cli_bad_option(&err, v, c, optopt, argv[optind - 1]); break;
        }
    }
    if (!rc && help) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!rc && optind + 1 != argc)
        rc = cli_usage(&err, v, optind >= argc ? "missing DIR (an analysis directory)" : "expects exactly one DIR");
    if (!rc) {
        o.input = argv[optind];
        char *command = cli_command_line(argc, argv);
        o.command = command;
        rc = command ? plot_run(&o, &err) : kv_fail(&err, KV_EFAIL, "plot: out of memory");
        free(command);
    }
    return rc ? cli_report(&err) : 0;
}
