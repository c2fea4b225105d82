/* The cost of kvtrace's fixed split of a product (docs/reproducibility.md): one projection
 * y[M][N] = x[M][K] . W[N][K]^T as OpenBLAS threads it itself (the baseline: what capture ran
 * before the split was fixed, and what results then depended on), and as the CPU kernels split
 * it (blocks of W's rows on OpenMP threads, OpenBLAS on one thread each), in the same run.
 *   bench_split M N K THREADS [seconds]
 *     -> "split M N K threads T openblas_gflops X kvtrace_gflops Y ratio Y/X" */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/progress.h"
#include "model/backend.h"

/* GFLOP/s of the product run by `how` (NULL: OpenBLAS on `threads` threads) for `budget` seconds. */
static double rate(void *inst, int threads, const float *a, const float *b, float *c, long M, long N, long K,
                   double budget)
{
    openblas_set_num_threads(inst ? 1 : threads);
    long reps = 0;
    double t0 = kv_now_seconds(), t;
    do {
        if (inst) FORWARD_CPU.matmul(inst, a, b, c, M, K, N);
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, a, (int)K, b,
                         (int)K, 0.0f, c, (int)N);
        reps++;
        t = kv_now_seconds() - t0;
    } while (t < budget);
    return 2.0 * (double)M * (double)N * (double)K * (double)reps / t * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_split M N K THREADS [seconds]\n");
        return 2;
    }
    long M = atol(argv[1]), N = atol(argv[2]), K = atol(argv[3]);
    int threads = atoi(argv[4]);
    double budget = argc > 5 ? atof(argv[5]) : 1.0;
    if (M < 1 || N < 1 || K < 1 || threads < 1) return 2;
    float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(N * K));
    float *c = malloc(sizeof(float) * (size_t)(M * N));
    void *inst = NULL;
    kv_err err = {0};
    if (!a || !b || !c || backend_open(&BACKEND_CPU, &(backend_request){.threads = threads}, &inst, &err)) return 1;
    for (long i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 13) * 0.01f;
    for (long i = 0; i < N * K; i++) b[i] = (float)((i * 5) % 11) * 0.01f;
    (void)rate(inst, threads, a, b, c, M, N, K, 0.1); /* warm: pages, the thread pools */
    const double ours = rate(inst, threads, a, b, c, M, N, K, budget);
    (void)rate(NULL, threads, a, b, c, M, N, K, 0.1);
    const double theirs = rate(NULL, threads, a, b, c, M, N, K, budget);
    printf("split %ld %ld %ld threads %d openblas_gflops %.2f kvtrace_gflops %.2f ratio %.3f\n", M, N, K, threads,
           theirs, ours, ours / theirs);
    backend_close(&BACKEND_CPU, inst);
    free(a), free(b), free(c);
    return 0;
}
