/* The six figures of SPEC §9 in report order (see plot_figures.h); what
 * they share is in plot_fig_util.c. */
#include "plot_figures.h"

const plot_figure PLOT_FIGURES[] = {
    {"fig1_detail", "Key similarity and attention", plot_fig_detail},
    {"fig2_spearman", "Key distinctiveness versus attention (Spearman ρ)", plot_fig_spearman},
    {"fig3_pca", "Kept and evicted keys in PCA space", plot_fig_pca},
    {"fig4_logdet", "Log-det volume of the retained keys", plot_fig_logdet},
    {"fig5_error", "Output error and attention recall versus budget", plot_fig_error},
    {"fig6_timing", "Scoring time versus budget", plot_fig_timing},
};
const int PLOT_N_FIGURES = sizeof PLOT_FIGURES / sizeof PLOT_FIGURES[0];
