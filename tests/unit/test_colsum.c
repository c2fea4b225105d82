/* Exact causal column sums against a brute-force T x T computation in double. */
#include "testutil.h"

#include <math.h>

#include "core/attn_colsum.h"
#include "core/rng.h"

/* colsum[j] = sum_{i >= j} softmax_i(j), all in double, the whole T x T matrix. */
static void brute_force(const float *q, const float *k, int T, int D, double scale, double *out)
{
    double *row = malloc(sizeof(double) * (size_t)T);
    assert_non_null(row);
    for (int j = 0; j < T; j++) out[j] = 0.0;
    for (int i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j <= i; j++) {
            double s = 0.0;
            for (int d = 0; d < D; d++) s += (double)q[i * D + d] * (double)k[j * D + d];
            row[j] = s * scale;
            mx = fmax(mx, row[j]);
        }
        for (int j = 0; j <= i; j++) sum += exp(row[j] - mx);
        for (int j = 0; j <= i; j++) out[j] += exp(row[j] - mx) / sum;
    }
    free(row);
}

static void random_qk(int T, int D, float amp, uint64_t seed, float **q, float **k)
{
    kv_rng r;
    rng_init(&r, seed, 1, 2, 3);
    *q = malloc(sizeof(float) * (size_t)(T * D));
    *k = malloc(sizeof(float) * (size_t)(T * D));
    assert_non_null(*q);
    assert_non_null(*k);
    for (int i = 0; i < T * D; i++) (*q)[i] = amp * (float)rng_normal(&r);
    for (int i = 0; i < T * D; i++) (*k)[i] = amp * (float)rng_normal(&r);
}

static void matches_brute_force(void **state)
{
    (void)state;
    const int shapes[][2] = {{1, 8}, {7, 8}, {128, 16}, {129, 64}, {300, 8}, {513, 32}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int T = shapes[c][0], D = shapes[c][1];
        float *q, *k;
        random_qk(T, D, 1.5f, 17 + c, &q, &k);
        double scale = 1.0 / sqrt((double)D);
        double *ref = malloc(sizeof(double) * (size_t)T), *got = malloc(sizeof(double) * (size_t)T);
        float *scratch = malloc(sizeof(float) * (size_t)attn_colsum_scratch_floats(T));
        float *gotf = malloc(sizeof(float) * (size_t)T);
        brute_force(q, k, T, D, scale, ref);
        attn_colsum_head(q, k, T, D, (float)scale, got, scratch);
        /* non-degenerate: the weights are far from uniform */
        double ref_max = 0.0, total = 0.0;
        for (int j = 0; j < T; j++) ref_max = fmax(ref_max, ref[j]), total += got[j];
        if (T > 100) assert_true(ref_max > 3.0);
        assert_true(fabs(total - T) < 1e-4 * T);
        for (int j = 0; j < T; j++) gotf[j] = (float)got[j];
        char what[64];
        snprintf(what, sizeof what, "colsum T=%d D=%d", T, D);
        assert_int_equal(tu_close_array(what, ref, gotf, (size_t)T, 1e-6, 1e-5), 0);
        free(q), free(k), free(ref), free(got), free(scratch), free(gotf);
    }
}

/* A capture adds rows chunk by chunk as keys arrive: same result as the whole head. */
static void chunked_rows_equal_whole_head(void **state)
{
    (void)state;
    const int T = 200, D = 16, B = 7;
    float *q, *k;
    random_qk(T, D, 1.0f, 5, &q, &k);
    double whole[200], chunked[200] = {0};
    float *scratch = malloc(sizeof(float) * (size_t)attn_colsum_scratch_floats(T));
    attn_colsum_head(q, k, T, D, 0.25f, whole, scratch);
    for (int i0 = 0; i0 < T; i0 += B) {
        int n = T - i0 < B ? T - i0 : B;
        attn_colsum_add_rows(q + i0 * D, i0, n, k, D, 0.25f, chunked, scratch);
    }
    /* sgemm may block the two shapes differently: equal to float rounding */
    for (int j = 0; j < T; j++) assert_true(fabs(whole[j] - chunked[j]) <= 1e-7 + 1e-5 * whole[j]);
    free(q), free(k), free(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_brute_force),
        cmocka_unit_test(chunked_rows_equal_whole_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
