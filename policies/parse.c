/* parse: "name:key=value:..." into a policy_config with every default filled
 * in, and its canonical name (sorted by key,
 * docs/outputs.md#conventions-of-every-csv). The names come from the registry,
 * the keys from each policy's parameter list; nothing here knows any particular
 * policy. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "policies/policy.h"

/* "a, b, c" into buf: the parameter keys of params[], or (NULL) the policy names. */
static void list_names(char *buf, size_t cap, const policy_param *params)
{
    size_t used = 0;
    buf[0] = '\0';
    if (params) {
        for (int i = 0; i < policy_params_count(params) && used < cap; i++)
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", params[i].key);
        return;
    }
    const policy_iface *const *all = policy_all();
    for (const policy_iface *const *p = all; *p && used < cap; p++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", p == all ? "" : ", ", (*p)->name);
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

/* What parsing fills: the values of one owner's (a policy's, an allocator's) parameters. */
typedef struct {
    const char *owner;            /* its name, for the messages */
    const policy_param *params;
    int n;
    double *num;
    int *choice;
    const policy_aliases *aliases;  /* NULL: none */
    const policy_config **base;     /* where a policy_valued parameter's alias goes; NULL: no such */
} param_target;

static const policy_config *alias_find(const policy_aliases *t, const char *name, size_t len)
{
    for (int i = 0; t && i < t->n; i++)
        if (strlen(t->name[i]) == len && strncmp(t->name[i], name, len) == 0) return &t->cfg[i];
    return NULL;
}

/* A policy of the registry, else of the caller's table (t->user: plug-ins), by name (len bytes). */
static const policy_iface *find_policy(const policy_aliases *t, const char *name, size_t len)
{
    for (const policy_iface *const *p = policy_all(); *p; p++)
        if (strlen((*p)->name) == len && strncmp((*p)->name, name, len) == 0) return *p;
    for (const policy_iface *const *p = t ? t->user : NULL; p && *p; p++)
        if (strlen((*p)->name) == len && strncmp((*p)->name, name, len) == 0) return *p;
    for (int i = 0; t && i < t->n_defs; i++)
        if (strlen(t->defs[i]->name) == len && strncmp(t->defs[i]->name, name, len) == 0) return t->defs[i];
    return NULL;
}

static int set_param(const param_target *pi, int i, const char *val, kv_err *err)
{
    const policy_param *p = &pi->params[i];
    if (p->kind == PARAM_CHOICE) {
        int c = choice_index(p->choices, val);
        const policy_config *a =
            c < 0 && p->policy_valued && pi->base ? alias_find(pi->aliases, val, strlen(val)) : NULL;
        if (a && (c = choice_index(p->choices, a->iface->name)) < 0)
            return kv_fail(err, KV_EUSAGE, "%s: %s=%s is an alias of %s, which is not one of %s", pi->owner, p->key,
                           val, a->iface->name, p->choices);
        if (p->policy_valued && pi->base) *pi->base = a;
        if (c < 0)
            return kv_fail(err, KV_EUSAGE, "%s: %s=%s is not one of %s", pi->owner, p->key, val, p->choices);
        pi->choice[i] = c;
        return KV_OK;
    }
    const size_t len = strlen(val); /* the command line's number grammar (core/cli_args.h) */
    const double x = len && kv_number_len(val, len, false) == len ? strtod(val, NULL) : NAN;
    if (!isfinite(x))
        return kv_fail(err, KV_EUSAGE, "%s: %s=%s is not a number (range [%.16g, %.16g])", pi->owner, p->key,
                       val, p->min, p->max);
    if (p->integer && (x != floor(x) || kv_number_len(val, len, true) != len))
        return kv_fail(err, KV_EUSAGE, "%s: %s=%s is not an integer (range [%.16g, %.16g])", pi->owner, p->key,
                       val, p->min, p->max);
    if (x < p->min || x > p->max)
        return kv_fail(err, KV_EUSAGE, "%s: %s=%s is out of range [%.16g, %.16g]", pi->owner, p->key, val,
                       p->min, p->max);
    pi->num[i] = x + 0.0;   /* -0 → 0: one canonical name */
    return KV_OK;
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

static int params_parse(const param_target *t, const char *spec, const char *rest, char *canonical, size_t cap,
                        kv_err *err);

/* A policy_valued parameter's text: the policy's name, and when its configuration (an alias's) is
 * not the defaults, its parameters in brackets with ';' for ':' ("snapkv[kernel=5;window=64]"):
 * the label shows the expanded configuration, so runs stay comparable whatever the alias's name. */
static void base_text(const policy_config *b, char *buf, size_t cap)
{
    policy_config d = {0};
    kv_err e;
    const param_target t = {b->iface->name, b->iface->params, b->n, d.num, d.choice, NULL, NULL};
    int rc = params_parse(&t, "", "", d.canonical, sizeof d.canonical, &e);
    KV_ASSERT(rc == KV_OK); /* the defaults always parse */
    if (strcmp(d.canonical, b->canonical) == 0) {
        snprintf(buf, cap, "%s", b->iface->name);
        return;
    }
    int w = snprintf(buf, cap, "%s[%s]", b->iface->name, b->canonical);
    for (char *c = buf; w > 0 && *c; c++)
        if (*c == ':') *c = ';';
}

/* The canonical "key=value:..."; false when it does not fit in cap bytes (an alias's base). */
static bool make_canonical(const param_target *pi, char *canonical, size_t cap)
{
    size_t used = 0;
    canonical[0] = '\0';
    for (int i = 0; i < pi->n; i++) {
        const policy_param *p = &pi->params[i];
        char val[256];
        if (p->policy_valued && pi->base && *pi->base) base_text(*pi->base, val, sizeof val);
        else if (p->kind == PARAM_CHOICE) choice_text(p->choices, pi->choice[i], val, sizeof val);
        else format_num(pi->num[i], val, sizeof val);
        int w = snprintf(canonical + used, cap - used, "%s%s=%s", i ? ":" : "", p->key, val);
        if (w < 0 || (size_t)w >= cap - used) return false;
        used += (size_t)w;
    }
    return true;
}

/* One "key=value" item (len bytes at item). */
static int parse_item(const param_target *pi, const char *item, size_t len, bool *seen, kv_err *err)
{
    char known[256];
    list_names(known, sizeof known, pi->params);
    const char *eq = memchr(item, '=', len);
    if (!eq)
        return kv_fail(err, KV_EUSAGE, "%s: parameter '%.*s' is not key=value (known: %s)", pi->owner,
                       (int)len, item, pi->n ? known : "none");
    size_t klen = (size_t)(eq - item);
    int i = policy_params_index(pi->params, item, klen);
    if (i < 0) {
        if (pi->n == 0)
            return kv_fail(err, KV_EUSAGE, "%s: unknown parameter '%.*s' (%s takes no parameters)",
                           pi->owner, (int)klen, item, pi->owner);
        return kv_fail(err, KV_EUSAGE, "%s: unknown parameter '%.*s' (known: %s)", pi->owner, (int)klen,
                       item, known);
    }
    if (seen[i]) return kv_fail(err, KV_EUSAGE, "%s: parameter '%s' given twice", pi->owner, pi->params[i].key);
    seen[i] = true;
    char val[128];
    size_t vlen = len - klen - 1;
    if (vlen >= sizeof val)
        return kv_fail(err, KV_EUSAGE, "%s: value of '%s' is too long", pi->owner, pi->params[i].key);
    memcpy(val, eq + 1, vlen);
    val[vlen] = '\0';
    return set_param(pi, i, val, err);
}

static int params_parse(const param_target *t, const char *spec, const char *rest, char *canonical, size_t cap,
                        kv_err *err)
{
    for (int i = 0; i < t->n; i++) {   /* defaults, through the same checks */
        int rc = set_param(t, i, t->params[i].def, err);
        if (rc) return rc;
    }
    bool seen[POLICY_MAX_PARAMS] = {false};
    for (const char *s = rest; *s == ':';) {
        const char *item = s + 1;
        size_t len = strcspn(item, ":");
        if (len == 0) return kv_fail(err, KV_EUSAGE, "%s: empty parameter in '%s'", t->owner, spec);
        int rc = parse_item(t, item, len, seen, err);
        if (rc) return rc;
        s = item + len;
    }
    if (!make_canonical(t, canonical, cap))
        return kv_fail(err, KV_EUSAGE, "%s: '%s' makes a configuration name longer than %zu bytes", t->owner, spec,
                       cap - 1);
    return KV_OK;
}

/* Whether item list `rest` (":k=v:k=v") gives key (klen bytes). */
static bool gives_key(const char *rest, const char *key, size_t klen)
{
    for (const char *s = rest; *s == ':';) {
        const char *item = s + 1;
        size_t len = strcspn(item, ":");
        if (len > klen && item[klen] == '=' && strncmp(item, key, klen) == 0) return true;
        s = item + len;
    }
    return false;
}

/* `rest` with its one `preset=NAME` item replaced by the preset's items
 * that rest does not give itself: into buf (cap bytes). No preset: rest as is. */
static int expand_preset(const policy_iface *pi, const char *rest, char *buf, size_t cap, kv_err *err)
{
    const char *at = NULL, *name = NULL;
    size_t nlen = 0, used = 0;
    for (const char *s = rest; *s == ':';) {
        const char *item = s + 1;
        size_t len = strcspn(item, ":");
        if (len >= 7 && strncmp(item, "preset=", 7) == 0) {
            if (at) return kv_fail(err, KV_EUSAGE, "%s: parameter 'preset' given twice", pi->name);
            at = s, name = item + 7, nlen = len - 7;
        }
        s = item + len;
    }
    const policy_preset *pre = NULL;
    char known[128] = "";
    for (int i = 0; i < POLICY_MAX_PRESETS && pi->presets[i].name; i++) {
        size_t k = strlen(known);
        snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", pi->presets[i].name);
        if (at && strlen(pi->presets[i].name) == nlen && strncmp(pi->presets[i].name, name, nlen) == 0)
            pre = &pi->presets[i];
    }
    if (at && !known[0]) return kv_fail(err, KV_EUSAGE, "%s: has no presets", pi->name);
    if (at && !pre)
        return kv_fail(err, KV_EUSAGE, "%s: unknown preset '%.*s' (known: %s)", pi->name, (int)nlen, name, known);
    buf[0] = '\0';
    for (const char *p = pre ? pre->params : ""; *p;) {   /* the preset's items the spec leaves out */
        size_t len = strcspn(p, ":"), klen = strcspn(p, "=");
        if (!gives_key(rest, p, klen)) used += (size_t)snprintf(buf + used, cap - used, ":%.*s", (int)len, p);
        p += len + (p[len] == ':');
    }
    const char *tail = at ? at + 1 + 7 + nlen : rest;   /* rest without the preset item */
    int w = snprintf(buf + used, cap - used, "%.*s%s", (int)(at ? at - rest : 0), rest, tail);
    if (w < 0 || (size_t)w >= cap - used) return kv_fail(err, KV_EUSAGE, "%s: specification too long", pi->name);
    return KV_OK;
}

int policy_params_parse(const char *owner, const policy_param *params, const char *spec, const char *rest,
                        double *num, int *choice, char *canonical, size_t cap, kv_err *err)
{
    const param_target t = {owner, params, policy_params_count(params), num, choice, NULL, NULL};
    return params_parse(&t, spec, rest, canonical, cap, err);
}

/* Sets one parameter of a parsed configuration (checked as the parser checks
 * it) and rebuilds its canonical name: policy_without_wo's relabel (criticalkv
 * wo=absent on a trace without /wo). */
static int policy_config_set(policy_config *cfg, const char *key, const char *value, kv_err *err)
{
    const param_target t = {cfg->iface->name, cfg->iface->params, cfg->n, cfg->num, cfg->choice, NULL, &cfg->base};
    const int i = policy_params_index(t.params, key, strlen(key));
    if (i < 0) return kv_fail(err, KV_EUSAGE, "%s: unknown parameter '%s'", t.owner, key);
    KV_ASSERT(!t.params[i].policy_valued); /* its alias would be lost: not asked for */
    int rc = set_param(&t, i, value, err);
    if (!rc && !make_canonical(&t, cfg->canonical, sizeof cfg->canonical))
        rc = kv_fail(err, KV_EUSAGE, "%s: %s=%s makes the configuration name too long", t.owner, key, value);
    return rc;
}

int policy_parse_in(const policy_aliases *t, const char *spec, policy_config *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    char known[256];
    size_t nlen = strcspn(spec, ":");
    const policy_iface *pi = find_policy(t, spec, nlen);
    const policy_config *a = pi ? NULL : alias_find(t, spec, nlen);
    if (a) {
        if (spec[nlen])
            return kv_fail(err, KV_EUSAGE, "alias '%.*s' takes no parameters (define another alias: --alias "
                           "NAME=policy:key=value...)", (int)nlen, spec);
        *out = *a;
        snprintf(out->alias, sizeof out->alias, "%s", spec);
        return KV_OK;
    }
    if (!pi) {
        list_names(known, sizeof known, NULL);
        if (nlen == 0) return kv_fail(err, KV_EUSAGE, "empty policy name (known: %s)", known);
        return kv_fail(err, KV_EUSAGE, "unknown policy '%.*s' (known: %s%s%s%s)", (int)nlen, spec, known,
                       t && t->n ? ", and the aliases given" : "", t && t->user && t->user[0] ? ", and the "
                       "plug-ins' policies" : "", t && t->n_defs ? ", and the definitions given" : "");
    }
    out->iface = pi;
    out->n = policy_n_params(pi);
    const param_target pt = {pi->name, pi->params, out->n, out->num, out->choice, t, &out->base};
    char rest[512];
    int rc = expand_preset(pi, spec + nlen, rest, sizeof rest, err);
    if (rc) return rc;
    return params_parse(&pt, spec, rest, out->canonical, sizeof out->canonical, err);
}

int policy_parse(const char *spec, policy_config *out, kv_err *err)
{
    return policy_parse_in(NULL, spec, out, err);
}

int policy_alias_add(policy_aliases *t, const char *def, kv_err *err)
{
    const size_t nlen = strcspn(def, "=");
    if (nlen == 0 || !def[nlen])
        return kv_fail(err, KV_EUSAGE, "--alias '%s' is not NAME=policy[:key=value...]", def);
    if (nlen >= sizeof t->name[0])
        return kv_fail(err, KV_EUSAGE, "--alias: the name '%.*s' is longer than %zu bytes", (int)nlen, def,
                       sizeof t->name[0] - 1);
    for (size_t i = 0; i < nlen; i++)
        if (!isalnum((unsigned char)def[i]) && !strchr("_.-", def[i]))
            return kv_fail(err, KV_EUSAGE, "--alias: the name '%.*s' has a character other than letters, digits "
                           "and _ . -", (int)nlen, def);
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)nlen, def);
    if (find_policy(t, name, nlen)) return kv_fail(err, KV_EUSAGE, "--alias %s: %s is a policy's name", name, name);
    if (alias_find(t, name, nlen)) return kv_fail(err, KV_EUSAGE, "--alias %s: defined twice", name);
    if (t->n >= POLICY_MAX_ALIASES) return kv_fail(err, KV_EUSAGE, "--alias %s: more than %d aliases", name,
                                                   POLICY_MAX_ALIASES);
    const char *rhs = def + nlen + 1;
    if (alias_find(t, rhs, strcspn(rhs, ":")))
        return kv_fail(err, KV_EUSAGE, "--alias %s: '%.*s' is an alias; an alias names a policy", name,
                       (int)strcspn(rhs, ":"), rhs);
    int rc = policy_parse_in(t, rhs, &t->cfg[t->n], err);
    if (rc) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        err->code = KV_OK; /* kv_fail keeps the first error: this one replaces it, the alias named */
        return kv_fail(err, rc, "--alias %s: %s", name, why);
    }
    snprintf(t->name[t->n], sizeof t->name[0], "%s", name);
    t->n++;
    return KV_OK;
}

int policy_parse_list(const char *verb, const char *list, policy_config *out, int max, int *n, kv_err *err)
{
    return policy_parse_list_in(NULL, verb, list, out, max, n, err);
}

int policy_parse_list_in(const policy_aliases *t, const char *verb, const char *list, policy_config *out, int max,
                         int *n, kv_err *err)
{
    cli_list l;
    *n = 0;
    int rc = cli_list_split(verb, "--policies", list, max, &l, err);
    for (int i = 0; !rc && i < l.n; i++) {
        if ((rc = policy_parse_in(t, l.item[i], &out[i], err))) return rc;
        for (int j = 0; !rc && j < i; j++)   /* one configuration, two spellings: caught before any work */
            if (out[j].iface == out[i].iface && strcmp(out[j].canonical, out[i].canonical) == 0) {
                char label[sizeof out[i].canonical + 64];
                snprintf(label, sizeof label, "%s%s%s", out[i].iface->name, out[i].canonical[0] ? ":" : "",
                         out[i].canonical);
                rc = cli_list_repeat(verb, "--policies", &l, j, i, "the same configuration", label, err);
            }
    }
    if (!rc) *n = l.n;
    return rc;
}

bool policy_reads_wo(const policy_config *cfg)
{
    const policy_iface *pi = cfg->iface;
    return pi->needs_wo && (!pi->needs_wo_for || pi->needs_wo_for(cfg));
}

int policy_without_wo(policy_config *cfg, bool *changed, kv_err *err)
{
    const char *set = cfg->iface->without_wo;
    *changed = policy_reads_wo(cfg) && set;
    if (!*changed) return KV_OK;
    char key[64];
    const char *eq = strchr(set, '=');
    if (!eq || (size_t)(eq - set) >= sizeof key) return kv_fail(err, KV_EUSAGE, "%s: its without_wo \"%s\" is not "
                                                               "key=value", cfg->iface->name, set);
    snprintf(key, sizeof key, "%.*s", (int)(eq - set), set);
    return policy_config_set(cfg, key, eq + 1, err);
}
