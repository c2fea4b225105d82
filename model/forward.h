/* forward: one model walk over a chunk of tokens against a growing KV cache.
 *
 * The walk (embedding, per layer: RMSNorm, Q/K/V projections with optional bias
 * (qwen2), optional per-head q/k RMSNorm (qwen3), RoPE (optionally
 * frequency-scaled: llama3), grouped-query attention with exact softmax,
 * output projection, RMSNorm, SwiGLU FFN; final norm and logits) is written
 * once; the arithmetic goes through a table of kernels, so the CUDA backend
 * (docs/cuda.md) swaps the table, not the walk. What a capture records is
 * handed to an observer as the walk computes it. */
#ifndef KV_FORWARD_H
#define KV_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "core/kv_error.h"

/* A backend's kernels. Every entry takes the backend instance's context
 * first (ctx: NULL for the CPU table, the open instance for a device table,
 * model/backend.h), so a table is a constant and two instances never share
 * state. */
typedef struct {
    /* y[n][out] = x[n][in] . W[out][in]^T */
    void (*matmul)(void *ctx, const float *x, const float *w, float *y, int64_t n, int64_t in, int64_t out);
    /* The same for W of a 16-bit type t (model/weights.h), widened to
     * float32 a block of whole rows at a time into tile [tile_n] floats
     * (workers parts of FORWARD_WTILE rows of `in` floats; at least one):
     * each y element is a float32 product of the same values as matmul's
     * on the widened W. NULL: float32 models only. */
    void (*matmul16)(void *ctx, const float *x, const model_mat *w, model_wtype t, float *y, int64_t n, int64_t in,
                     int64_t out, float *tile, int64_t tile_n);
    /* optional (NULL: one): how many matmul16 blocks may be widened at once (the tile's parts) */
    int (*workers)(void *ctx);
    /* out[n][dim] = x / rms(x) * w, rms with epsilon eps */
    void (*rmsnorm)(void *ctx, float *out, const float *x, const float *w, int64_t n, int64_t dim, double eps);
    /* rotates x[n][heads][D] for positions pos0 .. pos0+n-1 */
    void (*rope)(void *ctx, float *x, int64_t n, int64_t heads, int64_t D, int64_t pos0, const float *rope_table,
                 rope_style style);
    /* y[n][m] += b[m] */
    void (*add_bias)(void *ctx, float *y, const float *b, int64_t n, int64_t m);
    /* gate[i] = silu(gate[i]) * up[i] */
    void (*swiglu)(void *ctx, float *gate, const float *up, int64_t n);
    /* One query head over a chunk: q rows [n] (row stride ldq) at positions
     * pos0.., keys/values [pos0+n][D] of its kv head; writes out rows (stride
     * ldo) and the normalised causal weights p[n][pos0+n] (zero above the
     * diagonal); lse, mx (NULL: not wanted) [n] log Σ_j exp(s_j) and
     * max_j s_j of the scaled scores s_j = q.k_j / sqrt(D). */
    void (*attend)(void *ctx, const float *q, int64_t ldq, const float *k, const float *v, int64_t pos0, int64_t n,
                   int64_t D, float *p, float *out, int64_t ldo, double *lse, float *mx);
    /* In-model eviction (docs/fidelity.md). Keeps rows keep[0..n_keep) of one
     * (layer, kv head) cache k, v [cap][D] as its rows 0..n_keep-1, in order;
     * keep is a host array, ascending, keep[i] >= i. */
    void (*compact)(void *ctx, float *k, float *v, const int64_t *keep, int64_t n_keep, int64_t D);
    /* Rows [0, n) of a cache readable on the host (the policies score them):
     * the cache itself where it is host memory (CPU), else a copy into
     * host [n][D], returned. */
    const float *(*host_rows)(void *ctx, const float *cache, int64_t n, int64_t D, float *host);

    /* ---- memory and device work (docs/cuda.md) ---------------------------
     * The CPU table's versions are trivial: its memory is the host's
     * (calloc, memcpy), the loops are the plain ones. A device table
     * (model/backend_cuda.c) sets host_memory false: the walk then keeps
     * its caches and scratch in the device's memory (alloc), passes device
     * pointers to every kernel, calls attend_layer instead of attend (no
     * weights matrix p exists), and hands observers' on_qkv device pointers
     * (capture/record_device.c stages them to the host); logits come back to
     * s->logits (host) through download. */
    bool host_memory;
    /* n zeroed elements of `size` bytes in the kernels' memory; NULL + err */
    void *(*alloc)(void *ctx, size_t n, size_t size, const char *what, kv_err *err);
    void (*release)(void *ctx, void *p);
    int (*upload)(void *ctx, void *dst, const void *src, size_t bytes, kv_err *err);
    int (*download)(void *ctx, void *dst, const void *src, size_t bytes, kv_err *err);
    /* x[n][dim] = rows tokens[0..n) (a host array) of the embedding table */
    void (*embed)(void *ctx, float *x, const float *table, const int32_t *tokens, int64_t n, int64_t dim);
    /* x[i] += y[i] (the residual stream) */
    void (*add)(void *ctx, float *x, const float *y, int64_t n);
    /* rows of `width` floats from src (row stride lds) to dst (row stride ldd) */
    void (*copy_rows)(void *ctx, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t width);
    /* Every query head of layer `layer` at once (NULL: attend per head):
     * q [n][H*D], caches [K][cap][D] with n_cached rows before the chunk's
     * n; out [n][H*D]; stats (NULL: not wanted) [2][H][n]: each row's
     * largest scaled score m, then its Σ_j exp(s_j - m), so that the
     * log-sum-exp is m + log(sum). A device table may accumulate column
     * sums here. */
    void (*attend_layer)(void *ctx, int64_t layer, const float *q, const float *k_cache, const float *v_cache,
                         int64_t cap, int64_t H, int64_t K, int64_t D, int64_t n_cached, int64_t n, float *out,
                         float *stats);
    /* waits for the kernels enqueued so far; the first failure among them */
    int (*sync)(void *ctx, kv_err *err);
} forward_kernels;

/* The rows of W in one block of a product y = x . W^T on the CPU: the
 * output's rows are split into blocks of equal size, at most FORWARD_WTILE
 * each, whatever the thread count (docs/capture.md); a 16-bit W is widened
 * block by block, into one part of the tile per worker (workers x
 * FORWARD_WTILE rows of the widest input). */
#define FORWARD_WTILE 128

/* The CPU kernels (OpenBLAS sgemm for every product), host memory; they
 * take no context (pass NULL). */
extern const forward_kernels FORWARD_CPU;

/* What a capture records; any hook may be NULL. Hooks return KV_OK or an
 * error code (the walk stops and returns it). */
typedef struct {
    void *ctx;
    /* after RoPE, per layer: q [n][H*D], k and v [n][K*D] of positions pos0..,
     * in the kernels' memory (device memory for a device table) */
    int (*on_qkv)(void *ctx, int64_t layer, int64_t pos0, int64_t n, const float *q, const float *k,
                  const float *v, kv_err *err);
    /* normalised causal weights of query head `head`: p [n][pos0+n] over the
     * rows of its kv head's cache; pos0 = rows cached before the chunk (the
     * chunk's first position in a full run, fewer once eviction ran) */
    int (*on_attention)(void *ctx, int64_t layer, int64_t head, int64_t pos0, int64_t n,
                        const float *p, kv_err *err);
    /* the full-cache reference of a walk without eviction: every query
     * head's attention output out [n][H*D] (query head h in columns h*D..)
     * and softmax statistics stats [2][H][n] of positions pos0.. (row
     * maxima m, then sums of exp(s - m): log-sum-exp m + log(sum); a host
     * table gives its rows' m and sum = exp(lse - m) from its double lse),
     * as the attention kernels computed them, in the kernels' memory; NULL:
     * not asked for */
    int (*on_output)(void *ctx, int64_t layer, int64_t pos0, int64_t n, const float *out, const float *stats,
                     kv_err *err);
    /* next-token logits of positions pos0.. : [n][V]; NULL for a chunk that computed none (skip_logits) */
    int (*on_logits)(void *ctx, int64_t pos0, int64_t n, const float *logits, kv_err *err);
} forward_observer;

struct forward_state;

/* In-model eviction (docs/fidelity.md, capture/evict.h): hooks the walk calls
 * so that an eviction engine can watch a layer's chunk and then shrink its
 * caches. Any hook may be NULL. */
typedef struct {
    void *ctx;
    /* after RoPE: the chunk's queries q [n][H*D] of `layer`, positions pos0.. */
    void (*on_queries)(void *ctx, int64_t layer, int64_t pos0, int64_t n, const float *q);
    /* query head `head`'s weights p [n][n_cached+n] over its kv head's cache rows */
    void (*on_attention)(void *ctx, int64_t layer, int64_t head, int64_t n_cached, int64_t n, const float *p);
    /* after every query head of `layer` attended: may shrink the layer's
     * caches through forward_cache_keep */
    int (*after_layer)(void *ctx, struct forward_state *s, int64_t layer, int64_t n, kv_err *err);
} forward_evictor;

typedef struct forward_state {
    const kv_model *m;
    const forward_kernels *kern;
    void *kctx;        /* the kernels' context: the backend instance */
    int64_t cap;       /* rows each (layer, kv head) cache holds: T, or N + B when evicting */
    int64_t n_pos;     /* positions the run may reach (T): the RoPE table */
    int64_t len;       /* tokens processed so far (the next token's position) */
    int64_t steps;     /* chunks processed so far (forward_chunk calls) */
    int64_t max_chunk; /* B */
    float *k_cache;    /* [L][K][cap][D] */
    float *v_cache;    /* [L][K][cap][D] */
    int64_t *cache_len;  /* [L][K] rows in use */
    int64_t *cache_pos;  /* [L][K][cap] original position of each row, ascending */
    int64_t *cache_peak; /* [L][K] high-water mark of cache_len: never above cap */
    int64_t rows;        /* Σ cache_len over every (layer, kv head): the rows in use now */
    int64_t rows_peak;   /* high-water mark of rows (memory bounded by design: docs/allocators.md) */
    const forward_evictor *ev; /* NULL: the cache keeps everything */
    float *rope_tab;   /* [n_pos][D] cos/sin */
    /* scratch for one chunk */
    float *x;          /* [B][dim] residual stream */
    float *xb;         /* [B][dim] normalised */
    float *q;          /* [B][H*D] */
    float *k;          /* [B][K*D] */
    float *v;          /* [B][K*D] */
    float *att;        /* [B][H*D] attention output */
    float *gate;       /* [B][ffn] */
    float *up;         /* [B][ffn] */
    float *p;          /* [B][cap] attention weights of one head (host tables only) */
    double *lse;       /* [H][B] log-sum-exps of one chunk's rows (host tables only) */
    float *stats;      /* [2][H][B] softmax statistics of the chunk's rows (on_output), kernels' memory */
    float *logits;     /* [B][V] host memory */
    bool last_logits_only; /* logits of each chunk's last row only (the next token's); the rows before it
                              hold stale values (capture --no-logprobs: docs/capture.md) */
    bool skip_logits;      /* with last_logits_only, host tables: this chunk needs none (no next token is
                              chosen after it): the output layer does not run, on_logits gets NULL */
    float *logits_k;   /* [B][V] in the kernels' memory (== logits for host tables) */
    float *wtile;      /* [wtile_n] a 16-bit model's widened rows (matmul16), else NULL */
    int64_t wtile_n;   /* workers x FORWARD_WTILE x the widest input */
    /* work done, for benchmarks: matrix products (projections, FFN, logits)
     * and attention, in floating-point operations and seconds */
    double gemm_flops, gemm_seconds, attn_flops, attn_seconds;
} forward_state;

/* Scratch and cache for up to `cap` tokens in chunks of up to `max_chunk`,
 * on kernels `kern` with context kctx (both must outlive s): memory is the
 * KV cache plus O(max_chunk * cap), never cap x cap. */
int forward_init(forward_state *s, const kv_model *m, const forward_kernels *kern, void *kctx, int64_t cap,
                 int64_t max_chunk, kv_err *err);

/* The same for a run over up to n_pos positions whose caches hold at most
 * `cap` rows per (layer, kv head) (N + B with eviction: s->ev must then keep
 * every cache at <= cap - B after each chunk). */
int forward_init_cache(forward_state *s, const kv_model *m, const forward_kernels *kern, void *kctx, int64_t n_pos,
                       int64_t cap, int64_t max_chunk, kv_err *err);

/* Rows [0, cache_len) of one (layer, kv head) cache, keys or values, as host
 * memory (kern->host_rows; host: cap x D floats of scratch). */
const float *forward_cache_rows(const forward_state *s, int64_t layer, int64_t kv_head, int values, float *host);

/* Keeps rows keep[0..n_keep) (ascending) of one (layer, kv head) cache, through kern->compact. */
void forward_cache_keep(forward_state *s, int64_t layer, int64_t kv_head, const int64_t *keep, int64_t n_keep);

/* Processes tokens[0..n) at positions len .. len+n-1 (n <= max_chunk,
 * len + n <= n_pos); the logits of the chunk stay in s->logits ([n][V]). */
int forward_chunk(forward_state *s, const int32_t *tokens, int64_t n, const forward_observer *obs,
                  kv_err *err);

void forward_free(forward_state *s);

#endif
