/* forward: one model walk over a chunk of tokens against a growing KV cache.
 *
 * The walk (embedding, per layer: RMSNorm, Q/K/V projections with optional
 * bias (qwen2), optional per-head q/k RMSNorm (qwen3), RoPE (optionally
 * frequency-scaled: llama3), grouped-
 * query attention with exact softmax, output projection, RMSNorm, SwiGLU
 * FFN; final norm and logits) is written once; the arithmetic goes through a
 * table of kernels, so a CUDA backend (issue #8) swaps the table, not the walk.
 * What a capture records is handed to an observer as the walk computes it. */
#ifndef KV_FORWARD_H
#define KV_FORWARD_H

#include <stdint.h>

#include "capture/model.h"
#include "core/kv_error.h"

typedef struct {
    /* y[n][out] = x[n][in] . W[out][in]^T */
    void (*matmul)(const float *x, const float *w, float *y, int64_t n, int64_t in, int64_t out);
    /* out[n][dim] = x / rms(x) * w, rms with epsilon eps */
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, int64_t dim, double eps);
    /* rotates x[n][heads][D] for positions pos0 .. pos0+n-1 */
    void (*rope)(float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0, const float *rope_table,
                 rope_style style);
    /* y[n][m] += b[m] */
    void (*add_bias)(float *y, const float *b, int64_t n, int64_t m);
    /* gate[i] = silu(gate[i]) * up[i] */
    void (*swiglu)(float *gate, const float *up, int64_t n);
    /* One query head over a chunk: q rows [n] (row stride ldq) at positions
     * pos0.., keys/values [pos0+n][D] of its kv head; writes out rows (stride
     * ldo) and the normalised causal weights p[n][pos0+n] (zero above the
     * diagonal). */
    void (*attend)(const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0,
                   int64_t n, int64_t D, float *p, float *out, int64_t ldo);
} forward_kernels;

/* The CPU kernels (OpenBLAS sgemm for every product). */
extern const forward_kernels FORWARD_CPU;

/* What a capture records; any hook may be NULL. Hooks return KV_OK or an
 * error code (the walk stops and returns it). */
typedef struct {
    void *ctx;
    /* after RoPE, per layer: q [n][H*D], k and v [n][K*D] of positions pos0.. */
    int (*on_qkv)(void *ctx, int64_t layer, int64_t pos0, int64_t n, const float *q, const float *k,
                  const float *v, kv_err *err);
    /* normalised causal weights of query head `head`: p [n][pos0+n] */
    int (*on_attention)(void *ctx, int64_t layer, int64_t head, int64_t pos0, int64_t n,
                        const float *p, kv_err *err);
    /* next-token logits of positions pos0.. : [n][V] */
    int (*on_logits)(void *ctx, int64_t pos0, int64_t n, const float *logits, kv_err *err);
} forward_observer;

typedef struct {
    const kv_model *m;
    forward_kernels kern;
    int64_t cap;       /* tokens the cache can hold (T) */
    int64_t len;       /* tokens processed so far */
    int64_t max_chunk; /* B */
    float *k_cache;    /* [L][K][cap][D] */
    float *v_cache;    /* [L][K][cap][D] */
    float *rope_tab;   /* [cap][D] cos/sin */
    /* scratch for one chunk */
    float *x;          /* [B][dim] residual stream */
    float *xb;         /* [B][dim] normalised */
    float *q;          /* [B][H*D] */
    float *k;          /* [B][K*D] */
    float *v;          /* [B][K*D] */
    float *att;        /* [B][H*D] attention output */
    float *gate;       /* [B][ffn] */
    float *up;         /* [B][ffn] */
    float *p;          /* [B][cap] attention weights of one head */
    float *logits;     /* [B][V] */
    /* work done, for benchmarks: matrix products (projections, FFN, logits)
     * and attention, in floating-point operations and seconds */
    double gemm_flops, gemm_seconds, attn_flops, attn_seconds;
} forward_state;

/* Scratch and cache for up to `cap` tokens in chunks of up to `max_chunk`:
 * memory is the KV cache plus O(max_chunk * cap), never cap x cap. */
int forward_init(forward_state *s, const kv_model *m, const forward_kernels *kern, int64_t cap,
                 int64_t max_chunk, kv_err *err);

/* Processes tokens[0..n) at positions len .. len+n-1 (n <= max_chunk,
 * len + n <= cap); the logits of the chunk stay in s->logits ([n][V]). */
int forward_chunk(forward_state *s, const int32_t *tokens, int64_t n, const forward_observer *obs,
                  kv_err *err);

void forward_free(forward_state *s);

#endif
