/* A verb's option table read with getopt_long (cli_opts.h). */
#include "cli_opts.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli_args.h"

/* Index of `arg` in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *arg)
{
    const size_t len = strlen(arg);
    int i = 0;
    for (const char *c = choices;; i++) {
        const size_t n = strcspn(c, "|");
        if (n == len && strncmp(c, arg, len) == 0) return i;
        if (!c[n]) return -1;
        c += n + 1;
    }
}

/* "--NAME must be a, b or c, got 'ARG'" */
static int bad_choice(const char *verb, const char *opt, const char *choices, const char *arg, kv_err *err)
{
    char list[256];
    size_t used = 0;
    int count = 1;
    for (const char *c = choices; *c; c++) count += *c == '|';
    int i = 0;
    for (const char *c = choices; used < sizeof list; i++) {
        const size_t len = strcspn(c, "|");
        const char *sep = i == 0 ? "" : i == count - 1 ? " or " : ", ";
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%.*s", sep, (int)len, c);
        if (!c[len]) break;
        c += len + 1;
    }
    return cli_usage(err, verb, "%s must be %s, got '%s'", opt, list, arg);
}

static int set_value(const char *verb, const cli_opt *o, const char *arg, void *opts, kv_err *err)
{
    char opt[80];
    snprintf(opt, sizeof opt, "--%s", o->name);
    char *field = (char *)opts + o->at;
    int64_t i64;
    int rc = KV_OK, c;
    switch (o->kind) {
    case CLI_FLAG: *(bool *)field = true; break;
    case CLI_TEXT: *(const char **)field = arg; break;
    case CLI_I64: rc = cli_parse_i64(verb, opt, arg, (int64_t)o->lo, (int64_t)o->hi, (int64_t *)field, err); break;
    case CLI_INT:
        if (!(rc = cli_parse_i64(verb, opt, arg, (int64_t)o->lo, (int64_t)o->hi, &i64, err))) *(int *)field = (int)i64;
        break;
    case CLI_U64: rc = cli_parse_u64(verb, opt, arg, (uint64_t *)field, err); break;
    case CLI_F64: rc = cli_parse_double(verb, opt, arg, o->lo, o->hi, (double *)field, err); break;
    case CLI_CHOICE:
        if ((c = choice_index(o->choices, arg)) < 0) rc = bad_choice(verb, opt, o->choices, arg, err);
        else *(int *)field = c;
        break;
    case CLI_DTYPE: rc = cli_parse_dtype(verb, opt, arg, (trace_dtype *)field, err); break;
    case CLI_CUSTOM: rc = o->parse(verb, arg, opts, err); break;
    case CLI_CUSTOM_AT: rc = o->parse(verb, arg, field, err); break;
    }
    return rc;
}

/* a and b as "a,b" in the options' join space; NULL when it is full. */
static const char *join(cli_join_space *sp, const char *a, const char *b)
{
    const size_t na = strlen(a), nb = strlen(b);
    if (sp->used + na + nb + 2 > sizeof sp->text) return NULL;
    char *t = sp->text + sp->used;
    memcpy(t, a, na), t[na] = ',', memcpy(t + na + 1, b, nb + 1);
    sp->used += na + nb + 2;
    return t;
}

/* One occurrence of row `row`: read now (a first CLI_ONCE, any CLI_EACH), added to the row's list
 * (CLI_JOIN), or refused (a second CLI_ONCE). */
static int occurrence(const char *verb, const cli_opt *table, int row, const char *arg, void *opts, int *count,
                      const char **list, kv_err *err)
{
    const cli_opt *o = &table[row];
    if (count[row]++ && o->many == CLI_ONCE)
        return cli_usage(err, verb, "--%s is given twice: give it once", o->name);
    if (o->many != CLI_JOIN) return set_value(verb, o, arg, opts, err);
    if (!list[row]) list[row] = arg;
    else if (!(list[row] = join((cli_join_space *)((char *)opts + o->join_at), list[row], arg)))
        return cli_usage(err, verb, "--%s: the lists given are longer than %d bytes together", o->name,
                         CLI_JOIN_SPACE);
    return KV_OK;
}

int cli_opts_parse(const char *verb, int argc, char **argv, const cli_opt *table, void *opts, bool *help,
                   int *first, kv_err *err)
{
    struct option longs[CLI_MAX_OPTS + 2];
    const char *shorts = ":h";
    int n = 0, output = -1; /* the row -o stands for */
    for (; table[n].name; n++) {
        KV_ASSERT(n < CLI_MAX_OPTS);
        longs[n] = (struct option){table[n].name, table[n].kind == CLI_FLAG ? no_argument : required_argument,
                                   NULL, 256 + n};
        if (strcmp(table[n].name, "output") == 0) shorts = ":o:h", output = n;
    }
    longs[n] = (struct option){"help", no_argument, NULL, 'h'};
    longs[n + 1] = (struct option){NULL, 0, NULL, 0};
    *help = false;
    optind = 1;
    opterr = 0;
    int c, rc = KV_OK, count[CLI_MAX_OPTS] = {0};
    const char *list[CLI_MAX_OPTS] = {0};
    while (!rc && (c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
        const int row = c == 'o' ? output : c - 256;
        if (c == 'h') *help = true;
        else if (row >= 0 && row < n) rc = occurrence(verb, table, row, optarg, opts, count, list, err);
        else rc = cli_bad_option(err, verb, c, optopt, argv[optind - 1]);
    }
    for (int r = 0; !rc && r < n; r++)
        if (list[r]) rc = set_value(verb, &table[r], list[r], opts, err);
    *first = optind;
    return rc;
}
