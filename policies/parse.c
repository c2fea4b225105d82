/* parse: "name:key=value:..." into a policy_config with every default
 * filled in, and its canonical name (sorted by key, SPEC §2). The names come
 * from the registry, the keys from each policy's parameter list; nothing here
 * knows any particular policy. */
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
} param_target;

static int set_param(const param_target *pi, int i, const char *val, kv_err *err)
{
    const policy_param *p = &pi->params[i];
    if (p->kind == PARAM_CHOICE) {
        int c = choice_index(p->choices, val);
        if (c < 0)
            return kv_fail(err, KV_EUSAGE, "%s: %s=%s is not one of %s", pi->owner, p->key, val, p->choices);
        pi->choice[i] = c;
        return KV_OK;
    }
    char *end = NULL;
    double x = strtod(val, &end);
    if (val[0] == '\0' || isspace((unsigned char)val[0]) || *end != '\0' || !isfinite(x))
        return kv_fail(err, KV_EUSAGE, "%s: %s=%s is not a number (range [%.16g, %.16g])", pi->owner, p->key,
                       val, p->min, p->max);
    if (p->integer && x != floor(x))
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

static void make_canonical(const param_target *pi, char *canonical, size_t cap)
{
    size_t used = 0;
    canonical[0] = '\0';
    for (int i = 0; i < pi->n; i++) {
        const policy_param *p = &pi->params[i];
        char val[64];
        if (p->kind == PARAM_CHOICE) choice_text(p->choices, pi->choice[i], val, sizeof val);
        else format_num(pi->num[i], val, sizeof val);
        int w = snprintf(canonical + used, cap - used, "%s%s=%s", i ? ":" : "", p->key, val);
        KV_ASSERT(w >= 0 && (size_t)w < cap - used);
        used += (size_t)w;
    }
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

int policy_params_parse(const char *owner, const policy_param *params, const char *spec, const char *rest,
                        double *num, int *choice, char *canonical, size_t cap, kv_err *err)
{
    const param_target t = {owner, params, policy_params_count(params), num, choice};
    for (int i = 0; i < t.n; i++) {   /* defaults, through the same checks */
        int rc = set_param(&t, i, params[i].def, err);
        if (rc) return rc;
    }
    bool seen[POLICY_MAX_PARAMS] = {false};
    for (const char *s = rest; *s == ':';) {
        const char *item = s + 1;
        size_t len = strcspn(item, ":");
        if (len == 0) return kv_fail(err, KV_EUSAGE, "%s: empty parameter in '%s'", owner, spec);
        int rc = parse_item(&t, item, len, seen, err);
        if (rc) return rc;
        s = item + len;
    }
    make_canonical(&t, canonical, cap);
    return KV_OK;
}

int policy_config_set(policy_config *cfg, const char *key, const char *value, kv_err *err)
{
    const param_target t = {cfg->iface->name, cfg->iface->params, cfg->n, cfg->num, cfg->choice};
    const int i = policy_params_index(t.params, key, strlen(key));
    if (i < 0) return kv_fail(err, KV_EUSAGE, "%s: unknown parameter '%s'", t.owner, key);
    int rc = set_param(&t, i, value, err);
    if (!rc) make_canonical(&t, cfg->canonical, sizeof cfg->canonical);
    return rc;
}

int policy_parse(const char *spec, policy_config *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    char known[256];
    size_t nlen = strcspn(spec, ":");
    const policy_iface *pi = NULL;
    for (const policy_iface *const *p = policy_all(); *p; p++)
        if (strlen((*p)->name) == nlen && strncmp((*p)->name, spec, nlen) == 0) pi = *p;
    if (!pi) {
        list_names(known, sizeof known, NULL);
        if (nlen == 0) return kv_fail(err, KV_EUSAGE, "empty policy name (known: %s)", known);
        return kv_fail(err, KV_EUSAGE, "unknown policy '%.*s' (known: %s)", (int)nlen, spec, known);
    }
    out->iface = pi;
    out->n = policy_n_params(pi);
    return policy_params_parse(pi->name, pi->params, spec, spec + nlen, out->num, out->choice, out->canonical,
                               sizeof out->canonical, err);
}

int policy_parse_list(const char *verb, const char *list, policy_config *out, int max, int *n, kv_err *err)
{
    cli_list l;
    *n = 0;
    int rc = cli_list_split(verb, "--policies", list, max, &l, err);
    for (int i = 0; !rc && i < l.n; i++) {
        if ((rc = policy_parse(l.item[i], &out[i], err))) return rc;
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
