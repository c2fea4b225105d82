#include "sim/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn_causal.h"
#include "core/finite.h"
#include "core/kv_error.h"
#include "core/parallel.h"

typedef struct {
    sim_reference *r;
    const float *q, *k, *v;
    int64_t block;         /* query positions per step */
    float *scratch;        /* [threads][G*block*T weights + 2*G*block*D rows] */
    size_t per_thread;
    double *lse;           /* [threads][G*block] */
} ref_ctx;

/* Work item: one kv head and its G query heads, their rows stacked so that
 * one pair of sgemms per block of positions serves the whole group. */
static void reference_group(void *ctx_, int g, int thread)
{
    ref_ctx *c = ctx_;
    sim_reference *r = c->r;
    const int64_t T = r->T, D = r->D, G = r->H / r->K;
    const float *kg = c->k + g * T * D, *vg = c->v + g * T * D;
    float *p = c->scratch + (size_t)thread * c->per_thread;  /* [G*block][T] */
    float *qs = p + (size_t)(G * c->block * T);               /* [G*block][D] */
    float *os = qs + (size_t)(G * c->block * D);              /* [G*block][D] */
    double *lse = c->lse + (size_t)thread * (size_t)(G * c->block);
    for (int64_t i0 = 0; i0 < T; i0 += c->block) {
        const int64_t n = T - i0 < c->block ? T - i0 : c->block;
        for (int64_t j = 0; j < G; j++)
            memcpy(qs + j * n * D, c->q + ((g * G + j) * T + i0) * D, sizeof(float) * (size_t)(n * D));
        attn_causal_group_rows(qs, G, kg, vg, i0, n, D, p, os, lse, NULL);
        for (int64_t j = 0; j < G; j++) {
            const int64_t h = g * G + j;
            memcpy(r->out + (h * T + i0) * D, os + j * n * D, sizeof(float) * (size_t)(n * D));
            memcpy(r->lse + h * T + i0, lse + j * n, sizeof(double) * (size_t)n);
        }
    }
}

int sim_reference_compute(sim_reference *r, const float *q, const float *k, const float *v, int64_t T,
                          int64_t D, int64_t H, int64_t K, int threads)
{
    r->T = T, r->D = D, r->H = H, r->K = K;
    const int64_t G = H / K;
    int64_t block = SIM_REF_ROWS / G; /* about SIM_REF_ROWS stacked rows per sgemm */
    block = block > SIM_REF_BLOCK ? SIM_REF_BLOCK : block < 1 ? 1 : block;
    const size_t per_thread = (size_t)(G * block) * (size_t)(T + 2 * D);
    r->out = malloc(sizeof(float) * (size_t)(H * T * D));
    r->lse = malloc(sizeof(double) * (size_t)(H * T));
    float *scratch = malloc(sizeof(float) * (size_t)threads * per_thread);
    double *lse = malloc(sizeof(double) * (size_t)threads * (size_t)(G * block));
    int rc = 0;
    if (r->out && r->lse && scratch && lse) {
        ref_ctx c = {r, q, k, v, block, scratch, per_thread, lse};
        kv_parallel_for((int)K, threads, reference_group, &c); /* groups are independent: same values for any count */
    } else {
        rc = -1;
    }
    free(scratch), free(lse);
    return rc;
}

int sim_reference_nonfinite(const sim_reference *r, int64_t *head, int64_t *pos)
{
    const int64_t T = r->T, D = r->D;
    for (int64_t h = 0; h < r->H; h++) {
        int64_t i = kv_first_nonfinite(r->out + h * T * D, T * D), at = i < 0 ? -1 : i / D;
        for (int64_t t = 0; t < T && (at < 0 || t < at); t++)
            if (!isfinite(r->lse[h * T + t])) at = t;
        if (at >= 0) {
            *head = h, *pos = at;
            return 1;
        }
    }
    return 0;
}

bool sim_reference_recorded(const trace *tr)
{
    const char *env = getenv(SIM_REFERENCE_ENV);
    if (env && strcmp(env, "recompute") == 0) return false;
    return trace_has(tr, TRACE_ATTN_OUT) && trace_has(tr, TRACE_ATTN_LSE);
}

int sim_reference_read(sim_reference *r, trace *tr, int64_t l, kv_err *err)
{
    const trace_meta *m = trace_get_meta(tr);
    const int64_t T = m->n_tokens, D = m->head_dim, H = m->n_heads;
    r->T = T, r->D = D, r->H = H, r->K = m->n_kv_heads;
    float *row = kv_calloc((size_t)T, sizeof(float), "log-sum-exps", err);
    if (!row || !(r->out = kv_calloc((size_t)(H * T * D), sizeof(float), "full-cache reference", err)) ||
        !(r->lse = kv_calloc((size_t)(H * T), sizeof(double), "full-cache reference", err))) {
        free(row);
        return err->code;
    }
    int rc = KV_OK;
    for (int64_t h = 0; !rc && h < H; h++) {
        rc = trace_read_head(tr, TRACE_ATTN_OUT, l, h, r->out + h * T * D, err);
        if (!rc) rc = trace_read_head(tr, TRACE_ATTN_LSE, l, h, row, err);
        for (int64_t t = 0; !rc && t < T; t++) r->lse[h * T + t] = row[t];
    }
    free(row);
    return rc;
}

void sim_reference_free(sim_reference *r)
{
    free(r->out), free(r->lse);
    r->out = NULL, r->lse = NULL;
}
