/* KV_VECTOR_CLONES: a hot loop function compiled three times (AVX-512, AVX2 and
 * baseline x86-64), the variant picked once at load time for the CPU (GCC
 * function multiversioning). The build stays portable: a binary made here runs
 * on any x86-64, and fast where the CPU allows. The Makefile compiles with
 * -ffp-contract=off, so the variants give identical results (no FMA
 * contraction), and -fno-trapping-math, so that the selects in kv_expf
 * if-convert and the loops vectorise at all. Elsewhere (clang, other
 * architectures) it expands to nothing. */
#ifndef KV_VECTORIZE_H
#define KV_VECTORIZE_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KV_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KV_VECTOR_CLONES
#endif

#endif
