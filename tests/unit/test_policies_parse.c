/* The registry and "name:key=value" parsing (docs/policies.md; labels:
 * docs/outputs.md#conventions-of-every-csv): defaults filled,
 * canonical names sorted by key, and every bad spec a KV_EUSAGE error that
 * says what is valid. */
#include "testutil.h"

#include <math.h>
#include <ctype.h>

#include "policies/policy.h"

static void parses_to(const char *spec, const char *name, const char *canonical)
{
    policy_config cfg;
    kv_err err = {0};
    int rc = policy_parse(spec, &cfg, &err);
    if (rc) printf("# %s: %s\n", spec, err.msg);
    assert_int_equal(rc, KV_OK);
    assert_string_equal(cfg.iface->name, name);
    assert_int_equal(cfg.n, policy_n_params(cfg.iface));
    assert_string_equal(cfg.canonical, canonical);
    int pairs = 0;   /* the canonical name lists every parameter once: the count, independently */
    for (const char *ch = canonical; *ch; ch++) pairs += *ch == '=';
    assert_int_equal(cfg.n, pairs);
}

static void fails_with(const char *spec, const char *const *parts)
{
    policy_config cfg;
    kv_err err = {0};
    assert_int_equal(policy_parse(spec, &cfg, &err), KV_EUSAGE);
    assert_int_equal(err.code, KV_EUSAGE);
    printf("# '%s' -> %s\n", spec, err.msg);
    for (; *parts; parts++) {
        if (!strstr(err.msg, *parts)) printf("# missing '%s'\n", *parts);
        assert_non_null(strstr(err.msg, *parts));
    }
}

static void defaults_and_canonical_names(void **state)
{
    (void)state;
    parses_to("keydiff", "keydiff", "anchor=norm:metric=cos:window=0");
    parses_to("keydiff:window=0.2:anchor=raw", "keydiff", "anchor=raw:metric=cos:window=0.2");
    parses_to("keydiff:metric=l2:anchor=pairwise:window=1", "keydiff", "anchor=pairwise:metric=l2:window=1");
    parses_to("keydiff:window=2e-1", "keydiff", "anchor=norm:metric=cos:window=0.2");
    parses_to("keydiff:window=-0", "keydiff", "anchor=norm:metric=cos:window=0");
    /* %g unless that would merge two configs */
    parses_to("keydiff:window=0.123456789", "keydiff", "anchor=norm:metric=cos:window=0.123456789");
    parses_to("full", "full", "");
    parses_to("knorm", "knorm", "");
    parses_to("streaming", "streaming", "sinks=4");
    parses_to("streaming:sinks=016", "streaming", "sinks=16");
    parses_to("random", "random", "seed=0");
    parses_to("random:seed=12345678", "random", "seed=12345678");
    parses_to("primekv", "primekv", "key=anchor:value=dev");
    parses_to("primekv:value=proj:key=nn", "primekv", "key=nn:value=proj");
    parses_to("cur", "cur", "leverage=kv_product:sinks=4:window=16");
    parses_to("lagkv", "lagkv", "lag=128:scoring=rank:sinks=4");
    parses_to("qfilter", "qfilter", "calib=stream");
    parses_to("expected_attention", "expected_attention", "epsilon=0.01:n_future=512:sinks=4");
    /* presets expand to their values, the spec's own keys winning (docs/policies.md#snapkv-presets-and-pool); new defaults filled */
    parses_to("snapkv", "snapkv", "kernel=5:pool=avg:window=32");
    parses_to("snapkv:preset=paper", "snapkv", "kernel=7:pool=max:window=32");
    parses_to("snapkv:preset=kvpress", "snapkv", "kernel=5:pool=avg:window=64");
    parses_to("snapkv:window=8:preset=paper", "snapkv", "kernel=7:pool=max:window=8");
    parses_to("snapkv:preset=kvpress:pool=max", "snapkv", "kernel=5:pool=max:window=64");
    parses_to("h2o", "h2o", "normalize=none:recent=0.5");
    parses_to("h2o:normalize=age", "h2o", "normalize=age:recent=0.5");
    parses_to("scissorhands", "scissorhands", "decay=1:history=0:recent=32:sinks=0");
}

static void values_reach_the_policy(void **state)
{
    (void)state;
    policy_config cfg;
    kv_err err = {0};
    assert_int_equal(policy_parse("keydiff:window=0.25:metric=l2", &cfg, &err), KV_OK);
    assert_true(policy_num(&cfg, "window") == 0.25);
    assert_int_equal(policy_choice(&cfg, "metric"), 2);
    assert_int_equal(policy_choice(&cfg, "anchor"), 0);
    assert_int_equal(policy_parse("streaming:sinks=0", &cfg, &err), KV_OK);
    assert_true(policy_num(&cfg, "sinks") == 0);
}

static void bad_specs_say_what_is_valid(void **state)
{
    (void)state;
    fails_with("foo", (const char *[]){"unknown policy 'foo'",
                                       "(known: full, keydiff, knorm, streaming, random, primekv, h2o, tova, snapkv, oracle, expected_attention, lagkv, cur, qfilter, capkv, chunkkv, scissorhands, kvzip, compactor, criticalkv)", NULL});
    fails_with("", (const char *[]){"empty policy name", "keydiff", NULL});
    fails_with(":window=1", (const char *[]){"empty policy name", NULL});
    fails_with("snapkv:preset=nope", (const char *[]){"snapkv: unknown preset 'nope' (known: paper, kvpress)", NULL});
    fails_with("knorm:preset=paper", (const char *[]){"knorm: has no presets", NULL});
    fails_with("snapkv:preset=paper:preset=paper", (const char *[]){"snapkv: parameter 'preset' given twice", NULL});
    fails_with("snapkv:preset=paper:window=4:window=5", (const char *[]){"parameter 'window' given twice", NULL});
    fails_with("KeyDiff", (const char *[]){"unknown policy 'KeyDiff'", NULL});
    fails_with("keydiff:windw=0.2", (const char *[]){"keydiff: unknown parameter 'windw' (known: anchor, metric, window)", NULL});
    fails_with("keydiff:window=2", (const char *[]){"keydiff: window=2 is out of range [0, 1]", NULL});
    fails_with("keydiff:window=-0.1", (const char *[]){"window=-0.1 is out of range [0, 1]", NULL});
    fails_with("keydiff:anchor=xyz", (const char *[]){"keydiff: anchor=xyz is not one of norm|raw|pairwise", NULL});
    fails_with("keydiff:metric=", (const char *[]){"metric= is not one of cos|dot|l2", NULL});
    fails_with("keydiff:window=0.1:window=0.2", (const char *[]){"keydiff: parameter 'window' given twice", NULL});
    fails_with("keydiff:anchor=raw:anchor=raw", (const char *[]){"'anchor' given twice", NULL});
    fails_with("keydiff:window=abc", (const char *[]){"window=abc is not a number", "[0, 1]", NULL});
    fails_with("keydiff:window=", (const char *[]){"window= is not a number", NULL});
    fails_with("keydiff:window= 0.5", (const char *[]){"is not a number", NULL});
    fails_with("keydiff:window=nan", (const char *[]){"window=nan is not a number", NULL});
    fails_with("keydiff:window=0.5x", (const char *[]){"window=0.5x is not a number", NULL});
    fails_with("keydiff:window", (const char *[]){"keydiff: parameter 'window' is not key=value", "anchor, metric, window", NULL});
    fails_with("keydiff::window=0.2", (const char *[]){"keydiff: empty parameter", NULL});
    fails_with("keydiff:", (const char *[]){"keydiff: empty parameter", NULL});
    fails_with("streaming:sinks=2.5", (const char *[]){"streaming: sinks=2.5 is not an integer", NULL});
    /* one number grammar (core/cli_args.h): an integer parameter is written as an integer, no hex */
    fails_with("streaming:sinks=16.0", (const char *[]){"streaming: sinks=16.0 is not an integer", NULL});
    fails_with("streaming:sinks=1e1", (const char *[]){"streaming: sinks=1e1 is not an integer", NULL});
    fails_with("streaming:sinks=0x10", (const char *[]){"streaming: sinks=0x10 is not a number", NULL});
    fails_with("streaming:sinks=-1", (const char *[]){"streaming: sinks=-1 is out of range [0, ", NULL});
    fails_with("random:seed=1.5", (const char *[]){"random: seed=1.5 is not an integer", NULL});
    fails_with("knorm:x=1", (const char *[]){"knorm: unknown parameter 'x' (knorm takes no parameters)", NULL});
    fails_with("primekv:key=far", (const char *[]){"primekv: key=far is not one of anchor|nn", NULL});
    fails_with("primekv:value=norm", (const char *[]){"primekv: value=norm is not one of dev|proj", NULL});
}

/* What every policy file must declare: the parser and `kvtrace policies`
 * rely on it, so a new policy is checked here without a new test. */
static void registry_is_well_formed(void **state)
{
    (void)state;
    int count = 0;
    for (const policy_iface *const *p = policy_all(); *p; p++, count++) {
        const policy_iface *pi = *p;
        assert_non_null(pi->score);
        assert_true(pi->summary && pi->summary[0]);
        const int n_params = policy_n_params(pi);   /* counted: the entries up to the first without a key */
        assert_true(n_params >= 0 && n_params <= POLICY_MAX_PARAMS);
        for (int i = n_params; i < POLICY_MAX_PARAMS; i++) assert_null(pi->params[i].key);   /* no gap */
        assert_ptr_equal(policy_find(pi->name), pi);
        assert_true((pi->create == NULL) == (pi->destroy == NULL));
        for (int i = 0; i < n_params; i++) {
            const policy_param *q = &pi->params[i];
            assert_true(q->key && q->def && q->doc && q->doc[0]);
            if (i) assert_true(strcmp(pi->params[i - 1].key, q->key) < 0);   /* sorted by key */
            if (q->kind == PARAM_CHOICE) assert_non_null(q->choices);
            else assert_true(q->min <= q->max);
        }
        policy_config cfg;
        kv_err err = {0};
        assert_int_equal(policy_parse(pi->name, &cfg, &err), KV_OK);   /* defaults are valid */
        char again[300];   /* the canonical string parses back to itself */
        snprintf(again, sizeof again, "%s%s%s", pi->name, cfg.canonical[0] ? ":" : "", cfg.canonical);
        policy_config cfg2;
        assert_int_equal(policy_parse(again, &cfg2, &err), KV_OK);
        assert_string_equal(cfg2.canonical, cfg.canonical);
    }
    assert_true(count >= 6);
    assert_null(policy_find("nope"));
    char summary[256];   /* docs must label primekv a reconstruction (docs/policies.md) */
    snprintf(summary, sizeof summary, "%s", policy_find("primekv")->summary);
    for (char *c = summary; *c; c++) *c = (char)tolower((unsigned char)*c);
    assert_non_null(strstr(summary, "reconstruct"));
}

/* Lists: split strictly, and one configuration spelled twice is refused naming both spellings. */
static void lists_refuse_repeats(void **state)
{
    (void)state;
    policy_config cfg[8];
    int n = -1;
    kv_err err = {0};
    assert_int_equal(policy_parse_list("sim", "tova,keydiff:window=0.2,keydiff", cfg, 8, &n, &err), KV_OK);
    assert_int_equal(n, 3);
    static const char *const BAD[] = {",keydiff", "keydiff,", "keydiff,,tova", " keydiff", "keydiff:", "",
                                      "keydiff::window=0", "keydiff:window="};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        kv_err e = {0};
        assert_int_equal(policy_parse_list("sim", BAD[i], cfg, 8, &n, &e), KV_EUSAGE);
        printf("# %s\n", e.msg);
    }
    kv_err e = {0};
    assert_int_equal(policy_parse_list("sim", "tova,keydiff,keydiff:window=0", cfg, 8, &n, &e), KV_EUSAGE);
    printf("# %s\n", e.msg);
    assert_non_null(strstr(e.msg, "'keydiff' and 'keydiff:window=0' are both keydiff:anchor=norm:"));
    kv_err e2 = {0};
    assert_int_equal(policy_parse_list("sim", "knorm,knorm", cfg, 8, &n, &e2), KV_EUSAGE);
    assert_non_null(strstr(e2.msg, "names the same configuration 'knorm' twice"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_and_canonical_names),
        cmocka_unit_test(values_reach_the_policy),
        cmocka_unit_test(bad_specs_say_what_is_valid),
        cmocka_unit_test(registry_is_well_formed),
        cmocka_unit_test(lists_refuse_repeats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
