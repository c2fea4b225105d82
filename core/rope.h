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

typedef enum { ROPE_INTERLEAVED, ROPE_NEOX } rope_style;

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
#endif
