/* spm_hf: what a SentencePiece-style Hugging Face tokenizer.json (BPE with
 * byte_fallback, "▁" for spaces: Llama 2, Mistral) says beyond the pieces,
 * as the `tokenizers` library applies it:
 *   - the merges by rank: the adjacent pair with the lowest rank merges
 *     first (ties: leftmost), and only pairs that are merges merge;
 *   - the added tokens, matched in the raw text before anything else
 *     (leftmost, then longest);
 *   - the normaliser (Prepend "▁", Replace " " -> "▁", each on every text
 *     segment between added tokens) or the Metaspace pre-tokenizer
 *     (replacement "▁", prepend_scheme always / first / never, split);
 *   - the post-processor's template (TemplateProcessing: the special ids
 *     before and after the text);
 *   - the decoder (Replace "▁" -> " ", ByteFallback, Fuse, Strip; or
 *     Metaspace): how many leading spaces decoding removes.
 * Filled by vocab_hf.c, used by tokenizer.c; owned by the kv_vocab. */
#ifndef KV_SPM_HF_H
#define KV_SPM_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"

#define SPM_HF_TEMPLATE_MAX 8

typedef enum { SPM_PREPEND_NEVER, SPM_PREPEND_FIRST, SPM_PREPEND_ALWAYS } spm_prepend;

typedef struct spm_hf {
    uint64_t *mkey;          /* merge hash: [mcap] (a + 1) << 32 | (b + 1), 0 empty */
    int32_t *mrank;          /* [mcap] */
    size_t mcap, n_merges;
    char **added;            /* added tokens' text, longest first */
    int32_t *added_id;
    int32_t n_added;
    bool norm_prepend;       /* normaliser Prepend "▁" (every non-empty segment) */
    bool replace_space;      /* ' ' -> "▁" (normaliser Replace, or Metaspace) */
    spm_prepend prepend;     /* Metaspace prepend_scheme (when not SPM_PREPEND_NEVER) */
    bool split;              /* Metaspace split: words start at each "▁" */
    bool ignore_merges;      /* a word that is a piece is that token */
    int32_t prefix[SPM_HF_TEMPLATE_MAX], suffix[SPM_HF_TEMPLATE_MAX];
    int n_prefix, n_suffix;
    int strip_start;         /* decoder: leading ' ' removed from the decoded text */
    bool strip_first_token;  /* decoder Metaspace: from the first token's text only */
    bool byte_fallback;      /* decoder ByteFallback: "<0xHH>" runs as bytes (else as text) */
} spm_hf;

int spm_hf_new(spm_hf **h, kv_err *err);
void spm_hf_free(spm_hf *h);

/* Merge (a, b) with rank `rank`; a pair given again keeps its first rank. */
int spm_hf_add_merge(spm_hf *h, int32_t a, int32_t b, int32_t rank, kv_err *err);

/* The rank of merging tokens a and b, or -1. */
int32_t spm_hf_rank(const spm_hf *h, int32_t a, int32_t b);

/* An added token matched in the raw text (call spm_hf_finish after the last). */
int spm_hf_add_token(spm_hf *h, const char *text, int32_t id, kv_err *err);
void spm_hf_finish(spm_hf *h);

/* The added token at text[i..len) (the longest), its id and *n its length; or -1. */
int32_t spm_hf_added_at(const spm_hf *h, const char *text, size_t i, size_t len, size_t *n);

/* A text segment (no added token in it) as the model reads it into out
 * (room for 3 * len + 3 bytes): the normaliser and the Metaspace
 * replacement and prepend; `first`: the segment starts the text. Returns
 * the length written. */
size_t spm_hf_normalize(const spm_hf *h, const char *text, size_t len, bool first, char *out);

#endif
