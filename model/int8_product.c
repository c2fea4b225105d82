/* int8 products on quantised activations (int8_product.h). */
#include "model/int8_product.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/vectorize.h"
#include "model/formats/ggml_types.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define INT8_AMX 1
#else
#define INT8_AMX 0
#endif

enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q8_0 = 8, STRIP = 2 };

bool int8_supports(uint32_t t)
{
    return t == T_Q8_0 || t == T_Q4_0 || t == T_Q4_1;
}

/* n rows rounded up to whole tiles of 16. */
static int64_t padded(int64_t n)
{
    return (n + INT8_TILE - 1) / INT8_TILE * INT8_TILE;
}

int int8_rows_reserve(int8_rows *r, int64_t n, int64_t in, kv_err *err)
{
    const int64_t n_pad = padded(n), nb = in / INT8_BLOCK;
    int8_rows_free(r);
    r->q = aligned_alloc(64, (size_t)(n_pad * in + 64));
    r->d = calloc((size_t)(n_pad * nb + 1), sizeof *r->d);
    r->s = calloc((size_t)(n_pad * nb + 1), sizeof *r->s);
    if (!r->q || !r->d || !r->s) {
        int8_rows_free(r);
        return kv_fail(err, KV_EFAIL, "--compute int8: out of memory for %lld quantised rows", (long long)n);
    }
    memset(r->q, 0, (size_t)(n_pad * in + 64));
    r->cap_q = (size_t)(n_pad * in), r->cap_b = (size_t)(n_pad * nb);
    return KV_OK;
}

bool int8_rows_fit(const int8_rows *r, int64_t n, int64_t in)
{
    const int64_t n_pad = padded(n);
    return in % INT8_BLOCK == 0 && (size_t)(n_pad * in) <= r->cap_q && (size_t)(n_pad * (in / INT8_BLOCK)) <= r->cap_b;
}

void int8_rows_free(int8_rows *r)
{
    free(r->q), free(r->d), free(r->s);
    memset(r, 0, sizeof *r);
}

/* One block of 32 values: its codes, scale and the codes' sum, in lanes of 16 that vectorise. The
 * largest magnitude is taken without NaN first, then, where the block holds a NaN, again keeping it:
 * a NaN stays (fmaxf would drop it), with its own bits. */
KV_VECTOR_CLONES
static void quantise_block(const float *restrict x, int8_t *restrict q, float *restrict d, int32_t *restrict s)
{
    enum { L = 16 };
    float lane[L] = {0};
    int32_t nan[L] = {0};
    for (int k = 0; k < INT8_BLOCK; k += L)
        for (int l = 0; l < L; l++) {
            const float v = fabsf(x[k + l]);
            lane[l] = v > lane[l] ? v : lane[l];
            nan[l] |= v != v;
        }
    float a = 0.0f;
    int any = 0;
    for (int l = 0; l < L; l++) a = lane[l] > a ? lane[l] : a, any |= nan[l];
    if (any)
        for (int k = 0; k < INT8_BLOCK; k++) {
            const float v = fabsf(x[k]);
            a = v > a ? v : v == v ? a : v;
        }
    const float dd = a / 127.0f, id = a > 0.0f ? 1.0f / dd : 0.0f;
    for (int k = 0; k < INT8_BLOCK; k++) {
        /* to nearest even by the 1.5 * 2^23 trick (it vectorises, nearbyintf does not): the same integer
         * for |v| <= 2^22, and a larger magnitude is clamped to 127 either way */
        const float shifter = 12582912.0f;
        float v = (x[k] * id + shifter) - shifter;
        v = v > 127.0f ? 127.0f : v;
        v = v < -127.0f ? -127.0f : v;
        v = v == v ? v : 0.0f; /* NaN (a not finite): 0, d says it */
        q[k] = (int8_t)(int32_t)v;
    }
    int32_t sum = 0;
    for (int k = 0; k < INT8_BLOCK; k++) sum += q[k];
    *d = dd, *s = sum;
}

/* Row i's codes of block b in r's tile layout. */
static int8_t *code_block(const int8_rows *r, int64_t i, int64_t b, int64_t nb)
{
    return r->q + ((i / INT8_TILE * nb + b) * INT8_TILE + i % INT8_TILE) * INT8_BLOCK;
}

void int8_quantise_begin(int8_rows *r, int64_t n, int64_t in)
{
    const int64_t nb = in / INT8_BLOCK, n_pad = padded(n);
    /* the padding rows: zero codes and scales (rows n .. n_pad of earlier, longer calls) */
    for (int64_t i = n; i < n_pad; i++)
        for (int64_t b = 0; b < nb; b++) memset(code_block(r, i, b, nb), 0, INT8_BLOCK);
    memset(r->d + n * nb, 0, sizeof *r->d * (size_t)((n_pad - n) * nb));
    memset(r->s + n * nb, 0, sizeof *r->s * (size_t)((n_pad - n) * nb));
    r->n = n, r->n_pad = n_pad, r->in = in;
}

void int8_quantise_rows(int8_rows *r, const float *x, int64_t i0, int64_t i1)
{
    const int64_t in = r->in, nb = in / INT8_BLOCK;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t b = 0; b < nb; b++)
            quantise_block(x + i * in + b * INT8_BLOCK, code_block(r, i, b, nb), r->d + i * nb + b, r->s + i * nb + b);
}

void int8_quantise(int8_rows *r, const float *x, int64_t n, int64_t in)
{
    int8_quantise_begin(r, n, in);
    int8_quantise_rows(r, x, 0, n);
}

/* A group of 16 W rows of a packed matrix: the codes as AMX's B operand (8 rows of 64 bytes: row r holds,
 * for each of the 16 W rows c, its codes 4r .. 4r + 3) or as plain rows (the portable kernel's), the same
 * size; the scales dw and the minimums mw. */
typedef struct {
    int8_t *b;     /* [nb][8][64] (amx) */
    int8_t *rows;  /* [16][in] (portable): the same bytes as b */
    float *dw;     /* [nb][16] */
    float *mw;     /* [nb][16] (Q4_1; zero otherwise) */
} group;

/* The W rows an x tile passes before the next tile (a panel of PANEL_BYTES of packed groups, at least one);
 * c, a thread's scratch: the integer products of a tile of x rows with one group for STRIP blocks. */
enum { PANEL_BYTES = 512 << 10, GROUP_BYTES_PER_BLOCK = 512 + 2 * INT8_TILE * sizeof(float) };

static int64_t panel_groups(int64_t nb)
{
    const int64_t g = PANEL_BYTES / (nb * GROUP_BYTES_PER_BLOCK);
    return g > 1 ? g : 1;
}

int64_t int8_panel_rows(int64_t in)
{
    return panel_groups(in / INT8_BLOCK) * INT8_TILE;
}

size_t int8_scratch_bytes(void)
{
    return STRIP * INT8_TILE * INT8_TILE * sizeof(int32_t);
}

double int8_matrix_bytes(int64_t in, int64_t out)
{
    return (double)((out + INT8_TILE - 1) / INT8_TILE) * (double)(in / INT8_BLOCK) * GROUP_BYTES_PER_BLOCK;
}

size_t int8_matrix_file_bytes(const int8_matrix *m)
{
    return (size_t)m->out * (size_t)(m->in / INT8_BLOCK) * ggml_type_get(m->w->type)->size;
}

int int8_matrix_reserve(int8_matrix *m, const weights_ggml *w, int64_t in, int64_t out, kv_err *err)
{
    const int64_t groups = (out + INT8_TILE - 1) / INT8_TILE, nb = in / INT8_BLOCK;
    *m = (int8_matrix){.w = w, .in = in, .out = out, .groups = groups, .minimum = w->type == T_Q4_1};
    m->codes = aligned_alloc(64, (size_t)(groups * nb * 512));
    m->dw = malloc(sizeof(float) * (size_t)(groups * nb * INT8_TILE));
    m->mw = malloc(sizeof(float) * (size_t)(groups * nb * INT8_TILE));
    if (!m->codes || !m->dw || !m->mw) {
        int8_matrix_free(m);
        return kv_fail(err, KV_EFAIL, "--compute int8: out of memory for a packed matrix of %lld x %lld",
                       (long long)out, (long long)in);
    }
    return KV_OK;
}

void int8_matrix_free(int8_matrix *m)
{
    free(m->codes), free(m->dw), free(m->mw);
    memset(m, 0, sizeof *m);
}

static void add_ref(const void *key, const model_mat *w, int64_t in, int64_t out, int8_matrix_ref *refs, int64_t *n,
                    double *bytes)
{
    const weights_ggml *g = (const weights_ggml *)w;
    if (!g || !int8_supports(g->type)) return;
    if (refs) refs[*n] = (int8_matrix_ref){key, g, in, out};
    *n += 1;
    if (bytes) *bytes += int8_matrix_bytes(in, out);
}

int64_t int8_model_matrices(const kv_model *m, int8_matrix_ref *refs, double *bytes)
{
    const model_config *c = &m->cfg;
    int64_t n = 0;
    if (bytes) *bytes = 0;
    if (m->wtype != MODEL_W_GGML) return 0;
    for (int64_t l = 0; l < c->n_layers; l++) {
        const model_layer *y = &m->layers[l];
        const int64_t hd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
        add_ref(y->wq, y->wq, c->dim, hd, refs, &n, bytes);
        add_ref(y->wk, y->wk, c->dim, kd, refs, &n, bytes);
        add_ref(y->wv, y->wv, c->dim, kd, refs, &n, bytes);
        add_ref(y->wo, y->wo_blocks, hd, c->dim, refs, &n, bytes);
        add_ref(y->w_gate, y->w_gate, c->dim, c->ffn_dim, refs, &n, bytes);
        add_ref(y->w_up, y->w_up, c->dim, c->ffn_dim, refs, &n, bytes);
        add_ref(y->w_down, y->w_down, c->ffn_dim, c->dim, refs, &n, bytes);
    }
    add_ref(m->output, m->output, c->dim, c->vocab_size, refs, &n, bytes);
    return n;
}

/* Group k of m. */
static group group_at(const int8_matrix *m, int64_t k)
{
    const int64_t nb = m->in / INT8_BLOCK;
    int8_t *b = m->codes + k * nb * 512;
    return (group){b, b, m->dw + k * nb * INT8_TILE, m->mw + k * nb * INT8_TILE};
}

/* The codes (as int8: Q4_0's q - 8, Q4_1's q) of the block at blk (of type t), as W row c of g, block b,
 * in the layout of the kernel that runs (amx: AMX's B operand, else plain rows). */
static void pack_codes(uint32_t t, const uint8_t *blk, int64_t in, int64_t b, int c, const group *g, bool amx)
{
    int8_t decoded[INT8_BLOCK];
    const int8_t *codes = (const int8_t *)blk + 2;
    if (t != T_Q8_0) {
        const int off = t == T_Q4_1 ? 4 : 2;
        const int8_t bias = t == T_Q4_1 ? 0 : 8;
        for (int j = 0; j < 16; j++) {
            decoded[j] = (int8_t)((blk[off + j] & 0x0F) - bias);
            decoded[j + 16] = (int8_t)((blk[off + j] >> 4) - bias);
        }
        codes = decoded;
    }
    int8_t *dst = g->b + b * 512;
    if (amx)
        for (int r = 0; r < 8; r++) memcpy(dst + r * 64 + c * 4, codes + 4 * r, 4);
    else
        memcpy(g->rows + c * in + b * INT8_BLOCK, codes, INT8_BLOCK);
}

/* W row `row` (nb blocks of type t, `size` bytes each) as row c of g: its codes, and its blocks' F16 scales
 * (and Q4_1's minimums; zero otherwise) widened a run of blocks at a time (half_to_float_array). */
static void pack_row(uint32_t t, const uint8_t *row, int64_t nb, size_t size, int64_t in, int c, const group *g,
                     bool amx)
{
    enum { RUN = 64 };
    kv_half dh[RUN], mh[RUN];
    float df[RUN], mf[RUN];
    for (int64_t b0 = 0; b0 < nb; b0 += RUN) {
        const int64_t n = nb - b0 < RUN ? nb - b0 : RUN;
        for (int64_t b = 0; b < n; b++) {
            const uint8_t *blk = row + (size_t)(b0 + b) * size;
            dh[b] = (kv_half)(blk[0] | (blk[1] << 8));
            mh[b] = t == T_Q4_1 ? (kv_half)(blk[2] | (blk[3] << 8)) : 0;
            pack_codes(t, blk, in, b0 + b, c, g, amx);
        }
        half_to_float_array(dh, df, (size_t)n);
        half_to_float_array(mh, mf, (size_t)n);
        for (int64_t b = 0; b < n; b++) g->dw[(b0 + b) * INT8_TILE + c] = df[b], g->mw[(b0 + b) * INT8_TILE + c] = mf[b];
    }
}

void int8_matrix_pack(int8_matrix *m, int64_t g0, int64_t g1, bool amx)
{
    const int64_t in = m->in, nb = in / INT8_BLOCK;
    const size_t size = ggml_type_get(m->w->type)->size;
    for (int64_t k = g0; k < g1; k++) {
        const group g = group_at(m, k);
        const int64_t o0 = k * INT8_TILE;
        const int cnt = m->out - o0 < INT8_TILE ? (int)(m->out - o0) : INT8_TILE;
        if (cnt < INT8_TILE) { /* the rows after cnt: zero */
            memset(g.b, 0, (size_t)(nb * 512));
            memset(g.dw, 0, sizeof(float) * (size_t)(nb * INT8_TILE));
            memset(g.mw, 0, sizeof(float) * (size_t)(nb * INT8_TILE));
        }
        for (int c = 0; c < cnt; c++)
            pack_row(m->w->type, m->w->data + (size_t)(o0 + c) * (size_t)nb * size, nb, size, in, c, &g, amx);
    }
}

/* acc[r][j] += the terms of blocks 0 .. n of the integer products c[b][r][j], block by block in order:
 * (dw · dx) · isum, then for Q4_1 (mw · dx) · s, each product and sum rounded (the documented order);
 * block b's at c + b * 256; dx and sx: row r's block b at [r * nb + b]. The 16 rows' sums are independent,
 * so they overlap. */
KV_VECTOR_CLONES
static void add_blocks(float acc[INT8_TILE][INT8_TILE], const int32_t *c, const float *dw, const float *mw,
                       const float *dx, const int32_t *sx, int64_t nb, int64_t n, bool minimum)
{
    for (int64_t b = 0; b < n; b++) {
        const int32_t *cb = c + b * INT8_TILE * INT8_TILE;
        const float *dwb = dw + b * INT8_TILE, *mwb = mw + b * INT8_TILE;
        for (int r = 0; r < INT8_TILE; r++) {
            const float d = dx[r * nb + b];
            for (int j = 0; j < INT8_TILE; j++) {
                const float t = dwb[j] * d;
                acc[r][j] = acc[r][j] + t * (float)cb[r * INT8_TILE + j];
            }
            if (minimum) {
                const float s = (float)sx[r * nb + b];
                for (int j = 0; j < INT8_TILE; j++) {
                    const float u = mwb[j] * d;
                    acc[r][j] = acc[r][j] + u * s;
                }
            }
        }
    }
}

/* c[b] = the integer products of a tile of 16 quantised rows (a: its blocks of 16 x 32 codes, one after
 * another) with the group's rows' block b (w, row stride ldw), for blocks b < n: exact, so any vector width
 * gives the same sums. */
KV_VECTOR_CLONES
static void block_products(int32_t *c, const int8_t *a, const int8_t *w, int64_t ldw, int64_t n)
{
    for (int64_t b = 0; b < n; b++)
        for (int r = 0; r < INT8_TILE; r++)
            for (int j = 0; j < INT8_TILE; j++) {
                int32_t s = 0;
                for (int k = 0; k < INT8_BLOCK; k++)
                    s += (int32_t)a[(b * INT8_TILE + r) * INT8_BLOCK + k] * (int32_t)w[j * ldw + b * INT8_BLOCK + k];
                c[(b * INT8_TILE + r) * INT8_TILE + j] = s;
            }
}

/* The portable kernel: y[r][j] (row stride ldy; r < valid, j < cnt) = tile a (16 quantised rows, their
 * scales dx and sums sx at [r * nb + b]) times group g, STRIP blocks at a time through c. */
static void portable_tile_times_group(const int8_t *a, const float *dx, const int32_t *sx, int64_t nb, const group *g,
                                      int64_t in, bool minimum, int32_t *c, float *y, int64_t ldy, int cnt,
                                      int64_t valid)
{
    float acc[INT8_TILE][INT8_TILE] = {{0}};
    for (int64_t b0 = 0; b0 < nb; b0 += STRIP) {
        const int64_t n = nb - b0 < STRIP ? nb - b0 : STRIP;
        block_products(c, a + b0 * 512, g->rows + b0 * INT8_BLOCK, in, n);
        add_blocks(acc, c, g->dw + b0 * INT8_TILE, g->mw + b0 * INT8_TILE, dx + b0, sx + b0, nb, n, minimum);
    }
    for (int64_t r = 0; r < valid; r++) memcpy(y + r * ldy, acc[r], sizeof(float) * (size_t)cnt);
}

#if INT8_AMX
typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

__attribute__((target("amx-tile,amx-int8")))
static void amx_begin(void)
{
    tile_config t;
    memset(&t, 0, sizeof t);
    t.palette = 1;
    for (int k = 0; k < 2; k++) {
        t.rows[k] = INT8_TILE, t.colsb[k] = INT8_TILE * 4;      /* c: 16 x 16 int32 */
        t.rows[k + 2] = INT8_TILE, t.colsb[k + 2] = INT8_BLOCK; /* a: 16 rows of a block's 32 codes */
        t.rows[k + 4] = INT8_BLOCK / 4, t.colsb[k + 4] = 64;    /* b: 8 rows of 16 x 4 codes */
    }
    /* not GCC's _tile_loadconfig: its asm operand names 8 of the 64 bytes, and the stores to the
     * others are then dropped as dead */
    __asm__ volatile("ldtilecfg %0" : : "m"(t));
}

__attribute__((target("amx-tile,amx-int8")))
static void amx_end(void)
{
    _tile_release();
}

#define AMX_TARGET __attribute__((target("amx-tile,amx-int8,avx512f")))

/* A block's integer products on tile c_ (its codes loaded into a_ and b_), then stored into c: the
 * intrinsics paste their tile numbers into the instruction as written, so each set is spelt out. */
#define AMX_DP(c_, a_, b_, a, bt)           \
    do {                                    \
        _tile_zero(c_);                     \
        _tile_loadd(a_, a, INT8_BLOCK);     \
        _tile_loadd(b_, bt, 64);            \
        _tile_dpbssd(c_, a_, b_);           \
    } while (0)
#define AMX_DP0(a, bt) AMX_DP(0, 2, 4, a, bt)
#define AMX_DP1(a, bt) AMX_DP(1, 3, 5, a, bt)
#define AMX_STORE0(c) _tile_stored(0, c, INT8_TILE * 4)
#define AMX_STORE1(c) _tile_stored(1, c, INT8_TILE * 4)

/* acc[r] += block b's terms (add_blocks' order, 16 W rows a vector) from its integer products c. */
static inline __attribute__((always_inline)) AMX_TARGET void amx_add_block(__m512 acc[INT8_TILE], const int32_t *c,
                                                                           const float *dw, const float *mw,
                                                                           const float *dx, const int32_t *sx,
                                                                           int64_t nb, const bool minimum)
{
    const __m512 w = _mm512_loadu_ps(dw), m = minimum ? _mm512_loadu_ps(mw) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < INT8_TILE; r++) {
        const __m512 d = _mm512_set1_ps(dx[r * nb]);
        const __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512(c + r * INT8_TILE));
        acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(w, d), isum));
        if (minimum) acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(m, d), _mm512_set1_ps((float)sx[r * nb])));
    }
}

/* The AMX kernel, portable_tile_times_group's result, as a pipeline over the blocks: in one step block
 * b + 1's products are stored, block b + 2's computed and block b's added, so that no instruction waits
 * for the one before it (the tiles alternate between two sets, c's two halves between blocks); the 16
 * rows' sums stay in registers across the blocks. */
static inline __attribute__((always_inline)) AMX_TARGET void amx_tile_blocks(const int8_t *a, const float *dx,
                                                                             const int32_t *sx, int64_t nb,
                                                                             const group *g, const bool minimum,
                                                                             int32_t *c, float *y, int64_t ldy,
                                                                             int cnt, int64_t valid)
{
    enum { TC = INT8_TILE * INT8_TILE };
    int32_t *c0 = c, *c1 = c + TC;
    __m512 acc[INT8_TILE];
    for (int r = 0; r < INT8_TILE; r++) acc[r] = _mm512_setzero_ps();
    AMX_DP0(a, g->b);
    if (nb > 1) AMX_DP1(a + 512, g->b + 512);
    AMX_STORE0(c0);
    for (int64_t b = 0; b < nb; b += 2) { /* block b in c0, block b + 1 on tile 1 */
        if (b + 1 < nb) AMX_STORE1(c1);
        if (b + 2 < nb) AMX_DP0(a + (b + 2) * 512, g->b + (b + 2) * 512);
        amx_add_block(acc, c0, g->dw + b * INT8_TILE, g->mw + b * INT8_TILE, dx + b, sx + b, nb, minimum);
        if (b + 1 == nb) break;
        if (b + 2 < nb) AMX_STORE0(c0); /* block b + 1 in c1, block b + 2 on tile 0 */
        if (b + 3 < nb) AMX_DP1(a + (b + 3) * 512, g->b + (b + 3) * 512);
        amx_add_block(acc, c1, g->dw + (b + 1) * INT8_TILE, g->mw + (b + 1) * INT8_TILE, dx + b + 1, sx + b + 1, nb,
                      minimum);
    }
    const __mmask16 m = (__mmask16)((1u << cnt) - 1u);
    for (int64_t r = 0; r < valid; r++) _mm512_mask_storeu_ps(y + r * ldy, m, acc[r]);
}

static AMX_TARGET void amx_tile_times_group(const int8_t *a, const float *dx, const int32_t *sx, int64_t nb,
                                            const group *g, bool minimum, int32_t *c, float *y, int64_t ldy, int cnt,
                                            int64_t valid)
{
    if (minimum) amx_tile_blocks(a, dx, sx, nb, g, true, c, y, ldy, cnt, valid);
    else amx_tile_blocks(a, dx, sx, nb, g, false, c, y, ldy, cnt, valid);
}

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

bool int8_amx(void)
{
    const char *force = getenv("KVTRACE_INT8_KERNEL");
    unsigned a, b, c, d;
    if (force && strcmp(force, "portable") == 0) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 25) & 1) || !((b >> 16) & 1))
        return false;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#else
bool int8_amx(void)
{
    return false;
}
#endif

void int8_product(const int8_rows *x, const int8_matrix *w, int64_t o0, int64_t rows, float *y, int64_t ldy,
                  void *scratch, bool amx)
{
    const int64_t in = w->in, nb = in / INT8_BLOCK, per = panel_groups(nb) * INT8_TILE;
    int32_t *c = scratch;
    KV_ASSERT(o0 % INT8_TILE == 0 && x->in == in);
#if INT8_AMX
    if (amx) amx_begin();
#else
    (void)amx;
#endif
    for (int64_t q0 = 0; q0 < rows; q0 += per) { /* a panel of W's groups that every tile of x rows passes */
        const int64_t q1 = rows - q0 < per ? rows : q0 + per;
        for (int64_t i0 = 0; i0 < x->n; i0 += INT8_TILE)
            for (int64_t g0 = q0; g0 < q1; g0 += INT8_TILE) {
                const group g = group_at(w, (o0 + g0) / INT8_TILE);
                const int8_t *a = x->q + i0 / INT8_TILE * nb * 512;
                const int cnt = q1 - g0 < INT8_TILE ? (int)(q1 - g0) : INT8_TILE;
                const int64_t valid = x->n - i0 < INT8_TILE ? x->n - i0 : INT8_TILE;
                const float *dx = x->d + i0 * nb;
                const int32_t *sx = x->s + i0 * nb;
#if INT8_AMX
                if (amx) amx_tile_times_group(a, dx, sx, nb, &g, w->minimum, c, y + i0 * ldy + g0, ldy, cnt, valid);
                else
#endif
                    portable_tile_times_group(a, dx, sx, nb, &g, in, w->minimum, c, y + i0 * ldy + g0, ldy, cnt,
                                              valid);
            }
    }
#if INT8_AMX
    if (amx) amx_end();
#endif
}
