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

enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q8_0 = 8 };

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

/* One block of 32 values: its codes, scale and the codes' sum. */
KV_VECTOR_CLONES
static void quantise_block(const float *x, int8_t *q, float *d, int32_t *s)
{
    float a = 0.0f;
    for (int k = 0; k < INT8_BLOCK; k++) { /* a NaN stays (fmaxf would drop it) */
        const float v = fabsf(x[k]);
        a = v > a ? v : v == v ? a : v;
    }
    const float dd = a / 127.0f, id = a > 0.0f ? 1.0f / dd : 0.0f;
    int32_t sum = 0;
    for (int k = 0; k < INT8_BLOCK; k++) {
        float v = nearbyintf(x[k] * id);
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f; /* NaN (a not finite): 0, d says it */
        q[k] = (int8_t)v;
        sum += q[k];
    }
    *d = dd, *s = sum;
}

void int8_quantise_begin(int8_rows *r, int64_t n, int64_t in)
{
    const int64_t nb = in / INT8_BLOCK, n_pad = padded(n);
    /* the padding rows: zero codes and scales (rows n .. n_pad of earlier, longer calls) */
    memset(r->q + n * in, 0, (size_t)((n_pad - n) * in));
    memset(r->d + n * nb, 0, sizeof *r->d * (size_t)((n_pad - n) * nb));
    memset(r->s + n * nb, 0, sizeof *r->s * (size_t)((n_pad - n) * nb));
    r->n = n, r->n_pad = n_pad, r->in = in;
}

void int8_quantise_rows(int8_rows *r, const float *x, int64_t i0, int64_t i1)
{
    const int64_t in = r->in, nb = in / INT8_BLOCK;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t b = 0; b < nb; b++)
            quantise_block(x + i * in + b * INT8_BLOCK, r->q + i * in + b * INT8_BLOCK, r->d + i * nb + b,
                           r->s + i * nb + b);
}

void int8_quantise(int8_rows *r, const float *x, int64_t n, int64_t in)
{
    int8_quantise_begin(r, n, in);
    int8_quantise_rows(r, x, 0, n);
}

/* A group of 16 W rows, repacked per block: the codes as AMX's B operand (8 rows of 64 bytes: row
 * r holds, for each of the 16 W rows c, its codes 4r .. 4r + 3) or as plain rows (the portable
 * kernel's): only the running kernel's is written; the scales dw and the minimums mw. */
typedef struct {
    int8_t *b;     /* [nb][8][64] */
    int8_t *rows;  /* [16][in] */
    float *dw;     /* [nb][16] */
    float *mw;     /* [nb][16] (Q4_1; zero otherwise) */
} group;

size_t int8_scratch_bytes(int64_t in)
{
    const size_t nb = (size_t)(in / INT8_BLOCK);
    return 2 * nb * 512 + 2 * nb * INT8_TILE * sizeof(float) + 64;
}

static group group_at(void *scratch, int64_t nb)
{
    int8_t *b = scratch;
    float *dw = (float *)(b + 2 * nb * 512);
    return (group){b, b + nb * 512, dw, dw + nb * INT8_TILE};
}

/* The codes (as int8: Q4_0's q - 8, Q4_1's q) and scales of W's row o, block b, as W row c of g, in the
 * layout of the kernel that runs (amx: AMX's B operand, else plain rows). */
static void pack_block(const weights_ggml *w, int64_t in, int64_t o, int64_t b, int c, const group *g, int64_t nb,
                       bool amx)
{
    int8_t codes[INT8_BLOCK];
    float d = 0.0f, m = 0.0f;
    const uint8_t *blk = w->data + ((size_t)o * (size_t)nb + (size_t)b) * ggml_type_get(w->type)->size;
    half_le_bytes_to_float(blk, &d, 1);
    if (w->type == T_Q8_0) {
        memcpy(codes, blk + 2, INT8_BLOCK);
    } else {
        const int off = w->type == T_Q4_1 ? 4 : 2;
        const int8_t bias = w->type == T_Q4_1 ? 0 : 8;
        if (w->type == T_Q4_1) half_le_bytes_to_float(blk + 2, &m, 1);
        for (int j = 0; j < 16; j++) {
            codes[j] = (int8_t)((blk[off + j] & 0x0F) - bias);
            codes[j + 16] = (int8_t)((blk[off + j] >> 4) - bias);
        }
    }
    int8_t *dst = g->b + b * 512;
    if (amx)
        for (int r = 0; r < 8; r++)
            for (int j = 0; j < 4; j++) dst[r * 64 + c * 4 + j] = codes[4 * r + j];
    else
        memcpy(g->rows + c * in + b * INT8_BLOCK, codes, INT8_BLOCK);
    g->dw[b * INT8_TILE + c] = d, g->mw[b * INT8_TILE + c] = m;
}

/* W rows o0 .. o0 + cnt (cnt <= 16) repacked into g for the kernel that runs; the rows after cnt are zero. */
static void pack_group(const weights_ggml *w, int64_t in, int64_t o0, int cnt, const group *g, bool amx)
{
    const int64_t nb = in / INT8_BLOCK;
    memset(amx ? g->b : g->rows, 0, (size_t)(nb * 512));
    memset(g->dw, 0, sizeof(float) * (size_t)(2 * nb * INT8_TILE));
    for (int c = 0; c < cnt; c++)
        for (int64_t b = 0; b < nb; b++) pack_block(w, in, o0 + c, b, c, g, nb, amx);
}

/* acc[16][16] += the block's terms, in the documented order: (dw · dx) · isum, then for Q4_1
 * (mw · dx) · s, each product and sum rounded. */
KV_VECTOR_CLONES
static void add_block(float acc[INT8_TILE][INT8_TILE], const int32_t c[INT8_TILE][INT8_TILE], const float *dw,
                      const float *mw, const float *dx, const int32_t *sx, int64_t nb, bool minimum)
{
    for (int r = 0; r < INT8_TILE; r++) {
        const float d = dx[r * nb];
        for (int j = 0; j < INT8_TILE; j++) {
            const float t = dw[j] * d;
            acc[r][j] = acc[r][j] + t * (float)c[r][j];
        }
        if (minimum) {
            const float s = (float)sx[r * nb];
            for (int j = 0; j < INT8_TILE; j++) {
                const float u = mw[j] * d;
                acc[r][j] = acc[r][j] + u * s;
            }
        }
    }
}

/* c = the integer products of 16 quantised rows (a, row stride lda) with the group's rows' block (w,
 * row stride ldw): exact, so any vector width gives the same sums. */
KV_VECTOR_CLONES
static void block_products(int32_t c[INT8_TILE][INT8_TILE], const int8_t *a, int64_t lda, const int8_t *w,
                           int64_t ldw)
{
    for (int r = 0; r < INT8_TILE; r++)
        for (int j = 0; j < INT8_TILE; j++) {
            int32_t s = 0;
            for (int k = 0; k < INT8_BLOCK; k++) s += (int32_t)a[r * lda + k] * (int32_t)w[j * ldw + k];
            c[r][j] = s;
        }
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
    t.rows[0] = INT8_TILE, t.colsb[0] = INT8_TILE * 4; /* c: 16 x 16 int32 */
    t.rows[1] = INT8_TILE, t.colsb[1] = INT8_BLOCK;    /* a: 16 rows of one block's 32 codes */
    t.rows[2] = INT8_BLOCK / 4, t.colsb[2] = 64;       /* b: 8 rows of 16 x 4 codes */
    /* not GCC's _tile_loadconfig: its asm operand names 8 of the 64 bytes, and the stores to the
     * others are then dropped as dead */
    __asm__ volatile("ldtilecfg %0" : : "m"(t));
}

__attribute__((target("amx-tile,amx-int8")))
static void amx_end(void)
{
    _tile_release();
}

__attribute__((target("amx-tile,amx-int8")))
static void amx_block_products(int32_t c[INT8_TILE][INT8_TILE], const int8_t *a, int64_t lda, const int8_t *bt)
{
    _tile_zero(0);
    _tile_loadd(1, a, lda);
    _tile_loadd(2, bt, 64);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, c, INT8_TILE * 4);
}

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

bool int8_amx(void)
{
    const char *force = getenv("KVTRACE_INT8_KERNEL");
    unsigned a, b, c, d;
    if (force && strcmp(force, "portable") == 0) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 25) & 1)) return false;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#else
bool int8_amx(void)
{
    return false;
}
#endif

void int8_product(const int8_rows *x, const weights_ggml *w, int64_t in, int64_t o0, int64_t rows, float *y,
                  int64_t ldy, void *scratch, bool amx)
{
    const int64_t nb = in / INT8_BLOCK;
    const bool minimum = w->type == T_Q4_1;
    const group g = group_at(scratch, nb);
    _Alignas(64) int32_t c[INT8_TILE][INT8_TILE];
    float acc[INT8_TILE][INT8_TILE];
#if INT8_AMX
    if (amx) amx_begin();
#else
    (void)amx;
#endif
    for (int64_t g0 = 0; g0 < rows; g0 += INT8_TILE) {
        const int cnt = rows - g0 < INT8_TILE ? (int)(rows - g0) : INT8_TILE;
        pack_group(w, in, o0 + g0, cnt, &g, amx);
        for (int64_t i0 = 0; i0 < x->n; i0 += INT8_TILE) {
            memset(acc, 0, sizeof acc);
            for (int64_t b = 0; b < nb; b++) {
                const int8_t *a = x->q + i0 * in + b * INT8_BLOCK, *bt = g.b + b * 512;
#if INT8_AMX
                if (amx) amx_block_products(c, a, in, bt);
                else
#endif
                    block_products(c, a, in, g.rows + b * INT8_BLOCK, in);
                add_block(acc, (const int32_t(*)[INT8_TILE])c, g.dw + b * INT8_TILE, g.mw + b * INT8_TILE,
                          x->d + i0 * nb + b, x->s + i0 * nb + b, nb, minimum);
            }
            const int64_t valid = x->n - i0 < INT8_TILE ? x->n - i0 : INT8_TILE;
            for (int64_t r = 0; r < valid; r++) memcpy(y + (i0 + r) * ldy + g0, acc[r], sizeof(float) * (size_t)cnt);
        }
    }
#if INT8_AMX
    if (amx) amx_end();
#endif
}
