/* Spans in sim (docs/sim.md, "Spans"): the full-cache weight
 * each query puts on a span (once per layer, for every configuration), the
 * result arrays, and spans.csv / spans_summary.csv. The replay's share
 * (retention and cached weight per chunk) is sim/replay.c's. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "results/results_dir.h"
#include "results/results_h5.h"
#include "results/results_schema.h"
#include "sim/results.h"
#include "study/study.h"

enum { SPAN_BLOCK = 64 };

int sim_spans_alloc(sim_results *r, const trace_span *spans, int64_t n_spans, kv_err *err)
{
    if (!spans || n_spans < 1) return KV_OK;
    const size_t n = (size_t)r->n_cfg * (size_t)(r->L * r->K * n_spans);
    if (!(r->spans = kv_calloc((size_t)n_spans, sizeof *r->spans, "spans", err)) ||
        !(r->span_ret = kv_calloc(n, sizeof(double), "spans", err)) ||
        !(r->span_recall = kv_calloc(n, sizeof(double), "spans", err)))
        return err->code;
    memcpy(r->spans, spans, sizeof *spans * (size_t)n_spans);
    r->n_spans = n_spans;
    return KV_OK;
}

int sim_spans_full(const sim_layer *ly, double **out, kv_err *err)
{
    const int64_t T = ly->T, D = ly->D, H = ly->H, G = ly->H / ly->K;
    int64_t widest = 1;
    for (int64_t s = 0; s < ly->n_spans; s++)
        if (ly->spans[s].end - ly->spans[s].start > widest) widest = ly->spans[s].end - ly->spans[s].start;
    double *full = kv_calloc((size_t)(ly->n_spans * H * T), sizeof *full, "span weights", err);
    float *sc = full ? kv_calloc((size_t)(SPAN_BLOCK * widest), sizeof *sc, "span weights", err) : NULL;
    if (!sc) {
        free(full);
        return err->code;
    }
    const float scale = (float)(1.0 / sqrt((double)D));
    for (int64_t s = 0; s < ly->n_spans; s++) {
        const int64_t a = ly->spans[s].start, len = ly->spans[s].end - a;
        for (int64_t h = 0; h < H; h++)
            for (int64_t i0 = ly->spans[s].end; i0 < T; i0 += SPAN_BLOCK) {
                const int64_t m = T - i0 < SPAN_BLOCK ? T - i0 : SPAN_BLOCK;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)len, (int)D, scale,
                            ly->q + (h * T + i0) * D, (int)D, ly->k + ((h / G) * T + a) * D, (int)D, 0.0f, sc,
                            (int)len);
                for (int64_t r = 0; r < m; r++) {
                    double w = 0.0;
                    const double lse = ly->ref->lse[h * T + i0 + r];
                    for (int64_t c = 0; c < len; c++) w += exp((double)sc[r * len + c] - lse);
                    full[(s * H + h) * T + i0 + r] = w;
                }
            }
    }
    free(sc);
    *out = full;
    return KV_OK;
}

/* The fraction of span s's positions among (layer, kv head) g's final cache in configuration c. */
static double retention_final(const sim_results *r, int c, int64_t lk, const trace_span *s)
{
    const int64_t *pos = r->retained[c] + lk * r->width[c];
    int64_t n = 0;
    for (int64_t i = 0; i < r->width[c]; i++) n += pos[i] != RESULTS_PAD && pos[i] >= s->start && pos[i] < s->end;
    return (double)n / (double)(s->end - s->start);
}

static int write_rows(const sim_trace_out *t, int n, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &RESULTS_SCHEMA_SPANS, err);
    if (!f) return err->code;
    sim_cfg_cols k;
    for (int i = 0; i < n; i++) {
        const sim_results *r = t[i].r;
        for (int64_t s = 0; s < r->n_spans; s++)
            for (int c = 0; c < r->n_cfg; c++) {
                sim_cfg_cols_of(t[i].o, c, &k);
                for (int64_t lk = 0; lk < r->L * r->K; lk++) {
                    const size_t at = ((size_t)c * (size_t)(r->L * r->K) + (size_t)lk) * (size_t)r->n_spans + (size_t)s;
                    results_row w = results_row_begin(f, &RESULTS_SCHEMA_SPANS);
                    results_row_text(&w, t[i].id), results_row_text(&w, r->spans[s].name);
                    results_row_text(&w, k.config), results_row_int(&w, k.budget), results_row_int(&w, k.chunk);
                    results_row_int(&w, lk / r->K), results_row_int(&w, lk % r->K);
                    results_row_real(&w, r->span_ret[at]);
                    results_row_real(&w, retention_final(r, c, lk, &r->spans[s]));
                    results_row_real(&w, r->span_recall[at]), results_row_text(&w, k.alloc);
                    results_row_text(&w, k.run);
                    results_row_end(&w);
                }
            }
    }
    return csv_close(f, RESULTS_FILE_SPANS, err);
}

/* Trace i's three statistics of span s in configuration c, means over layers and kv heads. */
static void trace_means(const sim_results *r, int64_t s, int c, double m[3])
{
    m[0] = m[1] = m[2] = 0.0;
    for (int64_t lk = 0; lk < r->L * r->K; lk++) {
        const size_t at = ((size_t)c * (size_t)(r->L * r->K) + (size_t)lk) * (size_t)r->n_spans + (size_t)s;
        m[0] += r->span_ret[at], m[1] += retention_final(r, c, lk, &r->spans[s]), m[2] += r->span_recall[at];
    }
    for (int k = 0; k < 3; k++) m[k] /= (double)(r->L * r->K);
}

/* Index of the span named `name` in trace i's results, -1: none. */
static int64_t span_index(const sim_results *r, const char *name)
{
    for (int64_t s = 0; s < r->n_spans; s++)
        if (strcmp(r->spans[s].name, name) == 0) return s;
    return -1;
}

/* The summary rows of span `name` (held by the m traces who[0..m), its index in each at[]). */
static int summary_rows(FILE *f, const sim_trace_out *t, const char *name, const int *who, const int64_t *at, int m,
                        kv_err *err)
{
    int32_t *idx = study_resamples(m, err);
    double *x = idx ? kv_calloc((size_t)m * 3, sizeof *x, "summary", err) : NULL;
    if (!x) {
        free(idx);
        return err->code;
    }
    sim_cfg_cols k;
    for (int c = 0; c < t[0].r->n_cfg; c++) {
        sim_cfg_cols_of(t[0].o, c, &k);
        for (int j = 0; j < m; j++) {
            double v[3];
            trace_means(t[who[j]].r, at[j], c, v);
            for (int q = 0; q < 3; q++) x[q * m + j] = v[q];
        }
        results_row w = results_row_begin(f, &RESULTS_SCHEMA_SPANS_SUMMARY);
        results_row_text(&w, name), results_row_text(&w, k.config), results_row_int(&w, k.budget);
        results_row_int(&w, k.chunk), results_row_text(&w, k.alloc), results_row_int(&w, m);
        for (int s = 0; s < 3; s++) {
            double mean, lo, hi;
            study_mean_ci(x + s * m, m, idx, &mean, &lo, &hi);
            results_row_real(&w, mean), results_row_real(&w, lo), results_row_real(&w, hi);
        }
        results_row_text(&w, k.run);
        results_row_end(&w);
    }
    free(idx), free(x);
    return KV_OK;
}

static int write_summary(const sim_trace_out *t, int n, const char *dir, kv_err *err)
{
    FILE *f = results_schema_create(dir, &RESULTS_SCHEMA_SPANS_SUMMARY, err);
    int *who = f ? kv_calloc((size_t)n, sizeof *who, "summary", err) : NULL;
    int64_t *at = who ? kv_calloc((size_t)n, sizeof *at, "summary", err) : NULL;
    int rc = at ? KV_OK : err->code;
    for (int i = 0; !rc && i < n; i++)   /* each span name once, in order of first appearance */
        for (int64_t s = 0; !rc && s < t[i].r->n_spans; s++) {
            const char *name = t[i].r->spans[s].name;
            bool seen = false;
            for (int e = 0; e < i && !seen; e++) seen = span_index(t[e].r, name) >= 0;
            if (seen) continue;
            int m = 0;
            for (int e = i; e < n; e++)
                if ((at[m] = span_index(t[e].r, name)) >= 0) who[m++] = e;
            rc = summary_rows(f, t, name, who, at, m, err);
        }
    free(who), free(at);
    if (!f) return rc;
    const int closed = csv_close(f, RESULTS_FILE_SPANS_SUMMARY, err);
    return rc ? rc : closed;
}

int sim_spans_write(const sim_trace_out *t, int n, const char *dir, kv_err *err)
{
    bool any = false;
    for (int i = 0; i < n; i++) any = any || t[i].r->n_spans > 0;
    if (!any) return KV_OK;
    int rc = write_rows(t, n, dir, err);
    return rc ? rc : write_summary(t, n, dir, err);
}
