/* Causal grouped-query attention and its exact column sums.
 *
 * attend: a tiled kernel with an online softmax (the flash-attention
 * recurrence), so no [n][T] score matrix exists in device memory. A block
 * takes ROWS query rows of one query head; each warp owns ROWS/WARPS rows.
 * Keys and values stream through shared memory in tiles of 32 (one key per
 * lane for the scores, one head dimension per lane for the outputs). For
 * each row it keeps the running maximum m, the running sum l of exp(s - m)
 * and the unnormalised output, rescaled by exp(m_old - m_new) when m grows;
 * at the end out = acc / l, and (m, l) are written as the row's normalisers.
 *
 * colsum: a second Q.K^T pass. A block owns 32 keys of one query head and
 * walks the chunk's rows that see them, adding exp(s - m) / l in double
 * (per lane, then the warps in a fixed order: deterministic). Reference:
 * core/attn_colsum.c (softmax in float, accumulation in double). */
#include <math.h>

#include "model/cuda/cuda_check.h"

enum { WARPS = 4, ROWS_PER_WARP = 4, ROWS = WARPS * ROWS_PER_WARP, TILE = 32 };

__device__ static float warp_max(float x)
{
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ static float warp_sum(float x)
{
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Loads rows [j0, j0+TILE) of a [cap][D] cache into dst (row stride ld),
 * zeros past `last` (the last row anyone in the block reads). */
__device__ static void load_tile(float *dst, int64_t ld, const float *src, int64_t j0, int64_t last, int64_t D)
{
    for (int64_t e = threadIdx.x; e < TILE * D; e += blockDim.x) {
        const int64_t jj = e / D, d = e % D;
        dst[jj * ld + d] = j0 + jj <= last ? src[(j0 + jj) * D + d] : 0.0f;
    }
}

/* One row of the online softmax against the tile in shared memory. */
template <int DPL>
__device__ static void attend_row(const float *qs, const float *ks, const float *vs, int64_t D, int64_t j0,
                                  int64_t lim, float scale, float &m, float &l, float *acc)
{
    const int lane = threadIdx.x & 31;
    const int64_t j = j0 + lane;
    float s = -INFINITY;
    if (j <= lim) {
        float dot = 0.0f;
        for (int64_t d = 0; d < D; d++) dot += qs[d] * ks[lane * (D + 1) + d];
        s = dot * scale;
    }
    const float mn = fmaxf(m, warp_max(s));
    const float p = j <= lim ? expf(s - mn) : 0.0f;
    const float corr = expf(m - mn); /* 0 on the first tile (m = -inf) */
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int e = 0; e < DPL; e++) acc[e] *= corr;
    const int64_t valid = lim - j0 + 1 < TILE ? lim - j0 + 1 : TILE;
    for (int jj = 0; jj < valid; jj++) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            const int64_t d = lane + 32 * e;
            if (d < D) acc[e] += pj * vs[jj * D + d];
        }
    }
    m = mn;
}

template <int DPL>
__global__ void __launch_bounds__(WARPS * 32) attend_kernel(const float *q, const float *k, const float *v, int64_t cap,
                                                            int64_t H, int64_t K, int64_t D, int64_t pos0,
                                                            const int32_t *n_cached, int64_t n, float *out,
                                                            float *row_max, float *row_sum, float scale)
{
    extern __shared__ float smem[];
    float *ks = smem, *vs = ks + TILE * (D + 1), *qs = vs + TILE * D; /* [TILE][D+1], [TILE][D], [ROWS][D] */
    const int64_t h = blockIdx.y, g = h / (H / K), r0 = (int64_t)blockIdx.x * ROWS;
    const int64_t c0 = n_cached ? n_cached[g] : pos0;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *kh = k + g * cap * D, *vh = v + g * cap * D;
    for (int64_t e = threadIdx.x; e < ROWS * D; e += blockDim.x) {
        const int64_t r = r0 + e / D;
        qs[e] = r < n ? q[r * H * D + h * D + e % D] : 0.0f;
    }
    float m[ROWS_PER_WARP], l[ROWS_PER_WARP], acc[ROWS_PER_WARP][DPL];
#pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
        for (int e = 0; e < DPL; e++) acc[i][e] = 0.0f;
    }
    const int64_t last = c0 + (r0 + ROWS - 1 < n - 1 ? r0 + ROWS - 1 : n - 1);
    for (int64_t j0 = 0; j0 <= last; j0 += TILE) {
        __syncthreads();
        load_tile(ks, D + 1, kh, j0, last, D);
        load_tile(vs, D, vh, j0, last, D);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ROWS_PER_WARP; i++) {
            const int64_t rl = warp * ROWS_PER_WARP + i, r = r0 + rl;
            if (r < n && j0 <= c0 + r) attend_row<DPL>(qs + rl * D, ks, vs, D, j0, c0 + r, scale, m[i], l[i], acc[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; i++) {
        const int64_t r = r0 + warp * ROWS_PER_WARP + i;
        if (r >= n) continue;
        for (int e = 0; e < DPL; e++) {
            const int64_t d = lane + 32 * e;
            if (d < D) out[r * H * D + h * D + d] = acc[i][e] / l[i];
        }
        if (lane == 0) row_max[h * n + r] = m[i], row_sum[h * n + r] = l[i];
    }
}

static int shape_check(const char *what, int64_t H, int64_t K, int64_t D, int64_t n, kv_err *err)
{
    if (D < 1 || D > KVCUDA_MAX_HEAD_DIM || K < 1 || H % K || n > (int64_t)INT32_MAX * ROWS || H > 65535)
        return kv_fail(err, KV_EFAIL, "CUDA %s: unsupported shape H %lld K %lld D %lld (D at most %d) n %lld", what,
                       (long long)H, (long long)K, (long long)D, (int)KVCUDA_MAX_HEAD_DIM, (long long)n);
    return KV_OK;
}

template <int DPL>
static int attend_launch(kvcuda_ctx *c, dim3 grid, size_t smem, const float *q, const float *k, const float *v,
                         int64_t cap, int64_t H, int64_t K, int64_t D, int64_t pos0, const int32_t *n_cached,
                         int64_t n, float *out, float *row_max, float *row_sum, kv_err *err)
{
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(attend_kernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  err);
    const float scale = (float)(1.0 / sqrt((double)D));
    attend_kernel<DPL><<<grid, WARPS * 32, smem, c->stream>>>(q, k, v, cap, H, K, D, pos0, n_cached, n, out, row_max,
                                                              row_sum, scale);
    launchCheck("attend_kernel", err);
    return KV_OK;
}

int kvcuda_attend(kvcuda_ctx *c, const float *q, const float *k, const float *v, int64_t cap, int64_t H, int64_t K,
                  int64_t D, int64_t pos0, const int32_t *n_cached, int64_t n, float *out, float *row_max,
                  float *row_sum, kv_err *err)
{
    if (n < 1) return KV_OK;
    int rc = shape_check("attend", H, K, D, n, err);
    if (rc) return rc;
    dim3 grid((unsigned)((n + ROWS - 1) / ROWS), (unsigned)H);
    size_t smem = sizeof(float) * (size_t)(TILE * (D + 1) + TILE * D + ROWS * D);
    /* head dimensions per lane, a template parameter so the accumulators stay in registers */
    auto launch = D <= 32 ? attend_launch<1> : D <= 64 ? attend_launch<2> : D <= 128 ? attend_launch<4> : attend_launch<8>;
    return launch(c, grid, smem, q, k, v, cap, H, K, D, pos0, n_cached, n, out, row_max, row_sum, err);
}

__global__ void __launch_bounds__(WARPS * 32) colsum_kernel(const float *q, const float *k, int64_t cap, int64_t H,
                                                            int64_t K, int64_t D, int64_t pos0, int64_t n,
                                                            const float *row_max, const float *row_sum,
                                                            double *colsum, int64_t ldc, float scale)
{
    extern __shared__ float smem[];
    __shared__ double part[WARPS][TILE];
    float *ks = smem, *qs = ks + TILE * (D + 1); /* [TILE][D+1], [TILE][D] */
    const int64_t h = blockIdx.y, g = h / (H / K), j0 = (int64_t)blockIdx.x * TILE, cols = pos0 + n;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t j = j0 + lane;
    load_tile(ks, D + 1, k + g * cap * D, j0, cols - 1, D);
    double acc = 0.0;
    for (int64_t rb = j0 - pos0 > 0 ? j0 - pos0 : 0; rb < n; rb += TILE) {
        __syncthreads();
        for (int64_t e = threadIdx.x; e < TILE * D; e += blockDim.x) {
            const int64_t r = rb + e / D;
            qs[e] = r < n ? q[r * H * D + h * D + e % D] : 0.0f;
        }
        __syncthreads();
        for (int64_t i = warp; i < TILE && rb + i < n; i += WARPS) {
            const int64_t r = rb + i;
            if (j > pos0 + r || j >= cols) continue;
            float dot = 0.0f;
            for (int64_t d = 0; d < D; d++) dot += qs[i * D + d] * ks[lane * (D + 1) + d];
            acc += (double)expf(dot * scale - row_max[h * n + r]) / (double)row_sum[h * n + r];
        }
    }
    part[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && j < cols) {
        double t = 0.0;
        for (int w = 0; w < WARPS; w++) t += part[w][lane];
        colsum[h * ldc + j] += t;
    }
}

int kvcuda_colsum(kvcuda_ctx *c, const float *q, const float *k, int64_t cap, int64_t H, int64_t K, int64_t D,
                  int64_t pos0, int64_t n, const float *row_max, const float *row_sum, double *colsum, int64_t ldc,
                  kv_err *err)
{
    if (n < 1) return KV_OK;
    int rc = shape_check("colsum", H, K, D, n, err);
    if (rc) return rc;
    const int64_t cols = pos0 + n;
    dim3 grid((unsigned)((cols + TILE - 1) / TILE), (unsigned)H);
    size_t smem = sizeof(float) * (size_t)(TILE * (D + 1) + TILE * D);
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(colsum_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err);
    const float scale = (float)(1.0 / sqrt((double)D));
    colsum_kernel<<<grid, WARPS * 32, smem, c->stream>>>(q, k, cap, H, K, D, pos0, n, row_max, row_sum, colsum, ldc,
                                                         scale);
    launchCheck("colsum_kernel", err);
    return KV_OK;
}
