/* The figures in report order (see plot_figures.h; each is described in
 * docs/plot.md#the-figures): figures 1-6, the per-layer error, the allocations, error versus chunk and span retention; what they share is in plot_fig_util.c. */
#include "plot_figures.h"

const plot_figure PLOT_FIGURES[] = {
    {"fig1_detail", "Key similarity and attention", plot_fig_detail},
    {"fig2_spearman", "Key distinctiveness versus attention (Spearman ρ)", plot_fig_spearman},
    {"fig3_pca", "Kept and evicted keys in PCA space", plot_fig_pca},
    {"fig4_logdet", "Log-det volume of the retained keys", plot_fig_logdet},
    {"fig5_error", "Output error and attention recall versus budget", plot_fig_error},
    {"fig6_timing", "Scoring time versus budget", plot_fig_timing},
    {"fig7_layers", "Output error by layer", plot_fig_layers},
    {"fig8_alloc", "Budgets by layer and head, and error versus memory", plot_fig_alloc},
    {"fig9_chunks", "Output error versus prefill chunk", plot_fig_chunks},
    {"fig10_spans", "Span retention versus budget", plot_fig_spans},
    {"fig11_needle", "The needle's retention by depth and prompt length", plot_fig_needle},
    {"fig12_needle_recall", "The needle's attention recall by depth and prompt length", plot_fig_needle_recall},
    {"fig13_needle_answer", "The answer inside the model (exact match) by depth and prompt length",
     plot_fig_needle_answer},
    {"fig14_paired", "Paired differences against the baseline", plot_fig_paired},
};
const int PLOT_N_FIGURES = sizeof PLOT_FIGURES / sizeof PLOT_FIGURES[0];
