#include "plot_style.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/version.h"

/* One colour per policy, the same in every figure (analysis_dir.md). Chosen
 * from the Tableau-10 palette, which stays distinct for colour-blind readers
 * more than the gnuplot defaults; the reference (full) is black. */
static const struct {
    const char *policy, *colour;
} COLOURS[] = {
    {"full", "#000000"},    {"full_cache", "#000000"}, {"keydiff", "#d62728"}, {"knorm", "#ff7f0e"},
    {"streaming", "#1f77b4"}, {"random", "#8c564b"},   {"primekv", "#9467bd"}, {"h2o", "#2ca02c"},
    {"tova", "#17becf"},    {"snapkv", "#e377c2"},     {"oracle", "#bcbd22"},
    /* the ten policies after the first ten (docs/policies.md): the darker Tableau-20c shades, apart from the ten above */
    {"expected_attention", "#393b79"}, {"lagkv", "#637939"},     {"cur", "#8c6d31"},
    {"qfilter", "#843c39"},            {"capkv", "#7b4173"},     {"chunkkv", "#3182bd"},
    {"compactor", "#e6550d"},          {"criticalkv", "#31a354"}, {"scissorhands", "#756bb1"},
    {"kvzip", "#e7ba52"},
};
static const char OTHER_COLOUR[] = "#999999";

/* Allocators (figure 8's per-layer and heat-map panels, where a line is an
 * allocator, not a policy): Tableau-10 too, uniform the black reference. */
static const struct {
    const char *alloc, *colour;
} ALLOC_COLOURS[] = {
    {"uniform", "#000000"}, {"pyramid", "#1f77b4"}, {"adakv", "#d62728"}, {"headkv", "#2ca02c"},
    {"duo", "#9467bd"},     {"cake", "#ff7f0e"},    {"global", "#8c564b"},
};

const char *plot_alloc_colour(const char *alloc)
{
    const size_t n = strcspn(alloc, ":");
    for (size_t i = 0; i < sizeof ALLOC_COLOURS / sizeof ALLOC_COLOURS[0]; i++)
        if (strlen(ALLOC_COLOURS[i].alloc) == n && strncmp(ALLOC_COLOURS[i].alloc, alloc, n) == 0)
            return ALLOC_COLOURS[i].colour;
    return OTHER_COLOUR;
}

const char *plot_policy_colour(const char *policy)
{
    for (size_t i = 0; i < sizeof COLOURS / sizeof COLOURS[0]; i++)
        if (strcmp(COLOURS[i].policy, policy) == 0) return COLOURS[i].colour;
    return OTHER_COLOUR;
}

void plot_tint(const char *hex, double keep, char *out)
{
    unsigned rgb = 0x999999;
    sscanf(hex, "#%6x", &rgb);
    int c[3] = {(int)(rgb >> 16) & 255, (int)(rgb >> 8) & 255, (int)rgb & 255};
    for (int i = 0; i < 3; i++) c[i] = (int)(255 - keep * (255 - c[i]) + 0.5);
    snprintf(out, 8, "#%02x%02x%02x", c[0], c[1], c[2]);
}

int plot_dash_type(int variant)
{
    static const int DT[] = {1, 2, 4, 5, 3};
    return DT[variant % 5];
}

int plot_key_width(size_t longest, int font_pt)
{
    return (int)(7.4 * font_pt / 10.0 * (double)longest) + 90;
}

int plot_point_type(int variant)
{
    static const int PT[] = {7, 5, 9, 13, 11, 15};
    return PT[variant % 6];
}

const char *plot_format_ext(plot_format f)
{
    return f == PLOT_SVG ? "svg" : f == PLOT_PDF ? "pdf" : "png";
}

bool plot_format_parse(const char *s, plot_format *out)
{
    if (strcmp(s, "png") == 0) *out = PLOT_PNG;
    else if (strcmp(s, "svg") == 0) *out = PLOT_SVG;
    else if (strcmp(s, "pdf") == 0) *out = PLOT_PDF;
    else return false;
    return true;
}

void plot_gp_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20 || *s == 0x7f) continue;
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

int plot_open(const plot_ctx *ctx, const char *name, FILE **f, kv_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", ctx->dir, name);
    *f = fopen(path, "w");
    if (!*f) return kv_fail(err, KV_EFAIL, "%s: cannot create: %s", path, strerror(errno));
    return KV_OK;
}

int plot_close(FILE *f, const plot_ctx *ctx, const char *name, kv_err *err)
{
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    if (bad) return kv_fail(err, KV_EFAIL, "%s/%s: write error", ctx->dir, name);
    return KV_OK;
}

static void terminal(FILE *f, plot_format fmt, int width, int height)
{
    /* noenhanced: names like out_rel_err and full_cache must not turn into subscripts */
    if (fmt == PLOT_SVG)
        fprintf(f, "set terminal svg size %d,%d dynamic noenhanced font 'Sans,12' background rgb 'white'\n",
                width, height);
    else if (fmt == PLOT_PDF)
        fprintf(f, "set terminal pdfcairo size %.2fin,%.2fin noenhanced font 'Sans,9'\n", width / 96.0,
                height / 96.0);
    else
        fprintf(f, "set terminal pngcairo size %d,%d noenhanced font 'Sans,10' background rgb 'white'\n", width,
                height);
}

void plot_gp_preamble(FILE *f, const plot_ctx *ctx, const char *name, const char *what, int width, int height)
{
    fprintf(f, "# %s.gp: %s\n", name, what);
    fprintf(f, "# Written by kvtrace %s plot. Restyle freely, then re-run: gnuplot %s.gp\n", KVTRACE_VERSION, name);
    fprintf(f, "# (run it in this directory: the data files are read by relative name)\n\n");
    terminal(f, ctx->format, width, height);
    fprintf(f, "set output '%s.%s'\n", name, plot_format_ext(ctx->format));
    fprintf(f, "set encoding utf8\n");
    fprintf(f, "set style line 100 lc rgb '#dddddd' lw 1\n");
    fprintf(f, "set grid back ls 100\n");
    fprintf(f, "set border 3 lc rgb '#444444'\n");
    fprintf(f, "set tics nomirror out\n");
    fprintf(f, "set key box lc rgb '#cccccc' opaque samplen 2.5 spacing 1.1\n");
    fprintf(f, "set title font ',12'\n\n");
}

void plot_gp_series_style(FILE *f, const char *policy, int variant)
{
    fprintf(f, "lc rgb '%s' dt %d pt %d", plot_policy_colour(policy), plot_dash_type(variant),
            plot_point_type(variant));
}
