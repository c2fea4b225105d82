/* rope: rotary position embedding on one head vector, both pair layouts.
 *
 * Pair p (0 <= p < D/2) rotates by pos * theta^(-2p/D):
 *   interleaved: dims (2p, 2p+1)      (llama-architecture GGUF, llama2.c)
 *   neox:        dims (p, p + D/2)    (HF checkpoints, qwen2/qwen3 GGUF)
 * Angles are formed in double, so large positions stay accurate. */
#ifndef KV_ROPE_H
#define KV_ROPE_H

#include <stdbool.h>
#include <stdint.h>

/* rope_style and rope_spec (below): public (policy_view.rope), include/kvtrace/rope.h */
#include "kvtrace/rope.h"

/* Parses "interleaved" / "neox"; false if neither. */
bool rope_style_parse(const char *s, rope_style *out);

/* The two dims of pair p. */
void rope_pair_dims(rope_style style, int64_t D, int64_t p, int64_t *a, int64_t *b);

/* Rotates x[D] (D even) in place for position pos. */
void rope_apply(float *x, int64_t D, int64_t pos, double theta, rope_style style);

/* Precomputed cos/sin for positions [0, T): table[t][p][2] (cos, sin),
 * T * D floats. rope_table_apply rotates x[D] with the row of position t. */
void rope_table_fill(float *table, int64_t T, int64_t D, double theta);

/* The same with frequency scaling: pair p turns at theta^(-2p/D) / div[p]
 * (div [D/2], all > 0; NULL: no scaling). llama.cpp's rope_freqs.weight
 * holds such divisors ("freq_factors"), and so do Llama 3.x's llama3 rules. */
void rope_table_fill_scaled(float *table, int64_t T, int64_t D, double theta, const double *div);

/* Llama 3.x "llama3" scaling as divisors div[D/2] (Hugging Face
 * _compute_llama3_parameters, llama.cpp's convert): wavelength
 * w = 2 pi / f of pair p; w < orig/high: 1; w > orig/low: factor; between:
 * 1 / ((1 - s)/factor + s), s = (orig/w - low) / (high - low). */
void rope_llama3_divisors(double *div, int64_t D, double theta, double factor, double low,
                          double high, double orig_ctx);
void rope_table_apply(float *x, int64_t D, rope_style style, const float *table, int64_t t);

/* A trace's or model's RoPE as a value: pair p turns at theta^(-2p/D) /
 * div[p] radians per position (div [D/2] or NULL: no scaling; a trace's
 * rope_freq_factors). theta 0: unknown, and the functions below then rotate
 * by nothing. An odd D leaves its last dim alone (D/2 pairs). */

double rope_freq(const rope_spec *r, int64_t D, int64_t p);

/* Rotates x[D] (double) by angle pos * freq of each pair: rope_apply's
 * rotation for pos >= 0, and with pos = -t the inverse of RoPE at position
 * t (a post-RoPE query back to its pre-RoPE form). */
void rope_rotate_d(const rope_spec *r, double *x, int64_t D, double pos);

/* The mean rotation over positions p0 .. p0+n-1 (n >= 1) as one (cos, sin)
 * pair per RoPE pair: cs[2p] = mean cos(t f_p), cs[2p+1] = mean sin(t f_p),
 * summed in closed form (Dirichlet kernel), so any n costs O(D). */
void rope_mean_rotation(const rope_spec *r, int64_t D, int64_t p0, int64_t n, double *cs);

/* x = R x for R the per-pair matrices [[c, -s], [s, c]] of cs (as above). */
void rope_pairs_apply(rope_style style, const double *cs, double *x, int64_t D);
#endif
