#include "rope.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

bool rope_style_parse(const char *s, rope_style *out)
{
    if (strcmp(s, "interleaved") == 0) return *out = ROPE_INTERLEAVED, true;
    if (strcmp(s, "neox") == 0) return *out = ROPE_NEOX, true;
    return false;
}

void rope_pair_dims(rope_style style, int64_t D, int64_t p, int64_t *a, int64_t *b)
{
    if (style == ROPE_INTERLEAVED) *a = 2 * p, *b = 2 * p + 1;
    else *a = p, *b = p + D / 2;
}

void rope_apply(float *x, int64_t D, int64_t pos, double theta, rope_style style)
{
    for (int64_t p = 0; p < D / 2; p++) {
        double freq = pow(theta, -2.0 * (double)p / (double)D);
        double ang = (double)pos * freq;
        double c = cos(ang), s = sin(ang);
        int64_t a, b;
        rope_pair_dims(style, D, p, &a, &b);
        double xa = x[a], xb = x[b];
        x[a] = (float)(xa * c - xb * s);
        x[b] = (float)(xa * s + xb * c);
    }
}

void rope_table_fill(float *table, int64_t T, int64_t D, double theta)
{
    rope_table_fill_scaled(table, T, D, theta, NULL);
}

void rope_table_fill_scaled(float *table, int64_t T, int64_t D, double theta, const double *div)
{
    for (int64_t p = 0; p < D / 2; p++) {
        double freq = pow(theta, -2.0 * (double)p / (double)D) / (div ? div[p] : 1.0);
        for (int64_t t = 0; t < T; t++) {
            double ang = (double)t * freq;
            table[(t * (D / 2) + p) * 2] = (float)cos(ang);
            table[(t * (D / 2) + p) * 2 + 1] = (float)sin(ang);
        }
    }
}

void rope_table_apply(float *x, int64_t D, rope_style style, const float *table, int64_t t)
{
    const float *cs = table + t * D;
    for (int64_t p = 0; p < D / 2; p++) {
        int64_t a, b;
        rope_pair_dims(style, D, p, &a, &b);
        float c = cs[2 * p], s = cs[2 * p + 1];
        float xa = x[a], xb = x[b];
        x[a] = xa * c - xb * s;
        x[b] = xa * s + xb * c;
    }
}

void rope_llama3_divisors(double *div, int64_t D, double theta, double factor, double low,
                          double high, double orig_ctx)
{
    const double pi = 3.14159265358979323846;
    for (int64_t p = 0; p < D / 2; p++) {
        double wavelen = 2.0 * pi / pow(theta, -2.0 * (double)p / (double)D);
        if (wavelen < orig_ctx / high) {
            div[p] = 1.0;
        } else if (wavelen > orig_ctx / low) {
            div[p] = factor;
        } else {
            double s = (orig_ctx / wavelen - low) / (high - low);
            div[p] = 1.0 / ((1.0 - s) / factor + s);
        }
    }
}

double rope_freq(const rope_spec *r, int64_t D, int64_t p)
{
    return pow(r->theta, -2.0 * (double)p / (double)D) / (r->div ? r->div[p] : 1.0);
}

void rope_rotate_d(const rope_spec *r, double *x, int64_t D, double pos)
{
    for (int64_t p = 0; r->theta > 0 && p < D / 2; p++) {
        const double ang = pos * rope_freq(r, D, p), c = cos(ang), s = sin(ang);
        int64_t a, b;
        rope_pair_dims(r->style, D, p, &a, &b);
        const double xa = x[a], xb = x[b];
        x[a] = xa * c - xb * s;
        x[b] = xa * s + xb * c;
    }
}

void rope_mean_rotation(const rope_spec *r, int64_t D, int64_t p0, int64_t n, double *cs)
{
    for (int64_t p = 0; p < D / 2; p++) {
        const double f = r->theta > 0 ? rope_freq(r, D, p) : 0.0, h = sin(0.5 * f);
        /* sum_{k<n} e^{i(p0+k)f} = e^{i(p0+(n-1)/2)f} sin(nf/2)/sin(f/2); f = 0: n */
        const double amp = h != 0 ? sin(0.5 * (double)n * f) / h : (double)n;
        const double mid = ((double)p0 + 0.5 * (double)(n - 1)) * f, c = amp * cos(mid), s = amp * sin(mid);
        cs[2 * p] = c / (double)n, cs[2 * p + 1] = s / (double)n;
    }
}

void rope_pairs_apply(rope_style style, const double *cs, double *x, int64_t D)
{
    for (int64_t p = 0; p < D / 2; p++) {
        int64_t a, b;
        rope_pair_dims(style, D, p, &a, &b);
        const double c = cs[2 * p], s = cs[2 * p + 1], xa = x[a], xb = x[b];
        x[a] = xa * c - xb * s;
        x[b] = xa * s + xb * c;
    }
}
