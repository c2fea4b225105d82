#include "cli_args.h"

#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t digits(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n && s[k] >= '0' && s[k] <= '9') k++;
    return k;
}

size_t kv_number_len(const char *s, size_t n, bool integer)
{
    size_t k = n && s[0] == '-';
    const size_t whole = digits(s + k, n - k);
    k += whole;
    if (integer) return whole ? k : 0;
    size_t frac = 0;
    if (k < n && s[k] == '.') frac = digits(s + k + 1, n - k - 1), k += 1 + frac;
    if (!whole && !frac) return 0;
    if (k < n && (s[k] == 'e' || s[k] == 'E')) {
        size_t e = k + 1 + (k + 1 < n && (s[k + 1] == '-' || s[k + 1] == '+'));
        const size_t ed = digits(s + e, n - e);
        if (ed) k = e + ed;
    }
    return k;
}

/* Whether s is an optional '-' (when `sign`) and one or more decimal digits, nothing else. */
static bool plain_integer(const char *s, bool sign)
{
    const size_t n = strlen(s);
    return (sign || *s != '-') && n && kv_number_len(s, n, true) == n;
}

int cli_parse_i64(const char *verb, const char *opt, const char *s, int64_t lo, int64_t hi,
                  int64_t *out, kv_err *err)
{
    char *end;
    errno = 0;
    long long v = plain_integer(s, true) ? strtoll(s, &end, 10) : 0;
    if (!plain_integer(s, true) || errno)
        return cli_usage(err, verb, "%s expects an integer, got '%s'", opt, s);
    if (v < lo || v > hi)
        return cli_usage(err, verb, "%s = %lld is out of range [%lld, %lld]", opt, v, (long long)lo,
                         (long long)hi);
    *out = v;
    return KV_OK;
}

int cli_list_split(const char *verb, const char *opt, const char *list, int max, cli_list *out, kv_err *err)
{
    out->n = 0;
    if (strlen(list) >= sizeof out->buf) return cli_usage(err, verb, "%s list is too long", opt);
    if (!*list) return cli_usage(err, verb, "%s is empty", opt);
    for (const char *p = list; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return cli_usage(err, verb, "%s '%s' holds white space or a control character", opt, list);
    snprintf(out->buf, sizeof out->buf, "%s", list);
    for (char *p = out->buf;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (!*p) return cli_usage(err, verb, "%s '%s' has an empty entry", opt, list);
        if (out->n == max || out->n == CLI_LIST_MAX)
            return cli_usage(err, verb, "%s: at most %d values", opt, max < CLI_LIST_MAX ? max : CLI_LIST_MAX);
        out->item[out->n++] = p;
        if (!comma) return KV_OK;
        p = comma + 1;
    }
}

int cli_list_repeat(const char *verb, const char *opt, const cli_list *l, int i, int j, const char *what,
                    const char *canonical, kv_err *err)
{
    if (strcmp(l->item[i], l->item[j]) == 0)
        return cli_usage(err, verb, "%s names %s '%s' twice", opt, what, l->item[i]);
    return cli_usage(err, verb, "%s names %s twice: '%s' and '%s' are both %s", opt, what, l->item[i], l->item[j],
                     canonical);
}

int cli_parse_i64_list(const char *verb, const char *opt, const char *list, int64_t lo, int64_t hi, int64_t *out,
                       int max, int *n, kv_err *err)
{
    cli_list l;
    *n = 0;
    int rc = cli_list_split(verb, opt, list, max, &l, err);
    for (int i = 0; !rc && i < l.n; i++) {
        rc = cli_parse_i64(verb, opt, l.item[i], lo, hi, &out[i], err);
        for (int j = 0; !rc && j < i; j++)
            if (out[j] == out[i]) {
                char canon[32];
                snprintf(canon, sizeof canon, "%lld", (long long)out[i]);
                rc = cli_list_repeat(verb, opt, &l, j, i, "the value", canon, err);
            }
    }
    if (!rc) *n = l.n;
    return rc;
}

int cli_parse_u64(const char *verb, const char *opt, const char *s, uint64_t *out, kv_err *err)
{
    char *end;
    errno = 0;
    unsigned long long v = plain_integer(s, false) ? strtoull(s, &end, 10) : 0;
    if (!plain_integer(s, false) || errno)
        return cli_usage(err, verb, "%s expects a non-negative integer, got '%s'", opt, s);
    *out = v;
    return KV_OK;
}

int cli_parse_double(const char *verb, const char *opt, const char *s, double lo, double hi, double *out,
                     kv_err *err)
{
    char *end;
    double v = strtod(s, &end);
    const bool plain = *s && kv_number_len(s, strlen(s), false) == strlen(s); /* the one number grammar */
    if (!plain || end == s || *end != '\0' || !(v >= lo && v <= hi))
        return cli_usage(err, verb, "%s expects a number in [%g, %g], got '%s'", opt, lo, hi, s);
    *out = v;
    return KV_OK;
}

int cli_parse_dtype(const char *verb, const char *opt, const char *s, trace_dtype *out, kv_err *err)
{
    if (strcmp(s, "f32") == 0) *out = TRACE_F32;
    else if (strcmp(s, "f16") == 0) *out = TRACE_F16;
    else return cli_usage(err, verb, "%s must be f32 or f16, got '%s'", opt, s);
    return KV_OK;
}

int cli_usage(kv_err *err, const char *verb, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kv_fail(err, KV_EUSAGE, "%s: %s (see 'kvtrace %s --help')", verb, msg, verb);
}

int cli_bad_option(kv_err *err, const char *verb, int c, int optopt_value, const char *arg)
{
    /* getopt_long with a ':'-prefixed optstring: ':' is a missing value, '?' an
     * unknown option (optopt holds the letter of an unknown short option). */
    if (c == ':') return cli_usage(err, verb, "option '%s' needs a value", arg);
    if (optopt_value > 0 && optopt_value < 128)
        return cli_usage(err, verb, "unknown option '-%c'", optopt_value);
    return cli_usage(err, verb, "unknown option '%s'", arg);
}

int cli_report(const kv_err *err)
{
    if (err->code == KV_OK) return KV_OK;
    fprintf(stderr, "kvtrace: error: %s\n", err->msg);
    return err->code >= KV_EFAIL && err->code <= KV_EINPUT ? err->code : KV_EFAIL;
}

int cli_status(int rc, const kv_err *err)
{
    if (rc == KV_OK) return KV_OK;
    return err->code >= KV_EFAIL && err->code <= KV_EINPUT ? err->code : rc >= KV_EFAIL && rc <= KV_EINPUT ? rc : KV_EFAIL;
}

int cli_exit(int rc, const kv_err *err)
{
    if (rc == KV_OK) return KV_OK;
    if (err->code != KV_OK && err->msg[0]) return cli_report(err);
    if (err->msg[0]) fprintf(stderr, "kvtrace: error: %s\n", err->msg);
    else fprintf(stderr, "kvtrace: error: failed (status %d) without a message\n", rc);
    return cli_status(rc, err);
}

static bool shell_plain(const char *a)
{
    if (!*a) return false;
    for (; *a; a++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=:,./@%", *a)) return false;
    return true;
}

char *cli_command_line(int argc, char **argv)
{
    size_t len = sizeof "kvtrace";
    for (int i = 0; i < argc; i++) len += 4 * strlen(argv[i]) + 3; /* worst case: every ' becomes '\'' */
    char *s = malloc(len), *w = s;
    if (!s) return NULL;
    w += sprintf(w, "kvtrace");
    for (int i = 0; i < argc; i++) {
        *w++ = ' ';
        if (shell_plain(argv[i])) {
            w += sprintf(w, "%s", argv[i]);
            continue;
        }
        *w++ = '\'';
        for (const char *a = argv[i]; *a; a++) {
            if (*a == '\'') w += sprintf(w, "'\\''");
            else *w++ = *a;
        }
        *w++ = '\'';
    }
    *w = '\0';
    return s;
}

int cli_once(unsigned char *seen, const void *longs, int c, const char *verb, kv_err *err)
{
    if (c <= 0 || c >= 256 || c == '?' || c == ':' || !seen[c]++) return KV_OK;
    const char *name = NULL;
    for (const struct option *o = longs; o->name && !name; o++)
        if (o->val == c) name = o->name;
    return name ? cli_usage(err, verb, "--%s is given twice: give it once", name)
                : cli_usage(err, verb, "-%c is given twice: give it once", c);
}

/* One "F%" item: F in (0, 100] into a fraction. */
static int parse_percent(const char *verb, const char *opt, const char *item, double *f, kv_err *err)
{
    const size_t n = strlen(item);
    const double x = n > 1 && kv_number_len(item, n - 1, false) == n - 1 ? strtod(item, NULL) : NAN;
    if (item[n - 1] != '%' || !(x > 0 && x <= 100))
        return cli_usage(err, verb, "%s: '%s' is not a percentage in (0, 100] (e.g. 10%%)", opt, item);
    *f = x / 100;
    return KV_OK;
}

int cli_parse_budgets(const char *verb, const char *opt, const char *list, int max, int64_t *budgets,
                      double *fractions, int *n, kv_err *err)
{
    cli_list l;
    int rc = max > 1 ? cli_list_split(verb, opt, list, max, &l, err) : (l.n = 1, l.item[0] = list, KV_OK);
    *n = 0;
    for (int i = 0; !rc && i < l.n; i++) {
        budgets[i] = 0;
        if (fractions) fractions[i] = NAN;
        if (strchr(l.item[i], '%') && !fractions)
            rc = cli_usage(err, verb, "%s: '%s': a percentage of the trace's length is for sim, which replays "
                           "recorded traces of known length; give a number of rows", opt, l.item[i]);
        else if (strchr(l.item[i], '%')) rc = parse_percent(verb, opt, l.item[i], &fractions[i], err);
        else rc = cli_parse_i64(verb, opt, l.item[i], 1, CLI_BUDGET_MAX, &budgets[i], err);
        for (int j = 0; !rc && j < i; j++) /* a value twice ("16,016", "10%,10.0%"): refused before any work */
            if (budgets[j] == budgets[i] && (!fractions || fractions[j] == fractions[i] ||
                                             (isnan(fractions[j]) && isnan(fractions[i])))) {
                char canon[64];
                if (!fractions || isnan(fractions[i])) snprintf(canon, sizeof canon, "%lld", (long long)budgets[i]);
                else snprintf(canon, sizeof canon, "%g%%", fractions[i] * 100);
                rc = cli_list_repeat(verb, opt, &l, j, i, "the value", canon, err);
            }
    }
    if (!rc) *n = l.n;
    return rc;
}
