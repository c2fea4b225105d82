/* cli_opts: every kind of row reads its argument into the right field, the
 * messages are the verbs' (ranges, choices, unknown options, missing values),
 * -o and -h work, positional arguments are where getopt leaves them, and a
 * second parse starts afresh. */
#include "testutil.h"

#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "trace/trace.h"

typedef struct {
    bool force;
    const char *output, *model;
    int64_t chunk;
    int threads;
    uint64_t seed;
    double temp;
    int mode;
    trace_dtype dtype;
    int pairs[2];
    bool custom_called;
    int at_field[2];   /* --near: a CLI_CUSTOM_AT row's own field */
} toy_opts;

/* "A,B": two small integers, as a verb's own parser would read them. */
static int parse_pair(const char *verb, const char *arg, void *opts, kv_err *err)
{
    toy_opts *o = opts;
    o->custom_called = true;
    if (sscanf(arg, "%d,%d", &o->pairs[0], &o->pairs[1]) != 2)
        return kv_fail(err, KV_EUSAGE, "%s: --pair wants A,B, got '%s'", verb, arg);
    return KV_OK;
}

/* "A,B" into the int[2] it is handed: a CLI_CUSTOM_AT parser sees its field, not the struct. */
static int parse_near(const char *verb, const char *arg, void *field, kv_err *err)
{
    int *v = field;
    if (sscanf(arg, "%d,%d", &v[0], &v[1]) != 2)
        return kv_fail(err, KV_EUSAGE, "%s: --near wants A,B, got '%s'", verb, arg);
    return KV_OK;
}

static const cli_opt TOY[] = {
    {CLI_ROW("force", CLI_FLAG, toy_opts, force)},
    {CLI_ROW("output", CLI_TEXT, toy_opts, output)},
    {CLI_ROW("model", CLI_TEXT, toy_opts, model)},
    {CLI_ROW("chunk", CLI_I64, toy_opts, chunk), .lo = 1, .hi = 1024},
    {CLI_ROW("threads", CLI_INT, toy_opts, threads), .lo = 1, .hi = 256},
    {CLI_ROW("seed", CLI_U64, toy_opts, seed)},
    {CLI_ROW("temperature", CLI_F64, toy_opts, temp), .lo = 0, .hi = 10},
    {CLI_ROW("mode", CLI_CHOICE, toy_opts, mode), .choices = "colsum|full|none"},
    {CLI_ROW("dtype", CLI_DTYPE, toy_opts, dtype)},
    {.name = "pair", .kind = CLI_CUSTOM, .parse = parse_pair},
    {.name = "near", .kind = CLI_CUSTOM_AT, .at = offsetof(toy_opts, at_field), .parse = parse_near},
    {0},
};

static const cli_opt TWO[] = {
    {CLI_ROW("device", CLI_CHOICE, toy_opts, mode), .choices = "cpu|cuda"},
    {0},
};

/* Parses a NULL-terminated argument list; returns the code and fills err.msg. */
static int parse(const cli_opt *table, toy_opts *o, bool *help, int *first, kv_err *err, char **args)
{
    int argc = 0;
    while (args[argc]) argc++;
    memset(err, 0, sizeof *err);
    return cli_opts_parse("toy", argc, args, table, o, help, first, err);
}

static void every_kind(void **state)
{
    (void)state;
    toy_opts o = {0};
    bool help = true;
    int first = 0;
    kv_err err;
    char *args[] = {"toy", "--force", "-o", "out", "--model=m.gguf", "--chunk", "32", "--threads", "7", "--seed",
                    "18446744073709551615", "--temperature", "0.5", "--mode", "full", "--dtype", "f16", "--pair",
                    "3,4", "--near", "5,6", "trace.h5", "more", NULL};
    assert_int_equal(parse(TOY, &o, &help, &first, &err, args), KV_OK);
    assert_false(help);
    assert_true(o.force);
    assert_string_equal(o.output, "out");
    assert_string_equal(o.model, "m.gguf");
    assert_int_equal(o.chunk, 32);
    assert_int_equal(o.threads, 7);
    assert_true(o.seed == UINT64_MAX);
    assert_true(o.temp == 0.5);
    assert_int_equal(o.mode, 1);
    assert_int_equal(o.dtype, TRACE_F16);
    assert_true(o.custom_called);
    assert_int_equal(o.pairs[0], 3);
    assert_int_equal(o.pairs[1], 4);
    assert_int_equal(o.at_field[0], 5);
    assert_int_equal(o.at_field[1], 6);
    assert_int_equal(first, 21);
    assert_string_equal(args[first], "trace.h5");
}

static void help_and_defaults(void **state)
{
    (void)state;
    toy_opts o = {.chunk = 128, .mode = 2};
    bool help = false;
    int first = 0;
    kv_err err;
    char *args[] = {"toy", "--help", NULL};
    assert_int_equal(parse(TOY, &o, &help, &first, &err, args), KV_OK);
    assert_true(help);
    assert_int_equal(o.chunk, 128); /* untouched */
    assert_int_equal(o.mode, 2);
    char *args2[] = {"toy", "-h", NULL};
    help = false;
    assert_int_equal(parse(TOY, &o, &help, &first, &err, args2), KV_OK);
    assert_true(help);
    char *args3[] = {"toy", "x.h5", NULL}; /* a second parse starts at argv[1] again */
    assert_int_equal(parse(TOY, &o, &help, &first, &err, args3), KV_OK);
    assert_false(help);
    assert_int_equal(first, 1);
}

/* Expects a usage error whose message is exactly `want`. */
static void expect_usage(const cli_opt *table, char **args, const char *want)
{
    toy_opts o = {0};
    bool help = false;
    int first = 0;
    kv_err err;
    assert_int_equal(parse(table, &o, &help, &first, &err, args), KV_EUSAGE);
    printf("# %s\n", err.msg);
    assert_string_equal(err.msg, want);
}

static void messages(void **state)
{
    (void)state;
    expect_usage(TOY, (char *[]){"toy", "--chunk", "0", NULL},
                 "toy: --chunk = 0 is out of range [1, 1024] (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--chunk", "3x", NULL},
                 "toy: --chunk expects an integer, got '3x' (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--threads", "300", NULL},
                 "toy: --threads = 300 is out of range [1, 256] (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--seed", "-1", NULL},
                 "toy: --seed expects a non-negative integer, got '-1' (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--temperature", "nan", NULL},
                 "toy: --temperature expects a number in [0, 10], got 'nan' (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--mode", "half", NULL},
                 "toy: --mode must be colsum, full or none, got 'half' (see 'kvtrace toy --help')");
    expect_usage(TWO, (char *[]){"toy", "--device", "tpu", NULL},
                 "toy: --device must be cpu or cuda, got 'tpu' (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--dtype", "bf16", NULL},
                 "toy: --dtype must be f32 or f16, got 'bf16' (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--pair", "3", NULL}, "toy: --pair wants A,B, got '3'");
    expect_usage(TOY, (char *[]){"toy", "--nope", NULL},
                 "toy: unknown option '--nope' (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "-x", NULL}, "toy: unknown option '-x' (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--chunk", NULL},
                 "toy: option '--chunk' needs a value (see 'kvtrace toy --help')");
    expect_usage(TWO, (char *[]){"toy", "-o", "x", NULL}, /* no output row: no -o */
                 "toy: unknown option '-o' (see 'kvtrace toy --help')");
}

/* Numbers are a '-' and digits only: no '+', space, hex or exponent. */
static void strict_numbers(void **state)
{
    (void)state;
    static const char *const BAD[] = {"+8", " 8", "8 ", "0x8", "1e1", "", "-", "8.0"};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char *args[] = {"toy", "--chunk", (char *)BAD[i], NULL};
        char want[160];
        snprintf(want, sizeof want, "toy: --chunk expects an integer, got '%s' (see 'kvtrace toy --help')", BAD[i]);
        expect_usage(TOY, args, want);
        args[1] = "--seed";
        toy_opts o = {0};
        bool help = false;
        int first = 0;
        kv_err err;
        assert_int_equal(parse(TOY, &o, &help, &first, &err, args), KV_EUSAGE);
    }
    expect_usage(TOY, (char *[]){"toy", "--temperature", " 1", NULL},
                 "toy: --temperature expects a number in [0, 10], got ' 1' (see 'kvtrace toy --help')");
    expect_usage(TOY, (char *[]){"toy", "--temperature", "0x1p1", NULL},
                 "toy: --temperature expects a number in [0, 10], got '0x1p1' (see 'kvtrace toy --help')");
}

/* One list parser: empty items, spaces and repeats refused, both spellings named. */
static void lists(void **state)
{
    (void)state;
    int64_t v[8];
    int n = -1;
    kv_err err = {0};
    assert_int_equal(cli_parse_i64_list("toy", "--b", "16,32,008", 1, 100, v, 8, &n, &err), KV_OK);
    assert_int_equal(n, 3);
    assert_int_equal(v[2], 8);
    static const char *const BAD[] = {"16,,32", ",16", "16,", ",", "", "+16", " 16", "16, 32", "0x10", "1e3",
                                      "1,2,3,4,5,6,7,8,9", "0", "16\t"};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        kv_err e = {0};
        n = -1;
        assert_int_equal(cli_parse_i64_list("toy", "--b", BAD[i], 1, 100, v, 8, &n, &e), KV_EUSAGE);
        printf("# %s\n", e.msg);
        assert_int_equal(n, 0);
    }
    kv_err e = {0};
    assert_int_equal(cli_parse_i64_list("toy", "--b", "16,32,016", 1, 100, v, 8, &n, &e), KV_EUSAGE);
    assert_string_equal(e.msg, "toy: --b names the value twice: '16' and '016' are both 16 (see 'kvtrace toy --help')");
    cli_list l;
    kv_err e2 = {0};
    assert_int_equal(cli_list_split("toy", "--x", "a,b:c=1,a", 8, &l, &e2), KV_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.item[1], "b:c=1");
    assert_int_equal(cli_list_repeat("toy", "--x", &l, 0, 2, "the item", "a", &e2), KV_EUSAGE);
    assert_string_equal(e2.msg, "toy: --x names the item 'a' twice (see 'kvtrace toy --help')");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kind),
        cmocka_unit_test(help_and_defaults),
        cmocka_unit_test(messages),
        cmocka_unit_test(strict_numbers),
        cmocka_unit_test(lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
