/* int8_product: y = x·Wᵀ for W held in Q8_0, Q4_0 or Q4_1 blocks, on x
 * quantised to int8 per block of 32 (capture --compute int8; the arithmetic,
 * docs/capture.md#compute-int8). Every block's integer dot product is exact;
 * the float32 sum over blocks runs in block order, each product and sum
 * rounded (no fused multiply-add), so the result is the same bits on every
 * machine: AMX tiles compute the integer products where the CPU has them
 * (and KVTRACE_INT8_KERNEL is not "portable"), plain loops elsewhere. */
#ifndef KV_INT8_PRODUCT_H
#define KV_INT8_PRODUCT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/weights.h"

enum { INT8_BLOCK = 32, INT8_TILE = 16 };

/* Whether ggml type t (a weights_ggml's) has an int8 product: Q8_0, Q4_0, Q4_1. */
bool int8_supports(uint32_t t);

/* n rows of `in` values quantised (int8_quantise): the codes q by tile of 16 rows and block of 32 values,
 * [n_pad/16][in/32][16][32] (a tile's block is the 512 contiguous bytes the kernels load: int8_code_at),
 * and per row and block the scale d [n_pad][in/32] and the codes' sum s [n_pad][in/32]; rows n .. n_pad
 * (a multiple of 16) are zero. */
typedef struct {
    int8_t *q;
    float *d;
    int32_t *s;
    int64_t n, n_pad, in;
    size_t cap_q, cap_b;  /* room (int8_rows_reserve): codes, and scales (and sums) */
} int8_rows;

/* Code k of quantised row i. */
static inline int8_t int8_code_at(const int8_rows *r, int64_t i, int64_t k)
{
    const int64_t nb = r->in / INT8_BLOCK;
    return r->q[((i / INT8_TILE * nb + k / INT8_BLOCK) * INT8_TILE + i % INT8_TILE) * INT8_BLOCK + k % INT8_BLOCK];
}

/* Whether r has room for n rows of `in` values. */
bool int8_rows_fit(const int8_rows *r, int64_t n, int64_t in);

/* Room for up to n rows of `in` values (in a multiple of 32); KV_EFAIL on failure. */
int int8_rows_reserve(int8_rows *r, int64_t n, int64_t in, kv_err *err);
void int8_rows_free(int8_rows *r);

/* x [n][in] into r (int8_rows_fit): per block of 32, a = max |x|, d = a / 127, q = x · (1 / d) rounded
 * to nearest even (0 where a = 0; where a value is not finite, d is not either and every q is 0, so the
 * products are NaN as the float path's would be inf or NaN). In parts, for threads: begin (the shape,
 * the padding rows), then rows [i0, i1) of x, each row once. */
void int8_quantise(int8_rows *r, const float *x, int64_t n, int64_t in);
void int8_quantise_begin(int8_rows *r, int64_t n, int64_t in);
void int8_quantise_rows(int8_rows *r, const float *x, int64_t i0, int64_t i1);

/* A matrix of `out` rows of `in` values (ggml blocks of type w->type, int8_supports) repacked for the
 * running kernel (amx: AMX's B operand, else plain rows of codes), once, in groups of 16 rows: per group
 * and block the codes (512 bytes), the F16 scales dw and (Q4_1) minimums mw widened to float32. Packed
 * as llama.cpp's AMX backend repacks at load: int8_matrix_bytes more memory, and no product reads the
 * file's blocks again. */
typedef struct {
    const void *key;        /* the matrix the forward pass names (int8_matrix_ref) */
    const weights_ggml *w;  /* the blocks it was packed from */
    int64_t in, out, groups;
    bool minimum;           /* Q4_1 */
    int8_t *codes;          /* [groups][in/32][512] */
    float *dw, *mw;         /* [groups][in/32][16] */
} int8_matrix;

double int8_matrix_bytes(int64_t in, int64_t out);

/* The bytes of m's blocks in the file's type (what it was packed from). */
size_t int8_matrix_file_bytes(const int8_matrix *m);

/* Room for w's packing (in a multiple of 32); KV_EFAIL on failure. Then int8_matrix_pack for groups
 * [g0, g1) (of m->groups: threads may pack parts), each group once, with int8_amx()'s answer. */
int int8_matrix_reserve(int8_matrix *m, const weights_ggml *w, int64_t in, int64_t out, kv_err *err);
void int8_matrix_pack(int8_matrix *m, int64_t g0, int64_t g1, bool amx);
void int8_matrix_free(int8_matrix *m);

/* The matrices of m that --compute int8 multiplies (ggml blocks of an int8_supports type: q, k, v, W_o's
 * blocks, gate, up, down and the output layer), with their shapes, into refs (NULL: only counted): their
 * number; *bytes (NULL: not wanted) their packing's int8_matrix_bytes. key: the pointer the forward pass
 * multiplies by (the model_mat, or for W_o its float32 copy). */
typedef struct {
    const void *key;
    const weights_ggml *w;
    int64_t in, out;
} int8_matrix_ref;

int64_t int8_model_matrices(const kv_model *m, int8_matrix_ref *refs, double *bytes);

/* Scratch bytes one thread's int8_product needs (64-byte aligned). */
size_t int8_scratch_bytes(void);

/* W rows of `in` values that one int8_product call's x rows pass as a panel (it stays in the second-level
 * cache): a call's rows in multiples of it (or all of them) use it fully. */
int64_t int8_panel_rows(int64_t in);

/* y[i][o - o0] (row stride ldy) for the quantised rows i < x->n (of w->in values) and w's rows o0 .. o0 +
 * rows, o0 a multiple of 16; amx: what w was packed with (the integer sums on AMX tiles, else plain loops:
 * the same bits). */
void int8_product(const int8_rows *x, const int8_matrix *w, int64_t o0, int64_t rows, float *y, int64_t ldy,
                  void *scratch, bool amx);

/* Whether int8_product may use AMX tiles here: the CPU has them (AMX-TILE and AMX-INT8, and AVX-512F, whose
 * vectors sum the tiles' results), the kernel grants them to the process (arch_prctl), and
 * KVTRACE_INT8_KERNEL is not "portable". Asks each time: callers keep the answer (the CPU backend's
 * instance). */
bool int8_amx(void);

#endif
