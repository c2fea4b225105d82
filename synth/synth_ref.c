/* The full-cache reference of a synthetic head, as capture defines it
 * (docs/trace.md, /attention/out and /attention/lse): per query position i,
 * s_ij = q_i.k_j / sqrt(D) over the causal past j <= i, lse_i = log Σ_j
 * exp(s_ij), m_i = max_j s_ij, o_i = Σ_j exp(s_ij - lse_i) v_j. Everything in double (scores
 * and outputs by dgemm, exp and sums in double), rounded to float once at
 * the end; blocks of rows are independent items, so the values do not depend
 * on the thread count. */
#include "synth_ref.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "core/parallel.h"

typedef struct {
    const float *q, *k, *v; /* q [G][T][D]; k, v [T][D] */
    int64_t T, D, G, blocks;
    double *kd, *vd;        /* [T][D] in double */
    double *scratch;        /* [threads][SYNTH_REF_BLOCK * (T + 2 D)] */
    float *out, *lse, *mx;  /* [G][T][D], [G][T], [G][T] */
} ref_job;

/* Item: rows [i0, i0+n) of query head j. */
static void ref_block(void *ctx, int item, int thread)
{
    ref_job *c = ctx;
    const int64_t T = c->T, D = c->D, j = item / c->blocks, i0 = (item % c->blocks) * SYNTH_REF_BLOCK;
    const int64_t n = T - i0 < SYNTH_REF_BLOCK ? T - i0 : SYNTH_REF_BLOCK, cols = i0 + n;
    double *s = c->scratch + (size_t)thread * (size_t)(SYNTH_REF_BLOCK * (T + 2 * D)); /* [n][cols] */
    double *qd = s + SYNTH_REF_BLOCK * T, *od = qd + SYNTH_REF_BLOCK * D;          /* [n][D] each */
    const float *q = c->q + (j * T + i0) * D;
    for (int64_t x = 0; x < n * D; x++) qd[x] = q[x];
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)cols, (int)D, 1.0 / sqrt((double)D), qd,
                (int)D, c->kd, (int)D, 0.0, s, (int)cols);
    double sums[SYNTH_REF_BLOCK];
    for (int64_t r = 0; r < n; r++) {
        double *row = s + r * cols, mx = row[0], sum = 0.0;
        const int64_t vis = i0 + r + 1;
        for (int64_t t = 1; t < vis; t++) mx = row[t] > mx ? row[t] : mx;
        for (int64_t t = 0; t < vis; t++) sum += (row[t] = exp(row[t] - mx));
        for (int64_t t = vis; t < cols; t++) row[t] = 0.0;
        sums[r] = sum;
        c->lse[j * T + i0 + r] = (float)(mx + log(sum));
        c->mx[j * T + i0 + r] = (float)mx;
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)D, (int)cols, 1.0, s, (int)cols, c->vd,
                (int)D, 0.0, od, (int)D);
    float *out = c->out + (j * T + i0) * D;
    for (int64_t r = 0; r < n; r++)
        for (int64_t x = 0; x < D; x++) out[r * D + x] = (float)(od[r * D + x] / sums[r]);
}

int synth_ref_compute(const float *q, const float *k, const float *v, int64_t T, int64_t D, int64_t G, int threads,
                      float *out, float *lse, float *mx, kv_err *err)
{
    const int64_t blocks = (T + SYNTH_REF_BLOCK - 1) / SYNTH_REF_BLOCK;
    ref_job c = {q, k, v, T, D, G, blocks, NULL, NULL, NULL, out, lse, mx};
    size_t td = (size_t)(T * D);
    if (!(c.kd = kv_calloc(td, sizeof(double), "reference keys", err)) ||
        !(c.vd = kv_calloc(td, sizeof(double), "reference values", err)) ||
        !(c.scratch = kv_calloc((size_t)threads * (size_t)(SYNTH_REF_BLOCK * (T + 2 * D)), sizeof(double),
                                "reference scratch", err))) {
        free(c.kd), free(c.vd);
        return err->code;
    }
    for (size_t x = 0; x < td; x++) c.kd[x] = k[x], c.vd[x] = v[x];
    kv_parallel_for((int)(G * blocks), threads, ref_block, &c);
    free(c.kd), free(c.vd), free(c.scratch);
    return KV_OK;
}
