#include "progress.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

double kv_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double monotonic(void *ctx)
{
    (void)ctx;
    return kv_now_seconds();
}

void progress_env_default(progress_env *env)
{
    *env = (progress_env){.clock = monotonic, .tty = isatty(STDERR_FILENO) == 1,
                          .interval = PROGRESS_INTERVAL_S, .out = stderr};
    const char *s = getenv(PROGRESS_INTERVAL_ENV);
    char *end;
    double v = s && *s ? strtod(s, &end) : -1.0;
    if (s && *s && *end == '\0' && isfinite(v) && v >= 0) env->interval = v;
}

void progress_start_env(kv_progress *p, const char *label, int64_t total, bool quiet, const progress_env *env)
{
    *p = (kv_progress){.on = !quiet, .env = *env, .label = label, .total = total > 0 ? total : 1};
    p->started = p->stage_started = p->env.clock(p->env.clock_ctx);
    p->stage_end = p->total;
    p->last_print = p->env.tty ? p->started - 1.0 : p->started;
}

void progress_start(kv_progress *p, const char *label, int64_t total, bool quiet)
{
    progress_env env;
    progress_env_default(&env);
    progress_start_env(p, label, total, quiet, &env);
}

void progress_stage_until(kv_progress *p, const char *stage, int64_t end)
{
    p->stage = stage;
    p->stage_started = p->env.clock(p->env.clock_ctx);
    p->stage_done0 = p->last_done;
    p->stage_end = end > p->last_done && end < p->total ? end : p->total;
}

void progress_stage(kv_progress *p, const char *stage) { progress_stage_until(p, stage, p->total); }

double progress_eta(double elapsed, double frac)
{
    if (!(frac > 0) || elapsed < 0) return -1.0;
    return frac >= 1 ? 0.0 : elapsed * (1.0 - frac) / frac;
}

/* "12 s", "7 min", "2.5 h"; "unknown" when s < 0. */
static void duration(char *buf, size_t n, double s)
{
    if (s < 0) snprintf(buf, n, "unknown");
    else if (s < 99.5) snprintf(buf, n, "%.0f s", s);
    else if (s < 99.5 * 60) snprintf(buf, n, "%.0f min", s / 60);
    else snprintf(buf, n, "%.1f h", s / 3600);
}

/* The time left in the current stage at its own rate; until the stage has taken any time (its
 * first update), at the run's rate so far (< 0: unknown, nothing done at all). */
static double stage_left(const kv_progress *p, double now, int64_t done)
{
    const int64_t end = p->stage_end, in = (done < end ? done : end) - p->stage_done0, span = end - p->stage_done0;
    if (span <= 0 || in >= span) return 0.0;
    if (in > 0 && now > p->stage_started) return progress_eta(now - p->stage_started, (double)in / (double)span);
    const double frac = (double)(done < end ? done : end) / (double)end;
    return progress_eta(now - p->started, frac);
}

void progress_update(kv_progress *p, int64_t done)
{
    if (!p->on) return;
    p->last_done = done;
    const double now = p->env.clock(p->env.clock_ctx);
    const double gap = p->env.tty ? 0.1 : p->env.interval;
    if (now - p->last_print < gap && !(p->env.tty && done >= p->total)) return;
    p->last_print = now;
    const double frac = (double)(done < p->total ? done : p->total) / (double)p->total;
    char el[32], left[32], after[96] = "";
    duration(el, sizeof el, now - p->started);
    duration(left, sizeof left, stage_left(p, now, done));
    if (p->stage_end < p->total)
        snprintf(after, sizeof after, " in %s, then %lld more", p->stage ? p->stage : "this stage",
                 (long long)(p->total - p->stage_end));
    const int len = fprintf(p->env.out, "%skvtrace %s%s%s: %3.0f%% (%lld/%lld), %s elapsed, about %s left%s%s",
            p->env.tty ? "\r" : "", p->label, p->stage ? " " : "", p->stage ? p->stage : "", 100.0 * frac,
            (long long)done, (long long)p->total, el, left, after, p->env.tty ? "   " : "\n");
    fflush(p->env.out);
    p->shown = p->env.tty ? (len > 1 ? len - 1 : 1) : 0;
}

void progress_end(kv_progress *p)
{
    if (!p->on || !p->shown) return;
    fprintf(p->env.out, "\r%*s\r", p->shown, "");
    fflush(p->env.out);
    p->shown = 0;
}
