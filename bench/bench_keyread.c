/* The time to read n candidate keys of D floats once, as sim's policies see
 * them (one contiguous [n][D] block): the floor for a policy's scoring cost
 * per candidate, measured in the same run as the policies. Two floors: a sum
 * in float lanes (the bare read), and a sum in double lanes (the read plus the
 * widening every score's accumulation takes,
 * docs/sim.md#the-eviction-step-step-by-step). Both loops are vectorised
 * and cloned for the CPU exactly as the policies' loops are.
 *   bench_keyread N D [seconds]  ->  "keyread N D ns_per_candidate X double Y" */
#include <stdio.h>
#include <stdlib.h>

#include "core/progress.h"
#include "core/vectorize.h"

KV_VECTOR_CLONES
static float read_float(const float *k, long m)
{
    float acc[16] = {0};
    for (long i = 0; i + 16 <= m; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += k[i + l];
    return acc[0] + acc[15];
}

KV_VECTOR_CLONES
static double read_double(const float *k, long m)
{
    double acc[16] = {0};
    for (long i = 0; i + 16 <= m; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += k[i + l];
    return acc[0] + acc[15];
}

static double ns_per_row(const float *k, long n, long D, double budget, int dbl)
{
    volatile double sink = 0.0;
    long reps = 0;
    double t0 = kv_now_seconds(), t;
    do {
        sink += dbl ? read_double(k, n * D) : read_float(k, n * D);
        reps++;
        t = kv_now_seconds() - t0;
    } while (t < budget);
    (void)sink;
    return t * 1e9 / ((double)reps * (double)n);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_keyread N D [seconds]\n");
        return 2;
    }
    long n = atol(argv[1]), D = atol(argv[2]);
    double budget = argc > 3 ? atof(argv[3]) : 0.5;
    if (n < 1 || D < 1) return 2;
    float *k = malloc(sizeof(float) * (size_t)(n * D));
    if (!k) return 1;
    for (long i = 0; i < n * D; i++) k[i] = (float)(i % 17) * 0.1f;
    double f = ns_per_row(k, n, D, budget / 2, 0), d = ns_per_row(k, n, D, budget / 2, 1);
    printf("keyread %ld %ld ns_per_candidate %.3f double %.3f\n", n, D, f, d);
    free(k);
    return 0;
}
