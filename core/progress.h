/* progress: how long work reports on stderr (docs/progress.md).
 *
 * On a terminal: one self-overwriting line (\r), at most ~10 a second,
 * cleared at the end. Not on a terminal (nohup, a batch scheduler, 2>log):
 * nothing for the first `interval` seconds (10 s), so short runs stay
 * silent, then one plain line at most every `interval` seconds: the verb,
 * its stage, the fraction done and an estimate of the time left. --quiet
 * silences both kinds.
 *
 * The clock, the terminal test, the interval and the stream are a
 * progress_env, so tests can inject them (tests/unit/test_progress.c);
 * progress_start takes the process's own: the monotonic clock, isatty(2),
 * stderr, and KVTRACE_PROGRESS_INTERVAL (seconds, >= 0; a test-only
 * setting for the script tests: 0 prints a plain line at every update). */
#ifndef KV_PROGRESS_H
#define KV_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define PROGRESS_INTERVAL_S 10.0
#define PROGRESS_INTERVAL_ENV "KVTRACE_PROGRESS_INTERVAL"

typedef struct {
    double (*clock)(void *ctx);  /* seconds, monotonic */
    void *clock_ctx;
    bool tty;                    /* the stream is a terminal */
    double interval;             /* seconds of silence, then between plain lines */
    FILE *out;
} progress_env;

typedef struct {
    bool on;                     /* not --quiet */
    progress_env env;
    const char *label;           /* the verb ("capture") */
    const char *stage;           /* its current stage ("prefill"), or NULL */
    int64_t total;
    int64_t stage_done0, stage_end; /* the units done when the stage began, the count at which it ends */
    int64_t last_done;           /* the last update's */
    double started, stage_started, last_print;
    int shown;                   /* width of the terminal line on screen, 0: none */
} kv_progress;

/* The process's environment (see above). */
void progress_env_default(progress_env *env);

void progress_start_env(kv_progress *p, const char *label, int64_t total, bool quiet, const progress_env *env);
void progress_start(kv_progress *p, const char *label, int64_t total, bool quiet);
/* Names the stage the next updates belong to (a string that outlives p), which
 * runs to the end. The time left is estimated from the current stage's own
 * rate (units since it began over the time since it began), so a stage that
 * goes slower than the ones before it (capture's generation after a batched
 * prefill) is not estimated at their pace. */
void progress_stage(kv_progress *p, const char *stage);
/* The same for a stage that ends when `end` units are done, later stages of
 * unknown rate following it: the line gives the time left in this stage and
 * the units after it ("about 3 s left in prefill, then 17 more"). */
void progress_stage_until(kv_progress *p, const char *stage, int64_t end);
void progress_update(kv_progress *p, int64_t done);
void progress_end(kv_progress *p);   /* clears a terminal line; prints nothing else */

/* The estimate of the time left after `elapsed` seconds with `frac` in
 * (0, 1] done, assuming the rest goes at the same rate; < 0 when unknown. */
double progress_eta(double elapsed, double frac);

double kv_now_seconds(void);  /* monotonic clock */

#endif
