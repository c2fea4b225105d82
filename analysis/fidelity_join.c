/* fidelity_join: sim's per-trace measures beside fidelity --prompts' (fidelity_join.h). */
#include "analysis/fidelity_join.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "results/fidelity_schema.h"
#include "results/results_dir.h"
#include "results/results_row.h"
#include "results/results_schema.h"

enum { KEY_MAX = 1200 };

/* The join key "trace\tconfig\tallocator\tbudget\tchunk" of row r (columns k[0..5) of t). */
static void key_of(const csv_table *t, size_t r, const int k[5], char out[KEY_MAX])
{
    snprintf(out, KEY_MAX, "%s\t%s\t%s\t%s\t%s", csv_cell(t, r, k[0]), csv_cell(t, r, k[1]), csv_cell(t, r, k[2]),
             csv_cell(t, r, k[3]), csv_cell(t, r, k[4]));
}

/* The rows of a table sorted by their key, for bsearch. */
typedef struct {
    char key[KEY_MAX];
    size_t row;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    return strcmp(((const keyed *)a)->key, ((const keyed *)b)->key);
}

static int columns(const csv_table *t, const char *const *names, int n, int *out, kv_err *err)
{
    for (int i = 0; i < n; i++)
        if ((out[i] = csv_column(t, names[i])) < 0) return kv_fail(err, KV_EINPUT, "%s: no column %s", t->path, names[i]);
    return KV_OK;
}

static const char *const KEY[5] = {"trace", "config", "allocator", "budget", "chunk"};

/* t's rows (those whose `only` column, when >= 0, is "all") sorted by key into *out. */
static int index_rows(const csv_table *t, int only, keyed **out, size_t *n, kv_err *err)
{
    int k[5];
    if (columns(t, KEY, 5, k, err)) return err->code;
    *out = kv_calloc(t->n_rows ? t->n_rows : 1, sizeof **out, "fidelity join", err);
    if (!*out) return err->code;
    *n = 0;
    for (size_t r = 0; r < t->n_rows; r++) {
        if (only >= 0 && strcmp(csv_cell(t, r, only), "all") != 0) continue;
        key_of(t, r, k, (*out)[*n].key), (*out)[(*n)++].row = r;
    }
    qsort(*out, *n, sizeof **out, cmp_keyed);
    return KV_OK;
}

static const keyed *find(const keyed *ix, size_t n, const char *key)
{
    keyed probe;
    snprintf(probe.key, sizeof probe.key, "%s", key);
    return n ? bsearch(&probe, ix, n, sizeof *ix, cmp_keyed) : NULL;
}

/* Cell j of row r as a real, or NaN when there is no row (a prompt without an answer). */
static double value(const csv_table *t, const keyed *at, int j)
{
    return at ? strtod(csv_cell(t, at->row, j), NULL) : NAN;
}

static const char *const SIM_COLS[] = {"run", "out_rel_err_mean", "attn_recall_mean"};
static const char *const FID_COLS[] = {"kl_mean", "greedy_agree", "ppl_full", "ppl_evict"};
static const char *const ANS_COLS[] = {"answer_logprob_full", "answer_logprob_evict", "answer_logprob_delta",
                                       "answer_rank_full", "answer_rank_evict", "exact_match_full",
                                       "exact_match_evict"};
enum { N_SIM = 3, N_FID = 4, N_ANS = 7 };

typedef struct {
    csv_table sim, fid, ans;
    keyed *sim_ix, *ans_ix;
    size_t n_sim, n_ans;
} join;

/* Reads and checks the three tables: the fidelity directory's against its tables, sim's already checked. */
static int read_all(join *j, const char *results_dir, const char *fdir, kv_err *err)
{
    bool present = false;
    const results_dims dims = {0};
    int rc = csv_read(&j->sim, results_dir, RESULTS_FILE_SUMMARY_BY_TRACE, &present, err);
    if (!rc && !present)
        return kv_fail(err, KV_EINPUT, "%s/%s: missing (--fidelity joins its rows)", results_dir,
                       RESULTS_FILE_SUMMARY_BY_TRACE);
    if (!rc) rc = csv_read(&j->fid, fdir, FID_SCHEMA_PROMPT_ROWS.file, &present, err);
    if (!rc && (!present || csv_column(&j->fid, "trace") != 0))
        return kv_fail(err, KV_EINPUT, "%s/%s: %s: --fidelity takes a `kvtrace fidelity --prompts` directory", fdir,
                       FID_SCHEMA_PROMPT_ROWS.file, present ? "no trace column (one prompt's output)" : "missing");
    if (!rc) rc = results_schema_check(&j->fid, &FID_SCHEMA_PROMPT_ROWS, &dims, NULL, err);
    if (!rc) rc = csv_read(&j->ans, fdir, FID_SCHEMA_ANSWERS.file, &present, err);
    if (!rc && !present)
        return kv_fail(err, KV_EINPUT, "%s/%s: missing (a `kvtrace fidelity --prompts` directory has one)", fdir,
                       FID_SCHEMA_ANSWERS.file);
    if (!rc) rc = results_schema_check(&j->ans, &FID_SCHEMA_ANSWERS, &dims, NULL, err);
    const int phase = rc ? -1 : csv_column(&j->sim, "phase");
    if (!rc && phase < 0) rc = kv_fail(err, KV_EINPUT, "%s: no column phase", j->sim.path);
    if (!rc) rc = index_rows(&j->sim, phase, &j->sim_ix, &j->n_sim, err);
    if (!rc) rc = index_rows(&j->ans, -1, &j->ans_ix, &j->n_ans, err);
    return rc;
}

/* One output row per fidelity.csv row with a run in the results; *kept, *left: how many. */
static int write_rows(join *j, const char *outdir, size_t *kept, size_t *left, kv_err *err)
{
    int fk[5], sc[N_SIM], fc[N_FID], ac[N_ANS];
    if (columns(&j->fid, KEY, 5, fk, err) || columns(&j->sim, SIM_COLS, N_SIM, sc, err) ||
        columns(&j->fid, FID_COLS, N_FID, fc, err) || columns(&j->ans, ANS_COLS, N_ANS, ac, err))
        return err->code;
    FILE *f = results_schema_create(outdir, &RESULTS_SCHEMA_FIDELITY_JOIN, err);
    if (!f) return err->code;
    *kept = *left = 0;
    for (size_t r = 0; r < j->fid.n_rows; r++) {
        char key[KEY_MAX];
        key_of(&j->fid, r, fk, key);
        const keyed *s = find(j->sim_ix, j->n_sim, key), *a = find(j->ans_ix, j->n_ans, key);
        if (!s) {
            ++*left;
            continue;
        }
        ++*kept;
        results_row w = results_row_begin(f, &RESULTS_SCHEMA_FIDELITY_JOIN);
        results_row_text(&w, csv_cell(&j->fid, r, fk[0])), results_row_text(&w, csv_cell(&j->sim, s->row, sc[0]));
        results_row_text(&w, csv_cell(&j->fid, r, fk[1])), results_row_text(&w, csv_cell(&j->fid, r, fk[2]));
        results_row_int(&w, strtoll(csv_cell(&j->fid, r, fk[3]), NULL, 10));
        results_row_int(&w, strtoll(csv_cell(&j->fid, r, fk[4]), NULL, 10));
        for (int i = 1; i < N_SIM; i++) results_row_real(&w, value(&j->sim, s, sc[i]));
        for (int i = 0; i < N_FID; i++) results_row_real(&w, strtod(csv_cell(&j->fid, r, fc[i]), NULL));
        for (int i = 0; i < N_ANS; i++) results_row_real(&w, value(&j->ans, a, ac[i]));
        results_row_end(&w);
    }
    return csv_close(f, RESULTS_SCHEMA_FIDELITY_JOIN.file, err);
}

int analyze_fidelity_join(const char *results_dir, const char *fidelity_dir, const char *outdir, bool quiet,
                          kv_err *err)
{
    join j = {0};
    size_t kept = 0, left = 0;
    int rc = read_all(&j, results_dir, fidelity_dir, err);
    if (!rc) rc = write_rows(&j, outdir, &kept, &left, err);
    if (!rc && kept == 0)
        rc = kv_fail(err, KV_EINPUT, "%s/%s: none of its %zu rows has a run in %s (joined on trace, config, allocator, "
                     "budget and chunk): was it run on the study's prompts, policies and budgets?", fidelity_dir,
                     FID_SCHEMA_PROMPT_ROWS.file, j.fid.n_rows, results_dir);
    if (!rc && left && !quiet)
        fprintf(stderr, "kvtrace: analyze: note: %zu of %zu rows of %s/%s have no run in %s and are left out of %s\n",
                left, j.fid.n_rows, fidelity_dir, FID_SCHEMA_PROMPT_ROWS.file, results_dir,
                RESULTS_SCHEMA_FIDELITY_JOIN.file);
    csv_free(&j.sim), csv_free(&j.fid), csv_free(&j.ans);
    free(j.sim_ix), free(j.ans_ix);
    return rc;
}
