#include "cli_args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_i64(const char *verb, const char *opt, const char *s, int64_t lo, int64_t hi,
                  int64_t *out, kv_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return cli_usage(err, verb, "%s expects an integer, got '%s'", opt, s);
    if (v < lo || v > hi)
        return cli_usage(err, verb, "%s = %lld is out of range [%lld, %lld]", opt, v, (long long)lo,
                         (long long)hi);
    *out = v;
    return KV_OK;
}

int cli_parse_i64_list(const char *verb, const char *opt, const char *list, int64_t lo, int64_t hi, int64_t *out,
                       int max, int *n, kv_err *err)
{
    char buf[4096];
    if (strlen(list) >= sizeof buf) return cli_usage(err, verb, "%s list is too long", opt);
    snprintf(buf, sizeof buf, "%s", list);
    *n = 0;
    for (char *save = NULL, *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        if (*n == max) return cli_usage(err, verb, "%s: at most %d values", opt, max);
        int rc = cli_parse_i64(verb, opt, it, lo, hi, &out[(*n)++], err);
        if (rc) return rc;
    }
    if (!*n) return cli_usage(err, verb, "%s is empty", opt);
    return KV_OK;
}

int cli_parse_u64(const char *verb, const char *opt, const char *s, uint64_t *out, kv_err *err)
{
    char *end;
    errno = 0;
    if (*s == '-') return cli_usage(err, verb, "%s expects a non-negative integer, got '%s'", opt, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return cli_usage(err, verb, "%s expects a non-negative integer, got '%s'", opt, s);
    *out = v;
    return KV_OK;
}

int cli_parse_double(const char *verb, const char *opt, const char *s, double lo, double hi, double *out,
                     kv_err *err)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= lo && v <= hi))
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
    return err->code;
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
