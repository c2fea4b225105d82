/* The time to read n candidate keys of D floats once, as sim's policies see
 * them (one contiguous [n][D] block): the floor for a policy's scoring cost
 * per candidate, measured in the same run as the policies.
 *   bench_keyread N D [seconds]  ->  "keyread N D ns_per_candidate X" */
#include <stdio.h>
#include <stdlib.h>

#include "core/progress.h"

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
    volatile float sink = 0.0f;
    long reps = 0;
    double t0 = kv_now_seconds(), t;
    do {
        float acc[8] = {0};
        for (long i = 0; i + 8 <= n * D; i += 8)
            for (int l = 0; l < 8; l++) acc[l] += k[i + l];
        sink += acc[0] + acc[7];
        reps++;
        t = kv_now_seconds() - t0;
    } while (t < budget);
    printf("keyread %ld %ld ns_per_candidate %.3f\n", n, D, t * 1e9 / ((double)reps * (double)n));
    free(k);
    (void)sink;
    return 0;
}
