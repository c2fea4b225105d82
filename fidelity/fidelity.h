/* fidelity: in-model eviction versus offline replay (docs/fidelity.md#kvtrace-fidelity).
 *
 * One teacher-forced token sequence (the prompt, plus the full model's
 * greedy continuation with --generate), one full-cache run and one run with
 * eviction inside the model per (policy x budget), all in lockstep chunk by
 * chunk (prompt in chunks of B, then one token per step, as sim replays), so
 * that each position's KL(p_full || p_evict) is computed as the logits appear
 * and no run's logits are kept. The full run is also recorded as a trace and
 * replayed by `sim` for the same configurations; the two views are then set
 * side by side: per configuration (fidelity.csv), per position
 * (positions.csv), Spearman ρ between offline error and online KL and the
 * pairs of policies offline replay orders wrongly (summary.csv,
 * misordered.csv), a figure and report.html. */
#ifndef KV_FIDELITY_H
#define KV_FIDELITY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/kv_error.h"
#include "model/tokenizer/prompt.h"
#include "allocators/alloc.h"
#include "policies/policy.h"
#include "provenance/provenance.h"
#include "results/results_row.h"
#include "sim/sim.h"

/* The one sequence every run of a fidelity study walks. */
typedef struct {
    const char *model;       /* as capture --model */
    const char *tokenizer;   /* llama2.c tokenizer.bin */
    prompt_source prompt;    /* none: BOS alone */
    int64_t generate;        /* the full model's greedy tokens after the prompt */
    int64_t chunk;           /* B: the prefill chunk (the first of chunks[] with --chunks) */
    bool beyond_context;     /* --allow-beyond-context, as capture's */
    const int32_t *ids;      /* fidelity --prompts: the prompt's ids[n_ids] (BOS first), read instead of
                                `prompt`, whose text (if any) is then the text they encode, kept in the trace */
    int64_t n_ids;
    int64_t answer_start, answer_end; /* the answer's token range [start, end) of the prompt; equal: none */
} fid_sequence;

typedef struct {
    fid_sequence seq;
    const char *output;      /* directory */
    prov_record *prov;       /* provenance.json, full.h5's /provenance, the report's command; the
                                model and prompt files are added once loaded (may be NULL) */
    policy_config *policies; /* [n_policies] */
    int n_policies;
    alloc_config *allocators;/* [n_allocators] (--allocators; docs/allocators.md) */
    int n_allocators;
    const char *head_scores; /* --head-scores FILE (headkv, duo): the in-model runs' and sim's ranking */
    int64_t *budgets;        /* [n_budgets] */
    int n_budgets;
    const int64_t *chunks;   /* [n_chunks] the prefill chunks B swept (--chunks; else seq.chunk alone) */
    int n_chunks;
    int sim_threads;         /* 0: one per CPU */
    const kv_model *loaded;  /* the model already loaded (fidelity --prompts); NULL: load seq.model */
    const char *prompts;     /* --prompts FILE.jsonl (fidelity_prompts) */
    bool force, quiet;
} fidelity_opts;

/* One (policy, allocator, budget) configuration: what the runs measured and what sim says. */
typedef struct {
    const policy_config *pc;
    const alloc_config *ac;
    char alloc[256];         /* ac's label (alloc_label), the allocator column */
    int64_t budget;
    int64_t chunk;           /* B: its prefill chunk */
    int64_t n_positions;     /* positions t >= N */
    double kl_mean, kl_p95, kl_max, greedy_agree;
    double ppl_evict;        /* over every predicted token of the sequence */
    double answer_logprob;   /* Σ log q(answer token | everything before it); 0 without an answer */
    int64_t answer_rank;     /* the rank of the answer's first token (1: greedy; answer.h); 0 without an answer */
    int exact_match;         /* the greedy continuation after the question starts with the answer (answer.h) */
    char *continuation;      /* that continuation, decoded; NULL without an answer */
    int64_t cache_peak;      /* largest rows a (layer, kv head) cache ever held */
    int64_t rows_peak;       /* largest rows every cache held together (<= L·K·N + L·K·B) */
    double out_rel_err_mean, out_rel_err_p95, attn_recall_mean; /* sim, phase=all */
    double *kl;              /* [n_positions] KL at t = N .. T-1 */
    uint8_t *agree;          /* [n_positions] */
} fid_config;

typedef struct {
    int64_t T, prompt_len, V;
    double ppl_full;
    double answer_logprob_full; /* the full run's Σ log p(answer token | before) */
    int64_t answer_rank_full;   /* the full run's rank of the answer's first token */
    int exact_match_full;       /* the full run's exact match */
    char *continuation_full;    /* the full run's greedy continuation after the question */
    int64_t answer_tokens;   /* 0: no answer */
    int n;                   /* configurations: policy-major, then allocator, chunk, budget (sim's order) */
    fid_config *c;           /* [n] */
} fid_results;

int fidelity_run(const fidelity_opts *o, kv_err *err);

/* KV_EUSAGE unless every policy can run inside the model. */
int fid_check_online(const fidelity_opts *o, kv_err *err);

/* One study into the existing directory dir (full.h5, sim/, the CSVs, the
 * report), its results left in *r for the caller (fid_results_free). */
int fidelity_one(const fidelity_opts *o, const char *dir, fid_results *r, kv_err *err);

/* `fidelity --prompts` (prompts.c): fidelity_one per prompt of o->prompts into DIR/ID/, the model loaded
 * once, then the per-prompt rows and the means with bootstrap intervals over prompts in DIR. */
int fidelity_prompts(const fidelity_opts *o, kv_err *err);

/* The model runs (runs.c): writes the full-cache trace to `trace_path` and
 * fills every configuration's online measurements. */
int fid_run_models(const fidelity_opts *o, const char *trace_path, fid_results *r, kv_err *err);

/* The offline side (compare.c): sim's phase=all summary of every
 * configuration, summary[r->n] as sim_run fills it, into r. */
int fid_take_sim(const sim_stats *summary, fid_results *r, kv_err *err);

/* Outputs (output.c): CSVs, the figure and report.html into dir. */
int fid_write_outputs(const fidelity_opts *o, const fid_results *r, const char *dir, kv_err *err);

/* The cells "config,policy,params,budget,allocator" of a configuration (output.c), and fidelity.csv's
 * measures after them, "chunk ... rows_peak" (fidelity_schema.c lists both). */
void fid_config_key(results_row *w, const fid_config *c);
void fid_config_measures(results_row *w, const fidelity_opts *o, const fid_results *r, const fid_config *c);

void fid_results_free(fid_results *r);

/* `kvtrace fidelity` */
int fidelity_main(int argc, char **argv);

#endif
