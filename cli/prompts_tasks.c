/* prompts_tasks: the needles, question and answer of one generated prompt
 * (docs/study.md, "RULER's synthetic tasks"). The RULER families follow its
 * templates (Hsieh et al., "RULER: What's the Real Context Size of Your
 * Long-Context Language Models?", 2024): a "special magic number" (7 digits)
 * for a key word, and variable tracking's chain of assignments; keys, values
 * and names come from a kv_rng stream of (seed, task, length, depth), so a
 * prompt set is the same on every machine. */
#include "cli/prompts_tasks.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

const char *const PROMPT_TASKS[TASK_COUNT] = {"needle", "niah", "multikey", "multivalue", "multiquery", "vt", "cwe"};

const char PROMPT_NOISE_HAYSTACK[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

/* The key words: common concrete nouns, one token or two in most tokenizers. */
static const char *const KEYS[] = {
    "apple",  "river",  "candle", "garden", "window", "violin", "pencil", "harbor", "forest", "lantern",
    "mirror", "rocket", "saddle", "tunnel", "meadow", "basket", "castle", "dragon", "island", "jacket",
    "kettle", "ladder", "magnet", "napkin", "orange", "parrot", "quartz", "ribbon", "spider", "teapot",
    "valley", "walnut", "anchor", "bucket", "carpet", "desert", "engine", "falcon", "guitar", "hammer",
    "igloo",  "jungle", "kitten", "lemon",  "marble", "needle", "oyster", "pepper", "rabbit", "salmon",
    "tomato", "umbrella", "velvet", "wizard", "yogurt", "zipper", "bridge", "cactus", "donkey", "feather"};
enum { N_KEYS = sizeof KEYS / sizeof KEYS[0] };

int prompt_task_find(const char *name)
{
    for (int t = 0; t < TASK_COUNT; t++)
        if (strcmp(name, PROMPT_TASKS[t]) == 0) return t;
    return -1;
}

void prompt_task_free(prompt_task *t)
{
    for (int i = 0; i < t->n; i++) free(t->needle[i]);
    free(t->question), free(t->prefix), free(t->answer);
    memset(t, 0, sizeof *t);
}

static char *format(const char *fmt, ...)
{
    va_list a, b;
    va_start(a, fmt);
    va_copy(b, a);
    const int len = vsnprintf(NULL, 0, fmt, a);
    va_end(a);
    char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (s) vsnprintf(s, (size_t)len + 1, fmt, b);
    va_end(b);
    return s;
}

/* Appends a needle (text owned by t from here; NULL: out of memory), its span named `kind` for the
 * first of its kind and kind_NUMBER after: needle, needle_2, ...; distractor_1, distractor_2, ... */
static int add(prompt_task *t, char *text, double depth, const char *kind, int number)
{
    if (!text) return -1;
    const int i = t->n++;
    t->needle[i] = text, t->depth[i] = depth;
    if (strcmp(kind, "needle") == 0 && number == 1) snprintf(t->name[i], sizeof t->name[i], "needle");
    else snprintf(t->name[i], sizeof t->name[i], "%s_%d", kind, number);
    return 0;
}

/* Sorts the needles by depth, stably (insertion sort: at most 16), so that their order in the
 * text is the array's. */
static void sort_by_depth(prompt_task *t)
{
    for (int i = 1; i < t->n; i++)
        for (int j = i; j > 0 && t->depth[j - 1] > t->depth[j]; j--) {
            char *s = t->needle[j];
            t->needle[j] = t->needle[j - 1], t->needle[j - 1] = s;
            const double d = t->depth[j];
            t->depth[j] = t->depth[j - 1], t->depth[j - 1] = d;
            char n[sizeof t->name[0]];
            memcpy(n, t->name[j], sizeof n), memcpy(t->name[j], t->name[j - 1], sizeof n);
            memcpy(t->name[j - 1], n, sizeof n);
        }
}

/* k distinct indices below n into out (k <= n). */
static void distinct(kv_rng *r, int k, int n, int *out)
{
    for (int i = 0; i < k; i++) {
        int x, dup;
        do {
            x = (int)rng_below(r, (uint64_t)n), dup = 0;
            for (int j = 0; j < i; j++) dup |= out[j] == x;
        } while (dup);
        out[i] = x;
    }
}

static void magic_numbers(kv_rng *r, int k, long *out)
{
    for (int i = 0; i < k; i++) {
        int dup;
        do {
            out[i] = 1000000 + (long)rng_below(r, 9000000), dup = 0;
            for (int j = 0; j < i; j++) dup |= out[j] == out[i];
        } while (dup);
    }
}

static char *magic_needle(const char *key, long value)
{
    return format("One of the special magic numbers for %s is: %ld.", key, value);
}

/* "a, b, c and d" of the keys idx[0..k) */
static char *key_list(const int *idx, int k)
{
    size_t len = 8;
    for (int i = 0; i < k; i++) len += strlen(KEYS[idx[i]]) + 5;
    char *s = malloc(len), *p = s;
    if (!s) return NULL;
    *p = '\0';
    for (int i = 0; i < k; i++)
        p += sprintf(p, "%s%s", i == 0 ? "" : i == k - 1 ? " and " : ", ", KEYS[idx[i]]);
    return s;
}

/* "v1, v2, ..." of values[0..k) */
static char *joined(const long *values, int k)
{
    char *s = malloc((size_t)k * 10 + 1), *p = s;
    if (!s) return NULL;
    *p = '\0';
    for (int i = 0; i < k; i++) p += sprintf(p, "%s%ld", i ? ", " : "", values[i]);
    return s;
}

static int niah_family(int task, const prompt_task_sizes *z, kv_rng *r, double depth, prompt_task *t)
{
    const int n = task == TASK_NIAH ? 1 : task == TASK_MULTIKEY ? z->keys : task == TASK_MULTIVALUE ? z->values
                                                                                                     : z->queries;
    int key[TASK_MAX_NEEDLES];
    long val[TASK_MAX_NEEDLES];
    distinct(r, task == TASK_MULTIVALUE ? 1 : n, N_KEYS, key);
    magic_numbers(r, n, val);
    for (int i = 0; i < n; i++) {   /* the first at the asked depth, the others where the stream puts them */
        const double d = i == 0 ? depth : rng_uniform(r);
        const int k = task == TASK_MULTIVALUE ? key[0] : key[i];
        const bool distractor = task == TASK_MULTIKEY && i > 0;
        if (add(t, magic_needle(KEYS[k], val[i]), d, distractor ? "distractor" : "needle", distractor ? i : i + 1))
            return -1;
    }
    sort_by_depth(t);
    if (task == TASK_NIAH || task == TASK_MULTIKEY) {
        const char *k = KEYS[key[0]];
        t->question = format("What is the special magic number for %s mentioned in the provided text?", k);
        t->prefix = format("The special magic number for %s mentioned in the provided text is ", k);
        t->answer = format("%ld", val[0]);
    } else if (task == TASK_MULTIVALUE) {   /* every value, in the order the text gives them */
        long inorder[TASK_MAX_NEEDLES];
        for (int i = 0; i < t->n; i++) sscanf(strrchr(t->needle[i], ':') + 1, "%ld", &inorder[i]);
        const char *k = KEYS[key[0]];
        t->question = format("What are all the special magic numbers for %s mentioned in the provided text?", k);
        t->prefix = format("The special magic numbers for %s mentioned in the provided text are ", k);
        t->answer = joined(inorder, t->n);
    } else {   /* multiquery: the values in the order the question asks the keys */
        char *ks = key_list(key, n);
        t->question = ks ? format("What are all the special magic numbers for %s mentioned in the provided text?", ks)
                         : NULL;
        t->prefix = ks ? format("The special magic numbers for %s mentioned in the provided text are ", ks) : NULL;
        free(ks);
        t->answer = joined(val, n);
    }
    return t->question && t->prefix && t->answer ? 0 : -1;
}

/* vt: X1 = value, then X(i+1) = X(i) for each hop, in that order, from the asked depth to the end. */
static int vt_family(const prompt_task_sizes *z, kv_rng *r, double depth, prompt_task *t)
{
    const int n = z->hops + 1;
    char name[TASK_MAX_NEEDLES][6];
    for (int i = 0; i < n; i++) {
        int dup;
        do {
            for (int c = 0; c < 5; c++) name[i][c] = (char)('A' + rng_below(r, 26));
            name[i][5] = '\0', dup = 0;
            for (int j = 0; j < i; j++) dup |= strcmp(name[i], name[j]) == 0;
        } while (dup);
    }
    const long value = 10000 + (long)rng_below(r, 90000);
    for (int i = 0; i < n; i++) {
        const double d = depth + (1.0 - depth) * (double)i / (double)n;
        char *s = i == 0 ? format("VAR %s = %ld.", name[0], value) : format("VAR %s = VAR %s.", name[i], name[i - 1]);
        if (add(t, s, d, "needle", i + 1)) return -1;
    }
    size_t len = (size_t)n * 6 + 1;
    char *names = malloc(len), *p = names;
    if (!names) return -1;
    for (int i = 0; i < n; i++) p += sprintf(p, "%s%s", i ? " " : "", name[i]);
    t->question = format("Find all variables that are assigned the value %ld in the text above.", value);
    t->prefix = format("According to the chain of variable assignments in the text above, %d variables are assigned "
                       "the value %ld, they are: ", n, value);
    t->answer = names;
    return t->question && t->prefix ? 0 : -1;
}

int prompt_task_make(int task, const prompt_task_sizes *z, uint64_t seed, int64_t length, double depth,
                     prompt_task *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    kv_rng r;
    rng_init(&r, seed, (uint64_t)task, (uint64_t)length, (uint64_t)llround(depth * 1e6));
    const int rc = task == TASK_VT ? vt_family(z, &r, depth, out) : niah_family(task, z, &r, depth, out);
    if (rc) prompt_task_free(out);
    return rc ? kv_fail(err, KV_EFAIL, "prompts: out of memory") : KV_OK;
}

int prompt_task_user(const char *needle, const char *question, const char *answer, double depth, prompt_task *out,
                     kv_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = add(out, strdup(needle), depth, "needle", 1);
    if (!rc && (!(out->question = strdup(question)) || !(out->answer = strdup(answer)))) rc = -1;
    if (rc) prompt_task_free(out);
    return rc ? kv_fail(err, KV_EFAIL, "prompts: out of memory") : KV_OK;
}
