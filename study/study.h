/* study: a set of traces, one per prompt. The index
 * (index.jsonl, written by `capture --prompts`, read by sim) and the
 * statistics over traces (the percentile bootstrap of summary.csv).
 * docs/study.md describes both. */
#ifndef KV_STUDY_H
#define KV_STUDY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/kv_error.h"

#define STUDY_INDEX "index.jsonl"
#define STUDY_ID_MAX 128

/* One trace of a study: its prompt id, its path, and what the index says of
 * it (sha256 "" and line 0 for a trace named on the command line). */
typedef struct {
    char id[STUDY_ID_MAX + 1];
    char *path;            /* as opened: the index's directory joined with its `file` */
    char file[256];        /* the index's `file` (a name in the index's directory) */
    int64_t tokens;        /* the index's `tokens`, -1 when not from an index */
    char sha256[65];       /* the index's sha256, "" when not from an index */
    int line;              /* its line in the index, 0 when not from an index */
    uint64_t dev, ino;     /* the file's identity (stat): one trace is one prompt, listed once */
} study_trace;

typedef struct {
    study_trace *t;
    int n;
    char *index;           /* the index file read, NULL for traces named one by one */
} study_set;

/* Whether `id` is a prompt id: 1..STUDY_ID_MAX of A-Z a-z 0-9 _ . - , not
 * starting with '.' (ids name files). */
bool study_id_ok(const char *id);

/* The traces of `argc` words: a directory holding index.jsonl, an index file
 * (*.jsonl), or trace files (each its file name's stem as id). An index is
 * read whole and checked (one JSON object a line with exactly id, file,
 * tokens, sha256; ids unique and valid; files plain names): its errors are
 * KV_EINPUT "INDEX:LINE: what is wrong". Two traces with the same id are
 * KV_EUSAGE. The sha256 is not checked here (study_check_sha256). */
int study_set_resolve(const char *verb, char **words, int argc, study_set *s, kv_err *err);
void study_set_free(study_set *s);

/* Trace i's length T against its index line's `tokens` (KV_EINPUT naming the line; KV_OK when the
 * trace did not come from an index). */
int study_check_tokens(const study_set *s, int i, int64_t T, kv_err *err);
/* KV_EINPUT "INDEX:LINE: TRACE's sha256 is X, the index says Y" unless the
 * trace's hash `got` matches (traces not from an index always pass). */
int study_check_sha256(const study_set *s, int i, const char *got, kv_err *err);

/* Reads a JSON Lines file: each line (blank ones skipped when skip_blank)
 * handed to fn with its 1-based number; a NUL byte is KV_EINPUT
 * "PATH:LINE: ...", a file with no line handed on KV_EINPUT "PATH: `empty`"
 * (capture --prompts's file, index.jsonl). */
int study_jsonl_read(const char *path, bool skip_blank, const char *empty,
                     int (*fn)(void *ctx, const char *text, int line, kv_err *err), void *ctx, kv_err *err);

/* Appends one index line {"id", "file", "tokens", "sha256"} to f. */
int study_index_line(FILE *f, const char *id, const char *file, int64_t tokens, const char *sha256, kv_err *err);

/* ---- statistics over traces ------------------------------------------------ */

#define STUDY_BOOT_RESAMPLES 2000
#define STUDY_BOOT_SEED 21u
#define STUDY_BOOT_LEVEL 0.95

/* The resamples of n traces, drawn once per run and shared by every
 * statistic (a paired bootstrap): idx[b·n + i] for b < STUDY_BOOT_RESAMPLES,
 * drawn with rng_init(STUDY_BOOT_SEED, n, 0, 0) and rng_below(n) in that
 * order. NULL when out of memory. */
int32_t *study_resamples(int n, kv_err *err);

/* The mean of x[0..n) (in order) and the 95% percentile bootstrap interval
 * of the mean: the 2.5th and 97.5th percentiles (linear interpolation
 * between order statistics) of the resamples' means. A NaN among x gives NaN
 * for all three. */
void study_mean_ci(const double *x, int n, const int32_t *idx, double *mean, double *lo, double *hi);

/* The same over the traces where x[0..n) is not NaN (a phase without queries
 * in that trace: undefined there, not a value), x compacted in place to them:
 * idx when all are, else the resamples of their count (study_resamples).
 * NaN for all three when none is (or out of memory). */
void study_mean_ci_measured(double *x, int n, const int32_t *idx, double *mean, double *lo, double *hi);

#endif
