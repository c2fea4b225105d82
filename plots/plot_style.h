/* plot_style: the look every figure shares — one colour per policy (the table
 * in plot_style.c), dash and point types per variant of a policy, the
 * terminal, size and fonts — and the small helpers for writing gnuplot
 * scripts and their data files into the figure directory. */
#ifndef KV_PLOT_STYLE_H
#define KV_PLOT_STYLE_H

#include <stdbool.h>
#include <stdio.h>

#include "core/kv_error.h"

typedef enum { PLOT_PNG, PLOT_SVG, PLOT_PDF } plot_format;

typedef struct {
    const char *dir;     /* where the files are written (the temporary FIGDIR) */
    plot_format format;
    const char *pca_policies;  /* --pca-policies LIST, or NULL: figure 3's default panels */
} plot_ctx;

/* "png", "svg", "pdf". */
const char *plot_format_ext(plot_format f);
/* Parses "png", "svg" or "pdf"; false otherwise. */
bool plot_format_parse(const char *s, plot_format *out);

/* "#rrggbb" for a policy name (full_cache shares full's colour; unknown names grey). */
const char *plot_policy_colour(const char *policy);
/* "#rrggbb" for an allocator label (its name before any ':'; unknown names grey). */
const char *plot_alloc_colour(const char *alloc);
/* The colour `hex` ("#rrggbb") mixed with white: share `keep` of the colour (0..1); out holds 8 bytes. */
void plot_tint(const char *hex, double keep, char *out);
/* gnuplot dash and point types of the variant-th configuration of a policy. */
int plot_dash_type(int variant);
int plot_point_type(int variant);
/* The width in pixels of a legend whose longest label has `longest` characters, at font size font_pt of the
 * PNG terminal's Sans (about 7.4 px a character at 10, measured on fidelity.png: 58 characters span 423 px),
 * plus the sample, the marker and the box: what a figure reserves for its legend at the right. */
int plot_key_width(size_t longest, int font_pt);

/* Writes `s` as a single-quoted gnuplot string ('' for a quote; control characters dropped). */
void plot_gp_quote(FILE *f, const char *s);

/* Opens ctx->dir/name for writing; KV_EFAIL naming the file. */
int plot_open(const plot_ctx *ctx, const char *name, FILE **f, kv_err *err);
/* Closes, reporting any write error on the file. */
int plot_close(FILE *f, const plot_ctx *ctx, const char *name, kv_err *err);

/* The first lines of every script: a comment on how to re-run it, the
 * terminal (width x height pixels at 96 dpi), fonts, output name NAME.EXT,
 * and the shared grid and key style. */
void plot_gp_preamble(FILE *f, const plot_ctx *ctx, const char *name, const char *what, int width, int height);

/* The line/point style of a series: "lc rgb '#..' dt N pt N". */
void plot_gp_series_style(FILE *f, const char *policy, int variant);

#endif
