/* bpe: a byte-level BPE tokenizer's tables and how a loader fills them
 * (bpe.h); encoding is bpe_encode.c. Pieces and merges are open-addressing
 * hash tables (FNV-1a). */
#include "model/tokenizer/bpe_model.h"
#include "core/utf8.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

uint64_t bpe_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int bpe_byte_char(unsigned char c, char out[2])
{
    unsigned cp = c;
    if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) {
        /* the 68 others, in byte order, become U+0100.. */
        cp = 256 + (c <= 32 ? c : c <= 160 ? c - 94u : 67u);
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

int bpe_new(bpe_model **b, int32_t n, kv_err *err)
{
    *b = calloc(1, sizeof **b);
    size_t cap = 16;
    while (*b && cap < (size_t)n * 2) cap *= 2;
    if (*b) {
        (*b)->n = n;
        (*b)->cap = cap;
        (*b)->pieces = calloc((size_t)n, sizeof *(*b)->pieces);
        (*b)->slot = calloc(cap, sizeof *(*b)->slot);
    }
    if (!*b || !(*b)->pieces || !(*b)->slot) {
        bpe_free(*b);
        *b = NULL;
        return kv_fail(err, KV_EFAIL, "out of memory for a vocabulary of %d tokens", (int)n);
    }
    return KV_OK;
}

void bpe_free(bpe_model *b)
{
    if (!b) return;
    for (int32_t i = 0; b->pieces && i < b->n; i++) free(b->pieces[i]);
    for (int32_t i = 0; i < b->n_added; i++) free(b->added[i].text);
    free(b->pieces);
    free(b->slot);
    free(b->mkey);
    free(b->mrank);
    free(b->mres);
    free(b->added);
    pretok_free(b->pre);
    free(b->where);
    free(b);
}

int32_t bpe_find(const bpe_model *b, const char *s, size_t len)
{
    for (size_t i = bpe_hash(s, len) & (b->cap - 1);; i = (i + 1) & (b->cap - 1)) {
        int32_t id = b->slot[i] - 1;
        if (id < 0) return -1;
        if (strlen(b->pieces[id]) == len && memcmp(b->pieces[id], s, len) == 0) return id;
    }
}

int bpe_set_piece(bpe_model *b, int32_t id, const char *piece, kv_err *err)
{
    if (id < 0 || id >= b->n || b->pieces[id])
        return kv_fail(err, KV_EFAIL, "bpe_set_piece: id %d outside [0, %d) or set twice", (int)id, (int)b->n);
    size_t len = strlen(piece);
    if (bpe_find(b, piece, len) >= 0) return KV_OK; /* a duplicate piece: the first id keeps it */
    if (!(b->pieces[id] = strdup(piece))) return kv_fail(err, KV_EFAIL, "out of memory");
    size_t i = bpe_hash(piece, len) & (b->cap - 1);
    while (b->slot[i]) i = (i + 1) & (b->cap - 1);
    b->slot[i] = id + 1;
    return KV_OK;
}

static size_t merge_slot(const bpe_model *b, uint64_t key)
{
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (b->mcap - 1);
    while (b->mkey[i] && b->mkey[i] != key) i = (i + 1) & (b->mcap - 1);
    return i;
}

int32_t bpe_merge_rank(const bpe_model *b, int32_t a, int32_t c, int32_t *result)
{
    if (!b->mcap) return -1;
    size_t i = merge_slot(b, (uint64_t)(a + 1) << 32 | (uint32_t)(c + 1));
    if (!b->mkey[i]) return -1;
    *result = b->mres[i];
    return b->mrank[i];
}

static int grow_merges(bpe_model *b, kv_err *err)
{
    size_t cap = b->mcap ? b->mcap * 2 : 1024;
    uint64_t *key = calloc(cap, sizeof *key);
    int32_t *rank = malloc(cap * sizeof *rank), *res = malloc(cap * sizeof *res);
    if (!key || !rank || !res) {
        free(key), free(rank), free(res);
        return kv_fail(err, KV_EFAIL, "out of memory for %zu merges", b->n_merges);
    }
    bpe_model nb = {.mkey = key, .mrank = rank, .mres = res, .mcap = cap};
    for (size_t i = 0; i < b->mcap; i++) {
        if (!b->mkey[i]) continue;
        size_t j = merge_slot(&nb, b->mkey[i]);
        key[j] = b->mkey[i], rank[j] = b->mrank[i], res[j] = b->mres[i];
    }
    free(b->mkey), free(b->mrank), free(b->mres);
    b->mkey = key, b->mrank = rank, b->mres = res, b->mcap = cap;
    return KV_OK;
}

int bpe_add_merge(bpe_model *b, const char *a, const char *c, const char *where, kv_err *err)
{
    int32_t ia = bpe_find(b, a, strlen(a)), ic = bpe_find(b, c, strlen(c));
    size_t la = strlen(a), lc = strlen(c);
    char *joined = malloc(la + lc + 1);
    if (!joined) return kv_fail(err, KV_EFAIL, "out of memory");
    memcpy(joined, a, la);
    memcpy(joined + la, c, lc + 1);
    int32_t res = bpe_find(b, joined, la + lc);
    free(joined);
    if (ia < 0 || ic < 0 || res < 0)
        return kv_fail(err, KV_EINPUT, "%s: merges[%zu] '%.40s %.40s' names %s that is not in the vocabulary", where,
                       b->n_merges, a, c, res < 0 && ia >= 0 && ic >= 0 ? "a result" : "a token");
    if ((b->n_merges + 1) * 2 > b->mcap && grow_merges(b, err)) return err->code;
    size_t i = merge_slot(b, (uint64_t)(ia + 1) << 32 | (uint32_t)(ic + 1));
    if (b->mkey[i]) return KV_OK; /* a repeated merge keeps its first rank */
    b->mkey[i] = (uint64_t)(ia + 1) << 32 | (uint32_t)(ic + 1);
    b->mrank[i] = (int32_t)b->n_merges++;
    b->mres[i] = res;
    return KV_OK;
}

int bpe_add_token(bpe_model *b, const char *text, int32_t id, int flags, kv_err *err)
{
    if (!text[0]) return KV_OK; /* an empty added token can never match */
    bpe_added *a = realloc(b->added, (size_t)(b->n_added + 1) * sizeof *a);
    if (!a) return kv_fail(err, KV_EFAIL, "out of memory");
    b->added = a;
    if (!(a[b->n_added].text = strdup(text))) return kv_fail(err, KV_EFAIL, "out of memory");
    a[b->n_added].len = strlen(text);
    a[b->n_added].flags = flags;
    a[b->n_added++].id = id;
    return KV_OK;
}

void bpe_set_pretok(bpe_model *b, pretok *p)
{
    pretok_free(b->pre);
    b->pre = p;
}

void bpe_set_options(bpe_model *b, bool nfc, bool ignore_merges)
{
    b->nfc = nfc;
    b->ignore_merges = ignore_merges;
}

int bpe_set_template(bpe_model *b, const int32_t *prefix, int n_prefix, const int32_t *suffix, int n_suffix,
                     kv_err *err)
{
    if (n_prefix > BPE_TEMPLATE_MAX || n_suffix > BPE_TEMPLATE_MAX)
        return kv_fail(err, KV_EINPUT, "the post-processor adds more than %d tokens", BPE_TEMPLATE_MAX);
    memcpy(b->prefix, prefix, (size_t)n_prefix * sizeof *prefix);
    memcpy(b->suffix, suffix, (size_t)n_suffix * sizeof *suffix);
    b->n_prefix = n_prefix, b->n_suffix = n_suffix;
    return KV_OK;
}

static int added_cmp(const void *x, const void *y)
{
    const bpe_added *a = x, *c = y;
    unsigned char fa = (unsigned char)a->text[0], fc = (unsigned char)c->text[0];
    if (fa != fc) return fa < fc ? -1 : 1;
    return (a->len < c->len) - (a->len > c->len);
}

int bpe_finish(bpe_model *b, const char *where, kv_err *err)
{
    for (int c = 0; c < 256; c++) {
        char ch[2];
        int n = bpe_byte_char((unsigned char)c, ch);
        b->byte_tok[c] = bpe_find(b, ch, (size_t)n); /* -1: refused when a text needs it */
    }
    if (!(b->where = strdup(where))) return kv_fail(err, KV_EFAIL, "out of memory");
    for (int32_t k = 0; b->nfc && k < b->n_added; k++) {
        if (!(b->added[k].flags & BPE_NORMALIZED)) continue;
        utf8proc_uint8_t *t = utf8proc_NFC((const utf8proc_uint8_t *)b->added[k].text);
        if (!t) return kv_fail(err, KV_EFAIL, "out of memory");
        free(b->added[k].text);
        b->added[k].text = (char *)t, b->added[k].len = strlen((char *)t);
        b->n_normalized++;
    }
    if (b->n_added) qsort(b->added, (size_t)b->n_added, sizeof *b->added, added_cmp);
    int32_t k = 0;
    for (int c = 0; c <= 256; c++) {
        while (k < b->n_added && (unsigned char)b->added[k].text[0] < c) k++;
        b->first[c] = k;
    }
    return KV_OK;
}

int64_t bpe_utf8_invalid(const char *text, size_t len)
{
    return kv_utf8_invalid(text, len);
}
