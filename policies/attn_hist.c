/* attn_hist: accumulated attention by position (attn_hist.h). */
#include "policies/attn_hist.h"

#include <stdlib.h>
#include <string.h>

/* Room for n sums in all four arrays. On failure every array stays valid
 * (realloc keeps what it could not grow) and cap unchanged. */
static int ensure(attn_hist *s, int64_t n, const char *owner, kv_err *err)
{
    if (n <= s->cap) return KV_OK;
    int64_t cap = s->cap ? s->cap : 256;
    while (cap < n) cap *= 2;
    int64_t *p = realloc(s->pos, sizeof(int64_t) * (size_t)cap);
    if (p) s->pos = p;
    int64_t *np = p ? realloc(s->npos, sizeof(int64_t) * (size_t)cap) : NULL;
    if (np) s->npos = np;
    double *a = np ? realloc(s->acc, sizeof(double) * (size_t)cap) : NULL;
    if (a) s->acc = a;
    double *na = a ? realloc(s->nacc, sizeof(double) * (size_t)cap) : NULL;
    if (!na)
        return kv_fail(err, KV_EFAIL, "%s: out of memory for the attention sums of %lld candidates", owner,
                       (long long)n);
    s->nacc = na;
    s->cap = cap;
    return KV_OK;
}

void attn_hist_lookup(const attn_hist *s, const policy_view *v, double *out)
{
    for (int64_t c = 0, i = 0; c < v->n; c++) {   /* both lists ascend */
        while (i < s->n && s->pos[i] < v->pos[c]) i++;
        out[c] = i < s->n && s->pos[i] == v->pos[c] ? s->acc[i] : 0.0;
    }
}

int attn_hist_update(attn_hist *s, const policy_view *v, int64_t first_row, double decay, const char *owner,
                     kv_err *err)
{
    if (!v->attn || v->n == 0) return KV_OK;
    int rc = ensure(s, v->n, owner, err);
    if (rc) return rc;
    attn_hist_lookup(s, v, s->nacc);
    memcpy(s->npos, v->pos, sizeof(int64_t) * (size_t)v->n);
    if (decay != 1.0)
        for (int64_t c = 0; c < v->n; c++) s->nacc[c] *= decay;
    for (int64_t r = first_row > 0 ? first_row : 0; r < v->n_queries; r++) {
        const float *row = v->attn + r * v->n;
        for (int64_t c = 0; c < v->n; c++) s->nacc[c] += (double)row[c];
    }
    int64_t *tp = s->pos;
    double *ta = s->acc;
    s->pos = s->npos, s->acc = s->nacc, s->npos = tp, s->nacc = ta, s->n = v->n;
    return KV_OK;
}

void attn_hist_free(attn_hist *s)
{
    if (s) free(s->pos), free(s->npos), free(s->acc), free(s->nacc);
}

int attn_hist_create(const policy_config *cfg, void **state, kv_err *err)
{
    attn_hist *s = kv_calloc(1, sizeof *s, "attention history", err);
    if (!s) return err->code;
    (void)cfg;
    *state = s;
    return KV_OK;
}

void attn_hist_destroy(void *state)
{
    attn_hist_free(state);
    free(state);
}
