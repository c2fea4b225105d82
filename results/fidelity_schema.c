/* fidelity_schema: the column tables of fidelity's CSVs (fidelity_schema.h). */
#include "results/fidelity_schema.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define KEY_COLS {"config", SC_CONFIG, false, true}, {"policy", SC_POLICY, false, false}, \
                 {"params", SC_PARAMS, false, false}, {"budget", SC_BUDGET, false, true}, \
                 {"allocator", SC_ALLOC, false, true}
/* fidelity.csv's measures of one configuration, after its key */
#define CONFIG_COLS {"chunk", SC_BUDGET, false, false}, {"n_positions", SC_COUNT, false, false}, \
    {"kl_mean", SC_NONNEG, true, false}, {"kl_p95", SC_NONNEG, true, false}, {"kl_max", SC_NONNEG, true, false}, \
    {"greedy_agree", SC_UNIT, true, false}, {"ppl_full", SC_NONNEG, false, false}, \
    {"ppl_evict", SC_NONNEG, false, false}, {"out_rel_err_mean", SC_NONNEG, true, false}, \
    {"out_rel_err_p95", SC_NONNEG, true, false}, {"attn_recall_mean", SC_UNIT, true, false}, \
    {"cache_peak_rows", SC_COUNT, false, false}, {"rows_peak", SC_COUNT, false, false}

static const results_col COLS_CONFIGS[] = {KEY_COLS, CONFIG_COLS};
static const results_col COLS_POSITIONS[] = {
    KEY_COLS, {"chunk", SC_BUDGET, false, true}, {"position", SC_POS, false, true}, {"kl", SC_NONNEG, false, false},
    {"greedy_agree", SC_COUNT, false, false},
};
/* the first row pools every budget: its budget is empty and its scope "all" */
static const results_col COLS_SUMMARY[] = {
    {"scope", SC_TEXT, false, true}, {"budget", SC_BUDGET, true, true}, {"n_configs", SC_COUNT, false, false},
    {"rho_out_rel_err_kl", SC_CORR, true, false}, {"rho_attn_loss_kl", SC_CORR, true, false},
    {"n_pairs", SC_COUNT, false, false}, {"n_misordered", SC_COUNT, false, false},
    {"n_tokens", SC_COUNT, false, false}, {"prompt_len", SC_COUNT, false, false}, {"chunk", SC_BUDGET, true, true},
    {"ppl_full", SC_NONNEG, false, false},
};
static const results_col COLS_MISORDERED[] = {
    {"config_a", SC_CONFIG, false, true}, {"policy_a", SC_POLICY, false, false}, {"params_a", SC_PARAMS, false, false},
    {"allocator_a", SC_ALLOC, false, true}, {"config_b", SC_CONFIG, false, true}, {"policy_b", SC_POLICY, false, false},
    {"params_b", SC_PARAMS, false, false}, {"allocator_b", SC_ALLOC, false, true}, {"budget", SC_BUDGET, false, true},
    {"chunk", SC_BUDGET, false, true},
    {"out_rel_err_a", SC_NONNEG, false, false}, {"out_rel_err_b", SC_NONNEG, false, false},
    {"kl_mean_a", SC_NONNEG, false, false}, {"kl_mean_b", SC_NONNEG, false, false},
};
static const results_col COLS_PROMPT_ROWS[] = {
    {"trace", SC_TEXT, false, true}, KEY_COLS, CONFIG_COLS, {"n_tokens", SC_COUNT, false, false},
    {"prompt_len", SC_COUNT, false, false},
};
static const results_col COLS_ANSWERS[] = {
    {"trace", SC_TEXT, false, true}, KEY_COLS, {"chunk", SC_BUDGET, false, true}, {"answer_start", SC_COUNT, false, false},
    {"answer_tokens", SC_COUNT, false, false}, {"answer_logprob_full", SC_REAL, false, false},
    {"answer_logprob_evict", SC_REAL, false, false}, {"answer_logprob_delta", SC_REAL, false, false},
    {"answer_rank_full", SC_BUDGET, false, false}, {"answer_rank_evict", SC_BUDGET, false, false},
    {"exact_match_full", SC_COUNT, false, false}, {"exact_match_evict", SC_COUNT, false, false},
    {"continuation_full", SC_TEXT, false, false}, {"continuation_evict", SC_TEXT, false, false},
};
/* a mean and its interval; an answer metric's are nan when no prompt has an answer */
#define CI3(n, nan) {n, SC_REAL, nan, false}, {n "_ci_lo", SC_REAL, true, false}, {n "_ci_hi", SC_REAL, true, false}
static const results_col COLS_PROMPT_SUMMARY[] = {
    KEY_COLS, {"chunk", SC_BUDGET, false, true}, {"n_traces", SC_COUNT, false, false}, {"n_answers", SC_COUNT, false, false},
    CI3("kl_mean", true), CI3("kl_p95", true), CI3("greedy_agree", true), CI3("ppl_full", false),
    CI3("ppl_evict", false), CI3("d_ppl", false), CI3("out_rel_err_mean", false), CI3("attn_recall_mean", false),
    CI3("answer_logprob_full", true), CI3("answer_logprob_evict", true), CI3("answer_logprob_delta", true),
    CI3("exact_match_full", true), CI3("exact_match_evict", true),
};

const results_schema FID_SCHEMA_CONFIGS = {"fidelity.csv", COLS_CONFIGS, N(COLS_CONFIGS), SR_FREE, "fidelity"};
const results_schema FID_SCHEMA_POSITIONS = {"positions.csv", COLS_POSITIONS, N(COLS_POSITIONS), SR_FREE, "fidelity"};
const results_schema FID_SCHEMA_SUMMARY = {"summary.csv", COLS_SUMMARY, N(COLS_SUMMARY), SR_FREE, "fidelity"};
const results_schema FID_SCHEMA_MISORDERED = {"misordered.csv", COLS_MISORDERED, N(COLS_MISORDERED), SR_FREE,
                                              "fidelity"};
const results_schema FID_SCHEMA_PROMPT_ROWS = {"fidelity.csv", COLS_PROMPT_ROWS, N(COLS_PROMPT_ROWS), SR_FREE,
                                               "fidelity --prompts"};
const results_schema FID_SCHEMA_ANSWERS = {"answer.csv", COLS_ANSWERS, N(COLS_ANSWERS), SR_FREE,
                                           "fidelity --prompts"};
const results_schema FID_SCHEMA_PROMPT_SUMMARY = {"summary.csv", COLS_PROMPT_SUMMARY, N(COLS_PROMPT_SUMMARY), SR_FREE,
                                                  "fidelity --prompts"};

const results_schema *const FID_SCHEMAS[] = {
    &FID_SCHEMA_CONFIGS,     &FID_SCHEMA_POSITIONS, &FID_SCHEMA_SUMMARY,       &FID_SCHEMA_MISORDERED,
    &FID_SCHEMA_PROMPT_ROWS, &FID_SCHEMA_ANSWERS,   &FID_SCHEMA_PROMPT_SUMMARY,
};
const int FID_N_SCHEMAS = N(FID_SCHEMAS);
