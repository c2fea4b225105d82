/* attn_window: the window sums and the pool of snapkv (attn_window.h). */
#include "policies/attn_window.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "core/softmax.h"

int attn_window_sums(const policy_view *v, int64_t window, double *sum, int64_t *first, const char *owner,
                     kv_err *err)
{
    const int64_t n = v->n, D = v->D;
    const int64_t i0 = v->now - window + 1 > 0 ? v->now - window + 1 : 0, W = v->now - i0 + 1;
    *first = i0;
    for (int64_t c = 0; c < n; c++) sum[c] = 0.0;
    if (!v->queries || n == 0) return KV_OK;
    float *s = kv_calloc((size_t)(W * n), sizeof(float), owner, err);
    if (!s) return err->code;
    for (int64_t j = 0; j < v->q_heads; j++) {
        /* the window's scores against every candidate in one product: s[W][n] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)W, (int)n, (int)D, (float)(1.0 / sqrt((double)D)),
                    v->queries + (j * v->T + i0 - v->q0) * D, (int)D, v->keys, (int)D, 0.0f, s, (int)n);
        for (int64_t r = 0, vis = 0; r < W; r++) {
            float *row = s + r * n;
            while (vis < n && v->pos[vis] <= i0 + r) vis++; /* candidates ascending: visible = a prefix */
            if (vis == 0) continue;                        /* this query sees no candidate */
            /* the weights in float, their sum in double (docs/sim.md#the-eviction-step-step-by-step) */
            double z = softmax_row_exp(row, vis, softmax_row_max(row, vis));
            softmax_accumulate(sum, row, 1.0 / (z * (double)v->q_heads), vis);
        }
    }
    free(s);
    return KV_OK;
}

void attn_window_pool(const double *sum, int64_t n, int64_t kernel, bool max, double *out)
{
    const int64_t left = kernel / 2;
    for (int64_t c = 0; c < n; c++) {
        double pooled = 0.0;
        for (int64_t o = -left; o < kernel - left; o++)
            if (c + o >= 0 && c + o < n) pooled = max ? fmax(pooled, sum[c + o]) : pooled + sum[c + o];
        out[c] = max ? pooled : pooled / (double)kernel;
    }
}
