/* trace_compare REF.h5 GOT.h5 [REL]: whole-capture parity of two traces of
 * the same run (CPU and GPU): equal shapes and tokens, and keys, values,
 * queries and column sums elementwise within REL·(|ref| + rms) where rms is
 * the root mean square of that (layer, head) slice of the reference (so
 * values near zero are judged on the slice's scale). TAP output; exit 1 on
 * any failure. Default REL 1e-3 (float32 weights; docs/cuda.md gives bf16's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

static int n_test, n_failed;

static void result(int ok, const char *name)
{
    n_test++;
    if (!ok) n_failed++;
    printf("%sok %d - %s\n", ok ? "" : "not ", n_test, name);
}

/* Worst relative excess over every (layer, head) of dataset d. */
static int compare_dset(trace *a, trace *b, trace_dset d, double rel, kv_err *err)
{
    const trace_meta *m = trace_get_meta(a);
    const int64_t T = m->n_tokens, heads = d == TRACE_KEYS || d == TRACE_VALUES ? m->n_kv_heads : m->n_heads;
    const int64_t width = d == TRACE_COLSUM ? 1 : m->head_dim, n = T * width;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    if (!x || !y) return free(x), free(y), kv_fail(err, KV_EFAIL, "out of memory");
    double worst = 0.0, worst_diff = 0.0;
    int64_t bad = 0, wl = 0, wh = 0, wi = 0;
    for (int64_t l = 0; l < m->n_layers; l++)
        for (int64_t h = 0; h < heads; h++) {
            if (trace_read_head(a, d, l, h, x, err) || trace_read_head(b, d, l, h, y, err)) goto out;
            double ss = 0.0;
            for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
            const double rms = sqrt(ss / (double)n);
            for (int64_t i = 0; i < n; i++) {
                double diff = fabs((double)x[i] - y[i]), r = diff / (fabs(x[i]) + rms + 1e-30);
                if (r > rel) bad++;
                if (r > worst) worst = r, worst_diff = diff, wl = l, wh = h, wi = i;
            }
        }
    printf("# %s: worst |diff| / (|ref| + rms) = %.3g (|diff| %.3g at layer %lld head %lld element %lld), %lld "
           "outside %.1g\n", trace_dset_path(d), worst, worst_diff, (long long)wl, (long long)wh, (long long)wi,
           (long long)bad, rel);
out:
    free(x), free(y);
    if (err->code) return err->code;
    char name[128];
    snprintf(name, sizeof name, "%s within %.1g", trace_dset_path(d), rel);
    result(bad == 0, name);
    return KV_OK;
}

static int same_run(trace *a, trace *b, kv_err *err)
{
    const trace_meta *ma = trace_get_meta(a), *mb = trace_get_meta(b);
    int ok = ma->n_layers == mb->n_layers && ma->n_heads == mb->n_heads && ma->n_kv_heads == mb->n_kv_heads &&
             ma->head_dim == mb->head_dim && ma->n_tokens == mb->n_tokens;
    result(ok, "same shapes");
    if (!ok) return KV_EFAIL;
    int32_t *ta = malloc(sizeof(int32_t) * (size_t)ma->n_tokens), *tb = malloc(sizeof(int32_t) * (size_t)ma->n_tokens);
    int rc = !ta || !tb ? kv_fail(err, KV_EFAIL, "out of memory") : trace_read_tokens(a, ta, err);
    if (!rc) rc = trace_read_tokens(b, tb, err);
    int64_t first = -1;
    for (int64_t t = 0; !rc && t < ma->n_tokens && first < 0; t++)
        if (ta[t] != tb[t]) first = t;
    if (!rc && first >= 0)
        printf("# tokens differ first at position %lld: %d vs %d\n", (long long)first, ta[first], tb[first]);
    if (!rc) result(first < 0, "same tokens (generated ones included)");
    free(ta), free(tb);
    return rc ? rc : first < 0 ? KV_OK : KV_EFAIL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: trace_compare REF.h5 GOT.h5 [REL]\n");
        return 2;
    }
    const double rel = argc > 3 ? atof(argv[3]) : 1e-3;
    kv_err err = {0};
    trace *a = NULL, *b = NULL;
    int rc = trace_open(argv[1], &a, &err);
    if (!rc) rc = trace_open(argv[2], &b, &err);
    if (!rc) rc = same_run(a, b, &err);
    const trace_dset ds[] = {TRACE_KEYS, TRACE_VALUES, TRACE_QUERIES, TRACE_COLSUM};
    for (size_t i = 0; !rc && i < sizeof ds / sizeof ds[0]; i++)
        if (trace_has(a, ds[i]) && trace_has(b, ds[i])) rc = compare_dset(a, b, ds[i], rel, &err);
    if (err.code) {
        printf("not ok %d - %s\n", ++n_test, err.msg);
        n_failed++;
    }
    printf("1..%d\n", n_test);
    if (a) trace_close(a);
    if (b) trace_close(b);
    return n_failed ? 1 : 0;
}
