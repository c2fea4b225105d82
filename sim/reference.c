#include "sim/reference.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "core/parallel.h"
#include "core/attn_causal.h"

typedef struct {
    sim_reference *r;
    const float *q, *k, *v;
    float *scratch;        /* [threads][SIM_REF_BLOCK * T] */
} ref_ctx;

/* Work item: one query head (its own rows of out and lse). */
static void reference_head(void *ctx_, int h, int thread)
{
    ref_ctx *c = ctx_;
    sim_reference *r = c->r;
    const int64_t T = r->T, D = r->D, g = h / (r->H / r->K);
    const float *qh = c->q + h * T * D, *kg = c->k + g * T * D, *vg = c->v + g * T * D;
    float *scratch = c->scratch + (size_t)thread * SIM_REF_BLOCK * (size_t)T;
    for (int64_t i0 = 0; i0 < T; i0 += SIM_REF_BLOCK) {
        const int64_t n = T - i0 < SIM_REF_BLOCK ? T - i0 : SIM_REF_BLOCK;
        attn_causal_rows(qh + i0 * D, D, kg, vg, i0, n, D, scratch, r->out + (h * T + i0) * D, D, r->lse + h * T + i0);
    }
}

int sim_reference_compute(sim_reference *r, const float *q, const float *k, const float *v, int64_t T,
                          int64_t D, int64_t H, int64_t K, int threads)
{
    r->T = T, r->D = D, r->H = H, r->K = K;
    r->out = malloc(sizeof(float) * (size_t)(H * T * D));
    r->lse = malloc(sizeof(double) * (size_t)(H * T));
    float *scratch = malloc(sizeof(float) * (size_t)threads * SIM_REF_BLOCK * (size_t)T);
    if (!r->out || !r->lse || !scratch) {
        free(scratch);
        return -1;
    }
    ref_ctx c = {r, q, k, v, scratch};
    kv_parallel_for((int)H, threads, reference_head, &c); /* heads are independent: same values for any count */
    free(scratch);
    return 0;
}

void sim_reference_free(sim_reference *r)
{
    free(r->out), free(r->lse);
    r->out = NULL, r->lse = NULL;
}
