/* prompts_tasks: what one generated prompt holds before it is fitted to a
 * length (docs/study.md, "RULER's synthetic tasks"): the needles, each with
 * its depth and span name, the question and the answer. `kvtrace prompts
 * needle` makes one from the user's texts; the RULER families (niah,
 * multikey, multivalue, multiquery, vt) make theirs from a seed. */
#ifndef KV_CLI_PROMPTS_TASKS_H
#define KV_CLI_PROMPTS_TASKS_H

#include <stdint.h>

#include "core/kv_error.h"

enum { TASK_NEEDLE, TASK_NIAH, TASK_MULTIKEY, TASK_MULTIVALUE, TASK_MULTIQUERY, TASK_VT, TASK_CWE, TASK_COUNT };
enum { TASK_MAX_NEEDLES = 16 };

/* The task names, in the enum's order ("needle", "niah", ...); -1 for an unknown name. */
extern const char *const PROMPT_TASKS[TASK_COUNT];
int prompt_task_find(const char *name);

typedef struct {
    int n;                                   /* needles, sorted by depth (ties: as made) */
    char *needle[TASK_MAX_NEEDLES];
    double depth[TASK_MAX_NEEDLES];          /* in [0, 1]: where in the haystack each goes */
    char name[TASK_MAX_NEEDLES][24];         /* its span: "needle", "needle_2", ..., "distractor_1", ... */
    char *question;                          /* what the user asks */
    char *prefix;                            /* the reply's start before the answer, ending in a space (RULER's
                                                answer prefix); NULL: none (prompts needle) */
    char *answer;
} prompt_task;

/* The sizes a family takes: multikey's keys (the asked one and keys − 1 distractors), multivalue's
 * values, multiquery's queries, vt's hops (hops + 1 assignments); each 1 .. TASK_MAX_NEEDLES − 1. */
typedef struct {
    int keys, values, queries, hops;
} prompt_task_sizes;

/* A RULER family's prompt for (seed, length, depth): keys, values and variable names drawn from a
 * stream of (seed, task, length, depth), the asked needle at `depth`, the others as the family places
 * them. KV_OK or out of memory. */
int prompt_task_make(int task, const prompt_task_sizes *z, uint64_t seed, int64_t length, double depth,
                     prompt_task *out, kv_err *err);
/* `prompts needle`'s one needle at `depth` from the user's texts. */
int prompt_task_user(const char *needle, const char *question, const char *answer, double depth, prompt_task *out,
                     kv_err *err);
void prompt_task_free(prompt_task *t);

/* RULER's noise haystack, the families' default: repeated short sentences. */
extern const char PROMPT_NOISE_HAYSTACK[];

#endif
