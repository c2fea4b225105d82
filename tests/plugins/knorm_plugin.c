/* plugknorm: the built-in knorm (s = -|k|) restated as a plug-in, for
 * tests/scripts/test_plugin.py: the same kept sets as knorm. |k|^2 is summed
 * in double in the built-in's order (policies/vecmath.c: 16 lanes combined in
 * a fixed tree, then the tail), so the scores are the same doubles. */
#include <math.h>

#include <kvtrace/policy.h>

static double norm16(const float *x, int64_t D)
{
    double a[16] = {0};
    int64_t d = 0;
    for (; d + 16 <= D; d += 16)
        for (int l = 0; l < 16; l++) a[l] += (double)x[d + l] * x[d + l];
    double s8[8];
    for (int l = 0; l < 8; l++) s8[l] = a[l] + a[l + 8];
    double s = ((s8[0] + s8[4]) + (s8[2] + s8[6])) + ((s8[1] + s8[5]) + (s8[3] + s8[7]));
    for (; d < D; d++) s += (double)x[d] * x[d];
    return sqrt(s);
}

static int plugknorm_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)cfg;
    (void)state;
    (void)err;
    for (int64_t j = 0; j < v->n; j++) scores[j] = -norm16(v->keys + j * v->D, v->D);
    return KV_OK;
}

static const policy_iface plugknorm = {
    .name = "plugknorm",
    .summary = "knorm restated as a plug-in (test)",
    .score = plugknorm_score,
};

KVTRACE_PLUGIN(&plugknorm)
