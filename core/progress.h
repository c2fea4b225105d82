/* progress: one self-overwriting line on stderr for long work, only when
 * stderr is a terminal and the user did not ask for --quiet. */
#ifndef KV_PROGRESS_H
#define KV_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool on;
    const char *label;
    int64_t total;
    double started, last_print;
} kv_progress;

void progress_start(kv_progress *p, const char *label, int64_t total, bool quiet);
void progress_update(kv_progress *p, int64_t done);  /* at most ~10 lines a second */
void progress_end(kv_progress *p);                   /* clears the line */

double kv_now_seconds(void);  /* monotonic clock */

#endif
