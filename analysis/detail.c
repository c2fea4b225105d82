/* detail: figure 1's matrices for one (layer, query head)
 * (docs/analyze.md#detailcsv--rowcolcosattn): the
 * cosine of the first n = min(64, T) keys of its kv head with each other, and
 * the causal attention of its first n queries, softmax(q_i·k_j/√D) over
 * j ≤ i in double (exactly the full-cache weights: a query i < n sees only
 * keys j ≤ i < n). Without /queries the attn column is nan (analyze warns). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "analysis/analyze_ctx.h"
#include "core/csv.h"
#include "results/results_row.h"
#include "results/results_schema.h"

enum { DETAIL_N = 64 };

/* Median ρ_pairwise over every (layer, head) with a finite ρ (the lower
 * median for an even count; among equal values the first in layer-major
 * order); layer 0, head 0 when there is none. */
void detail_choose(const analyze_ctx *c, int64_t *layer, int64_t *head)
{
    *layer = 0, *head = 0;
    if (!c->has_colsum) return;
    const int64_t n = c->L * c->H;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
    if (!idx) return; /* the fallback head is still a valid choice */
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(c->rho_pair[i])) idx[m++] = i;
    /* insertion sort by (rho, index): L·H is at most a few thousand */
    for (int64_t a = 1; a < m; a++) {
        const int64_t v = idx[a];
        int64_t b = a;
        while (b > 0 && (c->rho_pair[idx[b - 1]] > c->rho_pair[v] ||
                         (c->rho_pair[idx[b - 1]] == c->rho_pair[v] && idx[b - 1] > v))) {
            idx[b] = idx[b - 1];
            b--;
        }
        idx[b] = v;
    }
    if (m > 0) *layer = idx[(m - 1) / 2] / c->H, *head = idx[(m - 1) / 2] % c->H;
    free(idx);
}

static double dot_f(const float *a, const float *b, int64_t D)
{
    double s = 0.0;
    for (int64_t d = 0; d < D; d++) s += (double)a[d] * b[d];
    return s;
}

/* cos [n][n] of keys [n][D]; a zero key has cosine 0 with everything. */
static void cosines(const float *k, int64_t n, int64_t D, double *cos)
{
    double norm[DETAIL_N];
    for (int64_t i = 0; i < n; i++) norm[i] = sqrt(dot_f(k + i * D, k + i * D, D));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            cos[i * n + j] = norm[i] > 0 && norm[j] > 0 ? dot_f(k + i * D, k + j * D, D) / (norm[i] * norm[j]) : 0.0;
}

/* attn [n][n]: causal softmax rows of q [n][D] against k [n][D]; 0 above the diagonal. */
static void attention(const float *q, const float *k, int64_t n, int64_t D, double *attn)
{
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t i = 0; i < n; i++) {
        double *row = attn + i * n, mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j <= i; j++) {
            row[j] = dot_f(q + i * D, k + j * D, D) * scale;
            if (row[j] > mx) mx = row[j];
        }
        for (int64_t j = 0; j <= i; j++) sum += (row[j] = exp(row[j] - mx));
        for (int64_t j = 0; j < n; j++) row[j] = j <= i ? row[j] / sum : 0.0;
    }
}

int detail_write(const analyze_ctx *c, kv_err *err)
{
    const int64_t n = c->T < DETAIL_N ? c->T : DETAIL_N, D = c->D, l = c->detail_layer, h = c->detail_head;
    float *k = kv_calloc((size_t)(2 * n * D), sizeof(float), "detail keys", err);
    double *cos = kv_calloc((size_t)(2 * n * n), sizeof(double), "detail matrices", err);
    int rc = k && cos ? KV_OK : err->code;
    double *attn = cos ? cos + n * n : NULL;
    if (!rc) rc = trace_read_rows(c->tr, TRACE_KEYS, l, h / (c->H / c->K), 0, n, k, err);
    if (!rc && c->has_queries) rc = trace_read_rows(c->tr, TRACE_QUERIES, l, h, 0, n, k + n * D, err);
    FILE *f = rc ? NULL : results_schema_create(c->outdir, &RESULTS_SCHEMA_DETAIL, err);
    if (f) {
        cosines(k, n, D, cos);
        if (c->has_queries) attention(k + n * D, k, n, D, attn);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                results_row w = results_row_begin(f, &RESULTS_SCHEMA_DETAIL);
                results_row_int(&w, i), results_row_int(&w, j), results_row_real(&w, cos[i * n + j]);
                results_row_real(&w, c->has_queries ? attn[i * n + j] : NAN);
                results_row_end(&w);
            }
        rc = csv_close(f, "detail.csv", err);
    } else if (!rc) {
        rc = err->code;
    }
    free(k), free(cos);
    return rc;
}
