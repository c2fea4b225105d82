/* Plug-ins whose hooks fail or whose tables are malformed, one per macro (tests/scripts/test_hostile_plugins.py):
 * each loads (or is refused at load) and kvtrace must answer with one line and exit 1 (a failed hook) or 2 (a
 * malformed table), never success, a crash, or the plug-in's own number as the exit status.
 *   GOOD          none of the below: a policy that loads and runs (the path tests)
 *   FAIL_CREATE   create returns 42, a two-line message, err->code left 0
 *   FAIL_OBSERVE  observe returns -1, err->msg filled to its end with no terminating byte, err->code left 0
 *   FAIL_SCORE    score returns 139 at the first evicting step, no message
 *   HUGE_QWIN     query_window INT64_MAX (an in-model run keeps at most T queries)
 *   NEG_QWIN      query_window -5
 *   NULL_DEF      a parameter without a default        NULL_CHOICES  a choice parameter without choices
 *   BAD_KEY       a parameter key "a=b:c"              DUP_KEYS      two parameters with the key "a"
 *   NAN_RANGE     a number parameter with the range [NaN, 1]  EMPTY_CHOICES  choices ""
 *   UNSORTED      the keys "b" then "a"                BAD_PRESET    a preset setting a key the policy lacks
 *   NULL_PRESET   a preset without values              DUP_PRESET    two presets named "p" */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <kvtrace/policy.h>

static int hook_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)cfg, (void)state, (void)err;
#ifdef FAIL_SCORE
    return 139;
#endif
    for (int64_t j = 0; j < v->n; j++) scores[j] = (double)v->pos[j];
    return KV_OK;
}

#ifdef FAIL_CREATE
static int hook_create(const policy_config *cfg, void **state, kv_err *err)
{
    (void)cfg, (void)state;
    snprintf(err->msg, sizeof err->msg, "first line\nsecond line");
    return 42;
}
#endif

#ifdef FAIL_OBSERVE
static int hook_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)cfg, (void)state, (void)v;
    memset(err->msg, 'x', sizeof err->msg);   /* no terminating byte */
    return -1;
}
#endif

#if defined(HUGE_QWIN) || defined(NEG_QWIN)
static int64_t hook_qwin(const policy_config *cfg)
{
    (void)cfg;
#ifdef HUGE_QWIN
    return INT64_MAX;
#else
    return -5;
#endif
}
#endif

static const policy_iface hook = {
    .name = "hookpol",
    .score = hook_score,
#ifdef FAIL_CREATE
    .create = hook_create,
#endif
#ifdef FAIL_OBSERVE
    .observe = hook_observe,
#endif
#if defined(HUGE_QWIN) || defined(NEG_QWIN)
    .query_window = hook_qwin,
#endif
#if defined(NULL_DEF)
    .params = {{.key = "a", .kind = PARAM_NUMBER, .def = NULL, .min = 0, .max = 1, .doc = "x"}},
#elif defined(NULL_CHOICES)
    .params = {{.key = "c", .kind = PARAM_CHOICE, .def = "x", .choices = NULL, .doc = "x"}},
#elif defined(EMPTY_CHOICES)
    .params = {{.key = "c", .kind = PARAM_CHOICE, .def = "", .choices = "", .doc = "x"}},
#elif defined(BAD_KEY)
    .params = {{.key = "a=b:c", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1, .doc = "x"}},
#elif defined(DUP_KEYS)
    .params = {{.key = "a", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1, .doc = "x"},
               {.key = "a", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1, .doc = "x"}},
#elif defined(NAN_RANGE)
    .params = {{.key = "a", .kind = PARAM_NUMBER, .def = "0", .min = NAN, .max = 1, .doc = "x"}},
#elif defined(UNSORTED)
    .params = {{.key = "b", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1, .doc = "x"},
               {.key = "a", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1, .doc = "x"}},
#elif defined(BAD_PRESET) || defined(NULL_PRESET) || defined(DUP_PRESET)
    .params = {{.key = "a", .kind = PARAM_NUMBER, .def = "0", .min = 0, .max = 1, .doc = "x"}},
#if defined(BAD_PRESET)
    .presets = {{.name = "p", .params = "nosuch=1", .doc = "x"}},
#elif defined(NULL_PRESET)
    .presets = {{.name = "p", .params = NULL, .doc = "x"}},
#else
    .presets = {{.name = "p", .params = "a=1", .doc = "x"}, {.name = "p", .params = "a=0", .doc = "x"}},
#endif
#endif
};

KVTRACE_PLUGIN(&hook)
