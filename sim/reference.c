#include "sim/reference.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "core/parallel.h"
#include "core/softmax.h"

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
    const float scale = (float)(1.0 / sqrt((double)D));
    for (int64_t i0 = 0; i0 < T; i0 += SIM_REF_BLOCK) {
        const int64_t n = T - i0 < SIM_REF_BLOCK ? T - i0 : SIM_REF_BLOCK, cols = i0 + n;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)cols, (int)D, scale, qh + i0 * D,
                    (int)D, kg, (int)D, 0.0f, scratch, (int)cols);
        for (int64_t i = 0; i < n; i++) {
            float *row = scratch + i * cols;
            const int64_t len = i0 + i + 1;
            float mx = softmax_row_max(row, len);
            double sum = softmax_row_exp(row, len, mx);
            r->lse[h * T + i0 + i] = (double)mx + log(sum);
            float inv = (float)(1.0 / sum);
            for (int64_t j = 0; j < len; j++) row[j] *= inv;
            for (int64_t j = len; j < cols; j++) row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)D, (int)cols, 1.0f, scratch, (int)cols,
                    vg, (int)D, 0.0f, r->out + (h * T + i0) * D, (int)D);
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
