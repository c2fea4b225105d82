/* alloc_plugin: a plug-in's allocators (alloc_plugin.h): the load-time checks
 * (name, kind, functions, parameter defaults) and the run-time ones on what
 * the plug-in computes (capacities, shares), which name the plug-in. */
#include "allocators/alloc_plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const alloc_plugin_entry *entry_of(const alloc_config *ac)
{
    return (const alloc_plugin_entry *)ac->iface;
}

/* The plug-in's own error as one line naming it and the hook, exit 1 (kv_fail_hook). */
static int own_error(const alloc_plugin_entry *e, int rc, const char *hook, kv_err *err)
{
    char who[sizeof e->file + 80];
    snprintf(who, sizeof who, "%s: allocator %s", e->file, e->iface.name);
    return kv_fail_hook(err, rc, who, hook);
}

/* One layer's capacities, each >= 1 and (unless per_head) alike; *sum adds them. */
static int layer_caps(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t l, int64_t *cap, int64_t *sum,
                      kv_err *err)
{
    const alloc_plugin_entry *e = entry_of(ac);
    for (int64_t g = 0; g < K; g++) cap[g] = 0;
    int rc = e->capacities(ac, N, L, K, l, cap, err);
    if (rc) return own_error(e, rc, "capacities", err);
    for (int64_t g = 0; g < K; g++) {
        if (cap[g] < 1 || cap[g] > N * L * K) /* no stream holds more than the model's total: the sum cannot overflow */
            return kv_fail(err, KV_EINPUT, "%s: allocator %s gave layer %lld kv head %lld a capacity of %lld "
                           "(budget %lld): each must be in [1, L*K*N]", e->file, e->iface.name, (long long)l, (long long)g,
                           (long long)cap[g], (long long)N);
        if (!e->iface.per_head && cap[g] != cap[0])
            return kv_fail(err, KV_EINPUT, "%s: allocator %s gave the kv heads of layer %lld different capacities "
                           "(%lld, %lld) without per_head", e->file, e->iface.name, (long long)l, (long long)cap[0],
                           (long long)cap[g]);
        *sum += cap[g];
    }
    return KV_OK;
}

/* Layer `layer`'s capacities, after checking every layer's: each >= 1, summing to L·K·N. */
static int checked_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                              kv_err *err)
{
    const alloc_plugin_entry *e = entry_of(ac);
    int64_t *tmp = kv_calloc((size_t)K, sizeof *tmp, "allocator", err);
    int64_t sum = 0;
    int rc = tmp ? KV_OK : err->code;
    for (int64_t l = 0; !rc && l < L; l++) rc = layer_caps(ac, N, L, K, l, tmp, &sum, err);
    free(tmp);
    if (!rc && sum != L * K * N)
        rc = kv_fail(err, KV_EINPUT, "%s: allocator %s's capacities sum to %lld over the model, not L*K*N = %lld "
                     "(L %lld, K %lld, budget %lld)", e->file, e->iface.name, (long long)sum, (long long)(L * K * N),
                     (long long)L, (long long)K, (long long)N);
    return rc ? rc : layer_caps(ac, N, L, K, layer, cap, &sum, err);
}

static int checked_shares(const alloc_config *ac, const alloc_scope *s, alloc_buf *b, int64_t *counts, kv_err *err)
{
    const alloc_plugin_entry *e = entry_of(ac);
    for (int64_t x = 0; x < s->n_streams; x++) counts[x] = 0;
    int rc = e->shares(ac, s, b, counts, err);
    if (rc) return own_error(e, rc, "shares", err);
    int64_t sum = 0;
    const long long step = s->views ? (long long)s->views[0].step : -1;
    const long long layer = s->views ? (long long)s->views[0].layer : -1;
    for (int64_t x = 0; x < s->n_streams; x++) {
        if (counts[x] < 1 || counts[x] > s->n[x])
            return kv_fail(err, KV_EINPUT, "%s: allocator %s gave stream %lld of the scope a share of %lld (step %lld, "
                           "layer %lld): each must be in [1, %lld], its candidates", e->file, e->iface.name,
                           (long long)x, (long long)counts[x], step, layer, (long long)s->n[x]);
        sum += counts[x];
    }
    if (sum != s->total)
        return kv_fail(err, KV_EINPUT, "%s: allocator %s's shares sum to %lld, not the scope's total %lld (step %lld, "
                       "layer %lld)", e->file, e->iface.name, (long long)sum, (long long)s->total, step, layer);
    return KV_OK;
}

/* The name is new: not a built-in allocator's or a plug-in's loaded before. */
static int check_name(const alloc_plugins *t, const char *path, const char *name, kv_err *err)
{
    size_t len = strlen(name);
    static const char OK[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-";
    if (len == 0 || len >= 64 || strspn(name, OK) != len)
        return kv_fail(err, KV_EUSAGE, "%s: allocator name '%s' is not 1-63 of letters, digits and _ . -", path, name);
    for (const alloc_iface *const *a = alloc_all(); *a; a++)
        if (strcmp((*a)->name, name) == 0)
            return kv_fail(err, KV_EUSAGE, "%s: allocator %s clashes with the built-in %s", path, name, name);
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->entry[i].iface.name, name) == 0)
            return kv_fail(err, KV_EUSAGE, "%s: allocator %s clashes with the allocator of that name from %s", path,
                           name, t->entry[i].file);
    return KV_OK;
}

/* What a static or dynamic allocator needs, and parameter defaults that parse. */
static int check_entry(const alloc_plugin_entry *e, const char *path, kv_err *err)
{
    const alloc_iface *ai = &e->iface;
    if (ai->kind != ALLOC_STATIC && ai->kind != ALLOC_DYNAMIC_LAYER && ai->kind != ALLOC_DYNAMIC_MODEL)
        return kv_fail(err, KV_EUSAGE, "%s: allocator %s has an unknown kind %d", path, ai->name, (int)ai->kind);
    if (ai->scores_from != ALLOC_SCORES_NONE && ai->scores_from != ALLOC_SCORES_FILE &&
        ai->scores_from != ALLOC_SCORES_FILE_OR_TRACE)
        return kv_fail(err, KV_EUSAGE, "%s: allocator %s has an unknown scores_from %d", path, ai->name,
                       (int)ai->scores_from);
    const bool fixed = ai->kind == ALLOC_STATIC;
    if (fixed ? !ai->capacities : !ai->shares)
        return kv_fail(err, KV_EUSAGE, "%s: allocator %s is %s but has no %s", path, ai->name,
                       fixed ? "static" : "dynamic", fixed ? "capacities" : "shares");
    return policy_plugin_defaults(path, "allocator", ai->name, ai->params, err);
}

/* One allocator of the plug-in into the next entry: its iface read up to size bytes. */
static int add_allocator(alloc_plugins *t, const char *path, const alloc_iface *ai, uint32_t size, kv_err *err)
{
    if (t->n >= ALLOC_MAX_PLUGIN_ALLOCATORS)
        return kv_fail(err, KV_EUSAGE, "%s: more than %d plug-in allocators in all", path, ALLOC_MAX_PLUGIN_ALLOCATORS);
    alloc_plugin_entry *e = &t->entry[t->n];
    memset(e, 0, sizeof *e);
    memcpy(&e->iface, ai, size);
    snprintf(e->file, sizeof e->file, "%s", path);
    if (!e->iface.name) return kv_fail(err, KV_EUSAGE, "%s: an allocator without a name", path);
    int rc = check_name(t, path, e->iface.name, err);
    if (!rc) rc = check_entry(e, path, err);
    if (rc) return rc;
    if (!e->iface.summary) e->iface.summary = "(a plug-in's allocator)";
    e->capacities = e->iface.capacities, e->shares = e->iface.shares;
    if (e->capacities) e->iface.capacities = checked_capacities;
    if (e->shares) e->iface.shares = checked_shares;
    t->list[t->n++] = &e->iface;
    t->list[t->n] = NULL;
    return KV_OK;
}

int alloc_plugins_add(alloc_plugins *t, const policy_plugins *p, kv_err *err)
{
    for (; t->n_files < p->n_files; t->n_files++) {
        const kvtrace_plugin *tab = p->tables[t->n_files];
        for (int i = 0; tab && tab->allocators && tab->allocators[i]; i++) {   /* a Python file's: none */
            int rc = add_allocator(t, p->path[t->n_files], tab->allocators[i], tab->alloc_iface_size, err);
            if (rc) return rc;
        }
    }
    return KV_OK;
}
