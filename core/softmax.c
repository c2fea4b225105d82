#include "softmax.h"

#include <math.h>

#include "fastexp.h"
#include "vectorize.h"

enum { LANES = 8 };

KV_VECTOR_CLONES
float softmax_row_max(const float *s, int64_t n)
{
    float lane[LANES];
    for (int l = 0; l < LANES; l++) lane[l] = s[0];
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) lane[l] = s[j + l] > lane[l] ? s[j + l] : lane[l];
    float mx = lane[0];
    for (int l = 1; l < LANES; l++) mx = lane[l] > mx ? lane[l] : mx;
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

KV_VECTOR_CLONES
double softmax_row_exp(float *s, int64_t n, float mx)
{
    /* two passes over a row that sits in L1: the map vectorises on its own,
     * the sum keeps LANES double partial sums combined in a fixed order */
    for (int64_t j = 0; j < n; j++) s[j] = kv_expf(s[j] - mx);
    double lane[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += s[j + l];
    double sum = 0.0;
    for (int l = 0; l < LANES; l++) sum += lane[l];
    for (; j < n; j++) sum += s[j];
    return sum;
}

KV_VECTOR_CLONES
double softmax_row(float *s, int64_t len, int64_t cols, float *row_max)
{
    float mx = softmax_row_max(s, len);
    if (row_max) *row_max = mx;
    double sum = softmax_row_exp(s, len, mx);
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < len; j++) s[j] *= inv;
    for (int64_t j = len; j < cols; j++) s[j] = 0.0f;
    return (double)mx + log(sum);
}

KV_VECTOR_CLONES
void softmax_accumulate(double *acc, const float *x, double scale, int64_t n)
{
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) acc[j + l] += scale * (double)x[j + l];
    for (; j < n; j++) acc[j] += scale * (double)x[j];
}
