#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double kv_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_start(kv_progress *p, const char *label, int64_t total, bool quiet)
{
    p->on = !quiet && isatty(STDERR_FILENO);
    p->label = label;
    p->total = total > 0 ? total : 1;
    p->started = kv_now_seconds();
    p->last_print = 0.0;
}

void progress_update(kv_progress *p, int64_t done)
{
    if (!p->on) return;
    double now = kv_now_seconds();
    if (now - p->last_print < 0.1 && done < p->total) return;
    p->last_print = now;
    double frac = (double)done / (double)p->total;
    double elapsed = now - p->started;
    double eta = frac > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
    fprintf(stderr, "\r%s: %lld/%lld (%3.0f%%), %.0f s elapsed, ~%.0f s left   ", p->label,
            (long long)done, (long long)p->total, 100.0 * frac, elapsed, eta);
    fflush(stderr);
}

void progress_end(kv_progress *p)
{
    if (!p->on) return;
    fprintf(stderr, "\r%*s\r", 79, "");
    fflush(stderr);
}
