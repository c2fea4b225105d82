/* A policy with a share (tests/scripts/test_plugin.py): "shareprobe" keeps the newest candidates
 * (score = position) and checks what sim promises a policy that declares share_create: every
 * budget of a stream gets the same share, in lock step (no step after a later one). With
 * SHAREPROBE_REQUIRE set in the environment a replay without a share fails its score. */
#include <stdio.h>
#include <stdlib.h>

#include <kvtrace/policy.h>

typedef struct {
    int64_t step, calls;
} probe_share;

static int probe_share_create(const policy_config *cfg, void **share, kv_err *err)
{
    (void)cfg;
    (void)err;
    probe_share *s = calloc(1, sizeof *s);
    *share = s;
    return s ? KV_OK : KV_EFAIL;
}

static void probe_share_destroy(void *share)
{
    free(share);
}

static int probe_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)cfg;
    (void)state;
    probe_share *s = v->share;
    if (!s && getenv("SHAREPROBE_REQUIRE")) {
        err->code = KV_EFAIL;
        snprintf(err->msg, sizeof err->msg, "no share at step %lld", (long long)v->step);
        return KV_EFAIL;
    }
    if (s && v->step < s->step) {
        err->code = KV_EFAIL;
        snprintf(err->msg, sizeof err->msg, "step %lld after step %lld: not in lock step", (long long)v->step,
                 (long long)s->step);
        return KV_EFAIL;
    }
    if (s) s->step = v->step, s->calls++;
    for (int64_t j = 0; j < v->n; j++) scores[j] = (double)v->pos[j];
    return KV_OK;
}

static const policy_iface probe = {
    .name = "shareprobe",
    .summary = "keeps the newest; checks its share's lock step",
    .score = probe_score,
    .share_create = probe_share_create,
    .share_destroy = probe_share_destroy,
};

KVTRACE_PLUGIN(&probe)
