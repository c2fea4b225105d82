/* OpenBLAS sgemm rate for one shape: the baseline that kvtrace's own GEMM
 * phases are reported against, measured in the same run on the same machine.
 *   bench_sgemm M N K [seconds]   ->  "sgemm M N K gflops X"
 *   bench_sgemm --core            ->  "openblas_core NAME threads N": the kernel OpenBLAS chose
 *                                     at load (OPENBLAS_CORETYPE overrides it), for the ratios'
 *                                     same-kernel check (bench/bench_table.py) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/progress.h"

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--core") == 0) {
        printf("openblas_core %s threads %d\n", openblas_get_corename(), openblas_get_num_threads());
        return 0;
    }
    if (argc < 4) {
        fprintf(stderr, "usage: bench_sgemm M N K [seconds]\n");
        return 2;
    }
    long M = atol(argv[1]), N = atol(argv[2]), K = atol(argv[3]);
    double budget = argc > 4 ? atof(argv[4]) : 1.0;
    if (M < 1 || N < 1 || K < 1) return 2;
    float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(N * K));
    float *c = malloc(sizeof(float) * (size_t)(M * N));
    if (!a || !b || !c) return 1;
    for (long i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 13) * 0.01f;
    for (long i = 0; i < N * K; i++) b[i] = (float)((i * 5) % 11) * 0.01f;
    /* the same call the forward pass makes: y[M][N] = x[M][K] . W[N][K]^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, a, (int)K, b, (int)K,
                0.0f, c, (int)N);
    long reps = 0;
    double t0 = kv_now_seconds(), t;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, a, (int)K, b,
                    (int)K, 0.0f, c, (int)N);
        reps++;
        t = kv_now_seconds() - t0;
    } while (t < budget);
    printf("sgemm %ld %ld %ld gflops %.2f\n", M, N, K, 2.0 * M * N * K * reps / t * 1e-9);
    free(a), free(b), free(c);
    return 0;
}
