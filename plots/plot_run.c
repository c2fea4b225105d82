/* plot_run: the analysis directory in, FIGDIR out — read and validate every
 * input first, then write each figure's script and data into a temporary
 * directory, render it with gnuplot, write report.html, and move the
 * directory into place only when all of it succeeded. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileopen.h"
#include "core/outfile.h"
#include "core/progress.h"
#include "plot.h"
#include "plot_figures.h"
#include "plot_gnuplot.h"
#include "plot_report.h"

static int draw(const plot_data *d, const plot_ctx *ctx, plot_fig_out *figs, bool quiet, kv_err *err)
{
    kv_progress prog;
    progress_start(&prog, "plot", PLOT_N_FIGURES, quiet);
    progress_stage(&prog, "figures");
    int rc = KV_OK;
    for (int i = 0; !rc && i < PLOT_N_FIGURES; i++) {
        const char *name = PLOT_FIGURES[i].name;
        rc = PLOT_FIGURES[i].write(d, ctx, name, &figs[i], err);
        if (!rc && !figs[i].skip[0]) {
            char script[96], image[96];
            snprintf(script, sizeof script, "%s.gp", name);
            snprintf(image, sizeof image, "%s.%s", name, plot_format_ext(ctx->format));
            rc = plot_gnuplot_run(ctx->dir, script, image, err);
        }
        progress_update(&prog, i + 1);
    }
    progress_end(&prog);
    return rc;
}

int plot_run(const plot_opts *o, kv_err *err)
{
    int rc = kv_input_dir_check(o->input, "plot reads the directory kvtrace analyze wrote", err);
    if (rc) return rc;
    plot_data d;
    rc = plot_input_load(&d, o->input, err);
    if (rc) return rc;
    char out[4096];
    if (o->output) snprintf(out, sizeof out, "%s", o->output);
    else snprintf(out, sizeof out, "%s/figures", o->input);
    kv_outfile dir;
    rc = plot_fig_pca_check(&d, o->pca_policies, err);
    const char *inputs[] = {o->input};
    if (!rc) rc = outfile_check_inputs(out, inputs, 1, err);
    if (!rc) rc = outdir_begin(&dir, out, o->force, err);
    if (rc) {
        plot_input_free(&d);
        return rc;
    }
    plot_ctx ctx = {.dir = dir.tmp_path, .format = o->format, .pca_policies = o->pca_policies};
    plot_fig_out *figs = kv_calloc((size_t)PLOT_N_FIGURES, sizeof *figs, "plot: figures", err);
    rc = figs ? draw(&d, &ctx, figs, o->quiet, err) : err->code;
    if (!rc) rc = plot_report_write(&ctx, &d, figs, o->prov, err);
    if (!rc && o->prov) rc = prov_write_json(o->prov, dir.tmp_path, err);
    if (!rc) rc = outdir_commit(&dir, err);
    else outdir_abort(&dir);
    if (!rc && !o->quiet) {
        int drawn = 0;
        for (int i = 0; i < PLOT_N_FIGURES; i++) drawn += !figs[i].skip[0];
        fprintf(stderr, "plot: %d of %d figures and report.html in %s\n", drawn, PLOT_N_FIGURES, dir.final_path);
    }
    free(figs);
    plot_input_free(&d);
    return rc;
}
