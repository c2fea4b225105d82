#include "plot_series.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int plot_series_id(plot_series_set *set, const char *policy, const char *params, const char *alloc, const char *where,
                   int *id, kv_err *err)
{
    for (int i = 0; i < set->n; i++) {
        if (strcmp(set->s[i].policy, policy) == 0 && strcmp(set->s[i].params, params) == 0 &&
            strcmp(set->s[i].alloc, alloc) == 0) {
            *id = i;
            return KV_OK;
        }
    }
    if (policy[0] == '\0') return kv_fail(err, KV_EINPUT, "%s: empty policy name", where);
    if (strlen(policy) >= sizeof set->s[0].policy || strlen(params) >= sizeof set->s[0].params ||
        strlen(alloc) >= sizeof set->s[0].alloc)
        return kv_fail(err, KV_EINPUT, "%s: policy name, params or allocator longer than plot handles (%zu, %zu, %zu)",
                       where, sizeof set->s[0].policy - 1, sizeof set->s[0].params - 1, sizeof set->s[0].alloc - 1);
    if (set->n == set->cap) {
        int cap = set->cap ? 2 * set->cap : 16;
        plot_series *s = realloc(set->s, (size_t)cap * sizeof *s);
        if (!s) return kv_fail(err, KV_EFAIL, "plot: out of memory for %d series", cap);
        set->s = s, set->cap = cap;
    }
    plot_series *s = &set->s[set->n];
    memset(s, 0, sizeof *s);
    snprintf(s->policy, sizeof s->policy, "%s", policy);
    snprintf(s->params, sizeof s->params, "%s", params);
    snprintf(s->config, sizeof s->config, "%s%s%s", policy, params[0] ? ":" : "", params);
    snprintf(s->alloc, sizeof s->alloc, "%s", alloc);
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->s[i].policy, policy) == 0) s->variant++;
    *id = set->n++;
    return KV_OK;
}

/* The value of `key` in "k=v:k=v" (length in *len), or NULL. */
static const char *param_value(const char *params, const char *key, size_t klen, size_t *len)
{
    for (const char *p = params; *p;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            *len = n - klen - 1;
            return p + klen + 1;
        }
        p += n + (end ? 1 : 0);
    }
    return NULL;
}

/* Whether `key` has the same value in every series of `policy`. */
static bool same_everywhere(const plot_series_set *set, const char *policy, const char *key, size_t klen)
{
    const char *first = NULL;
    size_t first_len = 0;
    bool seen = false;
    for (int i = 0; i < set->n; i++) {
        if (strcmp(set->s[i].policy, policy) != 0) continue;
        size_t len = 0;
        const char *v = param_value(set->s[i].params, key, klen, &len);
        if (!seen) first = v, first_len = len, seen = true;
        else if (!v != !first || (v && (len != first_len || strncmp(v, first, len) != 0))) return false;
    }
    return true;
}

/* The policy and the params that tell its configurations apart (n_same:
 * the configurations of this policy, allocators aside). */
static void label_one(const plot_series_set *set, plot_series *s, int n_same)
{
    const char *name = strcmp(s->policy, "full_cache") == 0 ? "full cache" : s->policy;
    snprintf(s->label, sizeof s->label, "%s", name);
    if (n_same < 2) return;
    bool any = false;
    for (const char *p = s->params; *p;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        size_t klen = eq ? (size_t)(eq - p) : n;
        if (!same_everywhere(set, s->policy, p, klen)) {
            size_t at = strlen(s->label);
            snprintf(s->label + at, sizeof s->label - at, " %.*s", (int)n, p);
            any = true;
        }
        p += n + (end ? 1 : 0);
    }
    if (!any) { /* e.g. "" beside "a=1": show the params as they are */
        size_t at = strlen(s->label);
        snprintf(s->label + at, sizeof s->label - at, " %s", s->params[0] ? s->params : "(defaults)");
    }
}

/* Whether an earlier series is the same configuration (another allocator). */
static bool config_seen(const plot_series_set *set, int i)
{
    for (int j = 0; j < i; j++)
        if (strcmp(set->s[j].config, set->s[i].config) == 0) return true;
    return false;
}

void plot_series_label(plot_series_set *set)
{
    bool many_allocs = false;
    for (int i = 1; i < set->n; i++) many_allocs |= strcmp(set->s[i].alloc, set->s[0].alloc) != 0;
    for (int i = 0; i < set->n; i++) {
        int n_same = 0;   /* distinct configurations of this policy */
        for (int j = 0; j < set->n; j++)
            n_same += strcmp(set->s[j].policy, set->s[i].policy) == 0 && !config_seen(set, j);
        label_one(set, &set->s[i], n_same);
        if (many_allocs && strcmp(set->s[i].policy, "full_cache") != 0) {
            size_t at = strlen(set->s[i].label);
            snprintf(set->s[i].label + at, sizeof set->s[i].label - at, " / %s", set->s[i].alloc);
        }
    }
}

void plot_series_free(plot_series_set *set)
{
    free(set->s);
    memset(set, 0, sizeof *set);
}
