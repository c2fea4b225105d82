/* vecmath: the double-precision vector pieces the key/value policies share
 * (internal to policies/). Inputs are the stored float rows; every sum is
 * accumulated in double (SPEC §4). Shapes: rows [n][D]. */
#ifndef KV_POLICY_VECMATH_H
#define KV_POLICY_VECMATH_H

#include <stdbool.h>
#include <stdint.h>

/* malloc of n doubles that never returns NULL. score() has no error channel
 * and needs O(n + D) doubles; failing that, the process is lost anyway. */
double *vm_alloc(int64_t n);

double vm_norm(const float *x, int64_t D);
double vm_dot(const float *x, const double *y, int64_t D);
double vm_dot_ff(const float *x, const float *y, int64_t D);

/* mean[D] of the n rows; normalize: of x_j/‖x_j‖ (zero rows count as zero). */
void vm_mean(const float *rows, int64_t n, int64_t D, bool normalize, double *mean);

/* cos(x, y) from x·y and the norms; 0 when either norm is 0. */
double vm_cos(double dot, double nx, double ny);

double vm_norm_d(const double *y, int64_t D);

#endif
