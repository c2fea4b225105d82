/* spm_hf: the merge ranks, added tokens and text rules of a
 * SentencePiece-style tokenizer.json (see spm_hf.h). The merges are an
 * open-addressing hash of (left id, right id) -> rank. */
#include "model/tokenizer/spm_hf.h"

#include <stdlib.h>
#include <string.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 "▁" */

int spm_hf_new(spm_hf **h, kv_err *err)
{
    *h = calloc(1, sizeof **h);
    return *h ? KV_OK : kv_fail(err, KV_EFAIL, "out of memory for a tokenizer");
}

void spm_hf_free(spm_hf *h)
{
    if (!h) return;
    free(h->mkey);
    free(h->mrank);
    for (int32_t i = 0; i < h->n_added; i++) free(h->added[i]);
    free(h->added);
    free(h->added_id);
    free(h);
}

static size_t merge_slot(const spm_hf *h, uint64_t key)
{
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (h->mcap - 1);
    while (h->mkey[i] && h->mkey[i] != key) i = (i + 1) & (h->mcap - 1);
    return i;
}

static uint64_t merge_key(int32_t a, int32_t b)
{
    return (uint64_t)(uint32_t)(a + 1) << 32 | (uint32_t)(b + 1);
}

int32_t spm_hf_rank(const spm_hf *h, int32_t a, int32_t b)
{
    if (!h->mcap || a < 0 || b < 0) return -1;
    size_t i = merge_slot(h, merge_key(a, b));
    return h->mkey[i] ? h->mrank[i] : -1;
}

static int grow(spm_hf *h, kv_err *err)
{
    size_t cap = h->mcap ? h->mcap * 2 : 1024;
    uint64_t *old_key = h->mkey;
    int32_t *old_rank = h->mrank;
    size_t old_cap = h->mcap;
    h->mkey = calloc(cap, sizeof *h->mkey);
    h->mrank = calloc(cap, sizeof *h->mrank);
    if (!h->mkey || !h->mrank) {
        free(h->mkey), free(h->mrank);
        h->mkey = old_key, h->mrank = old_rank;
        return kv_fail(err, KV_EFAIL, "out of memory for the merges");
    }
    h->mcap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old_key[i]) {
            size_t s = merge_slot(h, old_key[i]);
            h->mkey[s] = old_key[i], h->mrank[s] = old_rank[i];
        }
    free(old_key);
    free(old_rank);
    return KV_OK;
}

int spm_hf_add_merge(spm_hf *h, int32_t a, int32_t b, int32_t rank, kv_err *err)
{
    if (2 * (h->n_merges + 1) > h->mcap && grow(h, err)) return KV_EFAIL;
    uint64_t key = merge_key(a, b);
    size_t i = merge_slot(h, key);
    if (h->mkey[i]) return KV_OK; /* the first rank stays */
    h->mkey[i] = key, h->mrank[i] = rank;
    h->n_merges++;
    return KV_OK;
}

int spm_hf_add_token(spm_hf *h, const char *text, int32_t id, kv_err *err)
{
    if (!*text) return KV_OK; /* an empty added token matches nothing */
    char **added = realloc(h->added, (size_t)(h->n_added + 1) * sizeof *added);
    if (added) h->added = added;
    int32_t *ids = realloc(h->added_id, (size_t)(h->n_added + 1) * sizeof *ids);
    if (ids) h->added_id = ids;
    char *copy = added && ids ? strdup(text) : NULL;
    if (!copy) return kv_fail(err, KV_EFAIL, "out of memory for the added tokens");
    h->added[h->n_added] = copy;
    h->added_id[h->n_added++] = id;
    return KV_OK;
}

void spm_hf_finish(spm_hf *h)
{
    for (int32_t i = 1; i < h->n_added; i++) /* insertion sort, longest first (few tokens) */
        for (int32_t k = i; k > 0 && strlen(h->added[k]) > strlen(h->added[k - 1]); k--) {
            char *t = h->added[k];
            int32_t id = h->added_id[k];
            h->added[k] = h->added[k - 1], h->added_id[k] = h->added_id[k - 1];
            h->added[k - 1] = t, h->added_id[k - 1] = id;
        }
}

int32_t spm_hf_added_at(const spm_hf *h, const char *text, size_t i, size_t len, size_t *n)
{
    for (int32_t k = 0; k < h->n_added; k++) {
        size_t m = strlen(h->added[k]);
        if (m <= len - i && memcmp(h->added[k], text + i, m) == 0) {
            *n = m;
            return h->added_id[k];
        }
    }
    return -1;
}

size_t spm_hf_normalize(const spm_hf *h, const char *text, size_t len, bool first, char *out)
{
    size_t o = 0;
    if (len && h->norm_prepend) memcpy(out, SPACE_MARK, 3), o = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ' && h->replace_space)
            memcpy(out + o, SPACE_MARK, 3), o += 3;
        else
            out[o++] = text[i];
    }
    bool marked = o >= 3 && memcmp(out, SPACE_MARK, 3) == 0;
    if (o && !marked && (h->prepend == SPM_PREPEND_ALWAYS || (h->prepend == SPM_PREPEND_FIRST && first))) {
        memmove(out + 3, out, o);
        memcpy(out, SPACE_MARK, 3);
        o += 3;
    }
    return o;
}
