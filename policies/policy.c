/* policy: the registry table, "name:key=value" parsing with defaults filled
 * in, and the engine's selection rule (SPEC §4). Policies themselves live one
 * per file (registry.h); nothing here knows any particular policy. */
#include "policies/policy.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "policies/registry.h"

static const policy_iface *const REGISTRY[] = {
    &policy_full, &policy_keydiff, &policy_knorm, &policy_streaming, &policy_random, &policy_primekv,
    &policy_h2o, &policy_tova, &policy_snapkv, &policy_oracle,
    NULL,
};

const policy_iface *const *policy_all(void) { return REGISTRY; }

const policy_iface *policy_find(const char *name)
{
    for (const policy_iface *const *p = REGISTRY; *p; p++)
        if (strcmp((*p)->name, name) == 0) return *p;
    return NULL;
}

/* ---- parsing ---------------------------------------------------------- */

/* "a, b, c" into buf: the policy names or one policy's parameter keys. */
static void list_names(char *buf, size_t cap, const policy_iface *pi)
{
    size_t used = 0;
    buf[0] = '\0';
    if (pi) {
        for (int i = 0; i < pi->n_params && used < cap; i++)
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", pi->params[i].key);
        return;
    }
    for (const policy_iface *const *p = REGISTRY; *p && used < cap; p++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", p == REGISTRY ? "" : ", ", (*p)->name);
}

/* Index of `val` in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *val)
{
    size_t len = strlen(val);
    int idx = 0;
    for (const char *c = choices; *c; idx++) {
        const char *bar = strchr(c, '|');
        size_t clen = bar ? (size_t)(bar - c) : strlen(c);
        if (clen == len && strncmp(c, val, len) == 0) return idx;
        if (!bar) break;
        c = bar + 1;
    }
    return -1;
}

/* The idx-th entry of "a|b|c" into buf. */
static void choice_text(const char *choices, int idx, char *buf, size_t cap)
{
    const char *c = choices;
    for (int i = 0; i < idx && c; i++) {
        c = strchr(c, '|');
        if (c) c++;
    }
    KV_ASSERT(c != NULL);
    size_t len = strcspn(c, "|");
    snprintf(buf, cap, "%.*s", (int)len, c);
}

static int set_param(const policy_iface *pi, int i, const char *val, policy_config *out, kv_err *err)
{
    const policy_param *p = &pi->params[i];
    if (p->kind == PARAM_CHOICE) {
        int c = choice_index(p->choices, val);
        if (c < 0)
            return kv_fail(err, KV_EUSAGE, "%s: %s=%s is not one of %s", pi->name, p->key, val, p->choices);
        out->choice[i] = c;
        return KV_OK;
    }
    char *end = NULL;
    double x = strtod(val, &end);
    if (val[0] == '\0' || isspace((unsigned char)val[0]) || *end != '\0' || !isfinite(x))
        return kv_fail(err, KV_EUSAGE, "%s: %s=%s is not a number (range [%.16g, %.16g])", pi->name, p->key,
                       val, p->min, p->max);
    if (p->integer && x != floor(x))
        return kv_fail(err, KV_EUSAGE, "%s: %s=%s is not an integer (range [%.16g, %.16g])", pi->name, p->key,
                       val, p->min, p->max);
    if (x < p->min || x > p->max)
        return kv_fail(err, KV_EUSAGE, "%s: %s=%s is out of range [%.16g, %.16g]", pi->name, p->key, val,
                       p->min, p->max);
    out->num[i] = x + 0.0;   /* -0 → 0: one canonical name */
    return KV_OK;
}

static int find_param(const policy_iface *pi, const char *key, size_t len)
{
    for (int i = 0; i < pi->n_params; i++)
        if (strlen(pi->params[i].key) == len && strncmp(pi->params[i].key, key, len) == 0) return i;
    return -1;
}

/* %g when that reads back as the same double (0.2, 4, 1e-05), otherwise
 * the shortest precision that does, so two configs never share a name. */
static void format_num(double x, char *buf, size_t cap)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

static void make_canonical(policy_config *cfg)
{
    const policy_iface *pi = cfg->iface;
    size_t used = 0, cap = sizeof cfg->canonical;
    cfg->canonical[0] = '\0';
    for (int i = 0; i < pi->n_params; i++) {
        const policy_param *p = &pi->params[i];
        char val[64];
        if (p->kind == PARAM_CHOICE) choice_text(p->choices, cfg->choice[i], val, sizeof val);
        else format_num(cfg->num[i], val, sizeof val);
        int w = snprintf(cfg->canonical + used, cap - used, "%s%s=%s", i ? ":" : "", p->key, val);
        KV_ASSERT(w >= 0 && (size_t)w < cap - used);
        used += (size_t)w;
    }
}

/* One "key=value" item (len bytes at item). */
static int parse_item(const policy_iface *pi, const char *item, size_t len, bool *seen,
                      policy_config *out, kv_err *err)
{
    char known[256];
    list_names(known, sizeof known, pi);
    const char *eq = memchr(item, '=', len);
    if (!eq)
        return kv_fail(err, KV_EUSAGE, "%s: parameter '%.*s' is not key=value (known: %s)", pi->name,
                       (int)len, item, pi->n_params ? known : "none");
    size_t klen = (size_t)(eq - item);
    int i = find_param(pi, item, klen);
    if (i < 0) {
        if (pi->n_params == 0)
            return kv_fail(err, KV_EUSAGE, "%s: unknown parameter '%.*s' (%s takes no parameters)",
                           pi->name, (int)klen, item, pi->name);
        return kv_fail(err, KV_EUSAGE, "%s: unknown parameter '%.*s' (known: %s)", pi->name, (int)klen,
                       item, known);
    }
    if (seen[i]) return kv_fail(err, KV_EUSAGE, "%s: parameter '%s' given twice", pi->name, pi->params[i].key);
    seen[i] = true;
    char val[128];
    size_t vlen = len - klen - 1;
    if (vlen >= sizeof val)
        return kv_fail(err, KV_EUSAGE, "%s: value of '%s' is too long", pi->name, pi->params[i].key);
    memcpy(val, eq + 1, vlen);
    val[vlen] = '\0';
    return set_param(pi, i, val, out, err);
}

int policy_parse(const char *spec, policy_config *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    char known[256];
    size_t nlen = strcspn(spec, ":");
    const policy_iface *pi = NULL;
    for (const policy_iface *const *p = REGISTRY; *p; p++)
        if (strlen((*p)->name) == nlen && strncmp((*p)->name, spec, nlen) == 0) pi = *p;
    if (!pi) {
        list_names(known, sizeof known, NULL);
        if (nlen == 0) return kv_fail(err, KV_EUSAGE, "empty policy name (known: %s)", known);
        return kv_fail(err, KV_EUSAGE, "unknown policy '%.*s' (known: %s)", (int)nlen, spec, known);
    }
    out->iface = pi;
    out->n = pi->n_params;
    for (int i = 0; i < pi->n_params; i++) {   /* defaults, through the same checks */
        int rc = set_param(pi, i, pi->params[i].def, out, err);
        if (rc) return rc;
    }
    bool seen[POLICY_MAX_PARAMS] = {false};
    for (const char *s = spec + nlen; *s == ':';) {
        const char *item = s + 1;
        size_t len = strcspn(item, ":");
        if (len == 0) return kv_fail(err, KV_EUSAGE, "%s: empty parameter in '%s'", pi->name, spec);
        int rc = parse_item(pi, item, len, seen, out, err);
        if (rc) return rc;
        s = item + len;
    }
    make_canonical(out);
    return KV_OK;
}

int policy_parse_list(const char *verb, const char *list, policy_config *out, int max, int *n, kv_err *err)
{
    char buf[4096];
    if (strlen(list) >= sizeof buf) return cli_usage(err, verb, "--policies list is too long");
    snprintf(buf, sizeof buf, "%s", list);
    *n = 0;
    for (char *save = NULL, *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        if (*n == max) return cli_usage(err, verb, "at most %d policies", max);
        int rc = policy_parse(it, &out[(*n)++], err);
        if (rc) return rc;
    }
    if (!*n) return cli_usage(err, verb, "--policies is empty");
    return KV_OK;
}

static int param_index(const policy_config *cfg, const char *key, policy_param_kind kind)
{
    int i = find_param(cfg->iface, key, strlen(key));
    KV_ASSERT(i >= 0 && cfg->iface->params[i].kind == kind);
    return i;
}

double policy_num(const policy_config *cfg, const char *key)
{
    return cfg->num[param_index(cfg, key, PARAM_NUMBER)];
}

int policy_choice(const policy_config *cfg, const char *key)
{
    return cfg->choice[param_index(cfg, key, PARAM_CHOICE)];
}

/* ---- selection -------------------------------------------------------- */

int64_t policy_recent_count(double fraction, int64_t budget)
{
    if (!(fraction > 0) || budget <= 0) return 0;
    int64_t w = (int64_t)floor(fraction * (double)budget + 1e-9);
    return w > budget ? budget : w;
}

void policy_protect_recent(const policy_view *v, int64_t count, double *scores)
{
    if (count > v->n) count = v->n;
    for (int64_t j = v->n - count; j < v->n; j++) scores[j] = INFINITY;
}

typedef struct {
    const double *scores;
    const int64_t *pos;
    bool by_rank;   /* true: best first (score desc, pos desc); false: pos asc */
} order;

static double score_of(const order *o, int64_t i)
{
    double s = o->scores[i];
    return isnan(s) ? -INFINITY : s;
}

/* A total order (never inconsistent): a before b? Index breaks the last tie. */
static bool before(const order *o, int64_t a, int64_t b)
{
    if (o->by_rank) {
        double sa = score_of(o, a), sb = score_of(o, b);
        if (sa != sb) return sa > sb;
        if (o->pos[a] != o->pos[b]) return o->pos[a] > o->pos[b];
        return a > b;
    }
    if (o->pos[a] != o->pos[b]) return o->pos[a] < o->pos[b];
    return a < b;
}

/* Heapsort of idx[0..n) by `before`: O(n log n), in place, no allocation
 * (qsort has no context argument, and the engine calls this from threads). */
static void sift_down(const order *o, int64_t *idx, int64_t root, int64_t n)
{
    for (int64_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && before(o, idx[child], idx[child + 1])) child++;
        if (!before(o, idx[root], idx[child])) return;
        int64_t t = idx[root];
        idx[root] = idx[child];
        idx[child] = t;
    }
}

static void heap_sort(const order *o, int64_t *idx, int64_t n)
{
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(o, idx, i, n);
    for (int64_t end = n - 1; end > 0; end--) {
        int64_t t = idx[0];
        idx[0] = idx[end];
        idx[end] = t;
        sift_down(o, idx, 0, end);
    }
}

/* Min-rank heap over h[0..n): the root ranks FIRST among its subtree, so it is
 * the best of a set of evicted candidates, the first to leave that set. */
static void sift_worst_set(const order *o, int64_t *h, int64_t root, int64_t n)
{
    for (;;) {
        int64_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && before(o, h[c + 1], h[c])) c++;
        if (!before(o, h[c], h[root])) return;
        int64_t t = h[root];
        h[root] = h[c], h[c] = t;
        root = c;
    }
}

static int cmp_index(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static bool ascending(const int64_t *pos, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        if (pos[i] <= pos[i - 1]) return false;
    return true;
}

/* Keeps the `budget` best by finding the E = n - budget worst with a heap of
 * size E: O(n log E), so a decode step that evicts one candidate is O(n). */
int64_t policy_select(const double *scores, const int64_t *pos, int64_t n, int64_t budget,
                      int64_t *keep, int64_t *scratch)
{
    KV_ASSERT(n >= 0 && budget >= 0);
    order o = {scores, pos, true};
    const int64_t k = n < budget ? n : budget, E = n - k;
    if (E == 0) {
        for (int64_t i = 0; i < n; i++) keep[i] = i;
    } else {
        int64_t *worst = scratch; /* [E] */
        for (int64_t i = 0; i < E; i++) worst[i] = i;
        for (int64_t i = E / 2 - 1; i >= 0; i--) sift_worst_set(&o, worst, i, E);
        for (int64_t i = E; i < n; i++)
            if (before(&o, worst[0], i)) { /* i ranks after the best of the evicted: swap them */
                worst[0] = i;
                sift_worst_set(&o, worst, 0, E);
            }
        qsort(worst, (size_t)E, sizeof *worst, cmp_index); /* evicted indices, ascending */
        /* kept = every index not evicted, in index order */
        int64_t m = 0, w = 0;
        for (int64_t i = 0; i < n; i++) {
            if (w < E && worst[w] == i) w++;
            else keep[m++] = i;
        }
        KV_ASSERT(m == k);
    }
    o.by_rank = false;
    if (!ascending(pos, n)) heap_sort(&o, keep, k); /* index order is position order otherwise */
    return k;
}
