/* bpe_encode: byte-level BPE encoding (see bpe.h).
 *
 * A word (one pre-tokenized piece) starts as one symbol per byte, the byte's
 * one-character token; adjacent pairs that have a merge go into a binary
 * min-heap ordered by (rank, position). A popped pair is stale when either
 * side has changed since it was pushed (their token ids are compared). The
 * words' results are cached for the call: (token, end byte) per token, keyed
 * by a copy of the word's bytes, so that the cache outlives the segment (and
 * its normalised copy) the word came from. */
#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/nfc_map.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct {
    int32_t id, prev, next;
    int32_t end; /* the symbol covers bytes [start of its first, end) of the word */
} sym;

typedef struct {
    int32_t rank, left, right, lid, rid, res;
} pair;

typedef struct {
    uint64_t hash;
    int64_t word; /* the word's bytes: words[word..word + len); -1: empty slot */
    size_t len;
    int64_t at; /* first (id, end) in pool */
    int32_t n;
} cache_entry;

typedef struct {
    const bpe_model *b;
    const char *text;  /* the segment being split (normalised when map) */
    const nfc_map *map; /* offsets in text back to the segment, or NULL */
    int64_t seg_start; /* the segment's offset in the input */
    size_t sub;        /* the piece being split starts at text + sub */
    bpe_out *out;
    kv_err *err;
    sym *s;
    pair *heap;
    size_t s_cap, h_n, h_cap;
    cache_entry *cache;
    size_t c_cap, c_n;
    int32_t *pool; /* pairs (id, end) */
    int64_t p_n, p_cap;
    char *words; /* the cached words' bytes */
    size_t w_n, w_cap;
} enc;

static int out_push(enc *e, int32_t id, int64_t start, int64_t end)
{
    bpe_out *o = e->out;
    if (o->n == o->cap) {
        int64_t cap = o->cap ? o->cap * 2 : 256;
        int32_t *ids = realloc(o->ids, (size_t)cap * sizeof *ids);
        if (ids) o->ids = ids;
        int64_t *off = realloc(o->off, (size_t)cap * 2 * sizeof *off);
        if (off) o->off = off;
        if (!ids || !off) return kv_fail(e->err, KV_EFAIL, "out of memory");
        o->cap = cap;
    }
    o->ids[o->n] = id;
    o->off[2 * o->n] = start, o->off[2 * o->n + 1] = end;
    o->n++;
    return KV_OK;
}

static bool pair_before(const pair *a, const pair *c)
{
    return a->rank < c->rank || (a->rank == c->rank && a->left < c->left);
}

static int heap_push(enc *e, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return KV_OK;
    int32_t res, rank = bpe_merge_rank(e->b, e->s[left].id, e->s[right].id, &res);
    if (rank < 0) return KV_OK;
    if (e->h_n == e->h_cap) {
        size_t cap = e->h_cap ? e->h_cap * 2 : 64;
        pair *h = realloc(e->heap, cap * sizeof *h);
        if (!h) return kv_fail(e->err, KV_EFAIL, "out of memory");
        e->heap = h, e->h_cap = cap;
    }
    pair p = {rank, left, right, e->s[left].id, e->s[right].id, res};
    size_t i = e->h_n++;
    for (; i > 0 && pair_before(&p, &e->heap[(i - 1) / 2]); i = (i - 1) / 2) e->heap[i] = e->heap[(i - 1) / 2];
    e->heap[i] = p;
    return KV_OK;
}

static pair heap_pop(enc *e)
{
    pair top = e->heap[0], last = e->heap[--e->h_n];
    size_t i = 0, n = e->h_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&e->heap[c + 1], &e->heap[c])) c++;
        if (!pair_before(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

/* The mapped spelling of word[0..len) into buf (2 * len bytes); its length. */
static size_t map_word(const char *w, size_t len, char *buf)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) o += (size_t)bpe_byte_char((unsigned char)w[i], buf + o);
    return o;
}

/* Merges word[0..len) into pool entries (id, end); returns the count, -1 when
 * out of memory, -2 - c when byte c has no token. */
static int32_t merge_word(enc *e, const char *w, size_t len)
{
    if (len > e->s_cap) {
        sym *s = realloc(e->s, len * sizeof *s);
        if (!s) return -1;
        e->s = s, e->s_cap = len;
    }
    for (size_t i = 0; i < len; i++)
        if (e->b->byte_tok[(unsigned char)w[i]] < 0) return -2 - (unsigned char)w[i];
    for (size_t i = 0; i < len; i++)
        e->s[i] = (sym){e->b->byte_tok[(unsigned char)w[i]], (int32_t)i - 1,
                        i + 1 < len ? (int32_t)i + 1 : -1, (int32_t)i + 1};
    e->h_n = 0;
    for (size_t i = 1; i < len; i++)
        if (heap_push(e, (int32_t)i - 1, (int32_t)i)) return -1;
    while (e->h_n) {
        pair p = heap_pop(e);
        sym *l = &e->s[p.left], *r = &e->s[p.right];
        if (l->id != p.lid || r->id != p.rid || l->next != p.right) continue; /* stale */
        l->id = p.res, l->end = r->end, l->next = r->next;
        r->id = -1;
        if (r->next >= 0) e->s[r->next].prev = p.left;
        if (heap_push(e, l->prev, p.left) || heap_push(e, p.left, l->next)) return -1;
    }
    int32_t n = 0;
    for (int32_t i = 0; i >= 0; i = e->s[i].next) {
        if (e->p_n + 2 > e->p_cap) {
            int64_t cap = e->p_cap ? e->p_cap * 2 : 4096;
            int32_t *p = realloc(e->pool, (size_t)cap * sizeof *p);
            if (!p) return -1;
            e->pool = p, e->p_cap = cap;
        }
        e->pool[e->p_n++] = e->s[i].id;
        e->pool[e->p_n++] = e->s[i].end;
        n++;
    }
    return n;
}

static int cache_grow(enc *e)
{
    size_t cap = e->c_cap ? e->c_cap * 2 : 1024;
    cache_entry *c = malloc(cap * sizeof *c);
    if (!c) return -1;
    for (size_t i = 0; i < cap; i++) c[i].word = -1;
    for (size_t i = 0; i < e->c_cap; i++) {
        if (e->cache[i].word < 0) continue;
        size_t j = e->cache[i].hash & (cap - 1);
        while (c[j].word >= 0) j = (j + 1) & (cap - 1);
        c[j] = e->cache[i];
    }
    free(e->cache);
    e->cache = c, e->c_cap = cap;
    return 0;
}

/* A copy of word[0..len) in e->words: its offset, or -1 when out of memory. */
static int64_t word_keep(enc *e, const char *w, size_t len)
{
    if (e->w_n + len > e->w_cap) {
        size_t cap = e->w_cap ? e->w_cap * 2 : 65536;
        while (cap < e->w_n + len) cap *= 2;
        char *p = realloc(e->words, cap);
        if (!p) return -1;
        e->words = p, e->w_cap = cap;
    }
    memcpy(e->words + e->w_n, w, len);
    e->w_n += len;
    return (int64_t)(e->w_n - len);
}

/* The cached (or new) tokens of a word: pool index into *at, count returned; < 0 as merge_word. */
static int32_t word_tokens(enc *e, const char *w, size_t len, int64_t *at)
{
    if ((e->c_n + 1) * 2 > e->c_cap && cache_grow(e)) return -1;
    uint64_t h = bpe_hash(w, len);
    size_t i = h & (e->c_cap - 1);
    for (; e->cache[i].word >= 0; i = (i + 1) & (e->c_cap - 1)) {
        cache_entry *c = &e->cache[i];
        if (c->hash == h && c->len == len && memcmp(e->words + c->word, w, len) == 0) {
            *at = c->at;
            return c->n;
        }
    }
    *at = e->p_n;
    int32_t n = merge_word(e, w, len);
    if (n < 0) return n;
    int64_t kept = word_keep(e, w, len);
    if (kept < 0) return -1;
    e->cache[i] = (cache_entry){h, kept, len, *at, n};
    e->c_n++;
    return n;
}

/* Offset p of e->text in the input, as a token's start (lo) or end. */
static int64_t in_input(const enc *e, size_t p, bool lo)
{
    return e->seg_start + (e->map ? (lo ? e->map->lo : e->map->hi)[p] : (int64_t)p);
}

/* One pre-tokenized piece [start, end) of the piece at e->text + e->sub. */
static int on_word(void *ctx, size_t start, size_t end)
{
    enc *e = ctx;
    start += e->sub, end += e->sub;
    const char *w = e->text + start;
    size_t len = end - start;
    if (e->b->ignore_merges && len <= 512) {
        char buf[1024];
        int32_t id = bpe_find(e->b, buf, map_word(w, len, buf));
        if (id >= 0) return out_push(e, id, in_input(e, start, true), in_input(e, end, false));
    }
    int64_t at;
    int32_t n = word_tokens(e, w, len, &at);
    if (n <= -2)
        return kv_fail(e->err, KV_EINPUT, "%s: cannot encode byte 0x%02X: the vocabulary has no token for it",
                       e->b->where ? e->b->where : "the tokenizer", -2 - n);
    if (n < 0) return kv_fail(e->err, KV_EFAIL, "out of memory");
    int32_t prev_end = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = e->pool[at + 2 * k], wend = e->pool[at + 2 * k + 1];
        if (out_push(e, id, in_input(e, start + (size_t)prev_end, true), in_input(e, start + (size_t)wend, false)))
            return KV_EFAIL;
        prev_end = wend;
    }
    return KV_OK;
}

/* text[a..z) of e->text: split and merged. */
static int encode_piece(enc *e, size_t a, size_t z)
{
    e->sub = a;
    return pretok_split(e->b->pre, e->text + a, z - a, on_word, e, e->err);
}

static int split_added(enc *e, const char *text, size_t len, bool normalized);

/* Text between the added tokens matched on the text as given: normalised
 * (with its offset map), then split at the added tokens matched on the
 * normalised text, split by the pre-tokenizer and merged. */
static int encode_segment(enc *e, const char *text, int64_t start, int64_t end)
{
    e->seg_start = start;
    e->text = text + start, e->map = NULL;
    size_t len = (size_t)(end - start);
    nfc_map map;
    int changed = 0;
    if (e->b->nfc && nfc_map_make(e->text, len, &map, &changed, e->err)) return e->err->code;
    if (changed) e->text = map.text, e->map = &map, len = map.len;
    int rc = e->b->n_normalized ? split_added(e, e->text, len, true) : encode_piece(e, 0, len);
    if (changed) nfc_map_free(&map); /* the cache keeps its own copies of the words */
    return rc;
}

/* The longest added token at text[i..len) of the pass (matched on the
 * normalised text or not), or NULL. */
static const bpe_added *added_at(const bpe_model *b, const char *text, size_t i, size_t len, bool normalized)
{
    unsigned char c = (unsigned char)text[i];
    for (int32_t k = b->first[c]; k < b->first[c + 1]; k++)
        if (((b->added[k].flags & BPE_NORMALIZED) && b->nfc) == normalized && b->added[k].len <= len - i &&
            memcmp(b->added[k].text, text + i, b->added[k].len) == 0)
            return &b->added[k];
    return NULL;
}

/* Whether the code point is Unicode White_Space (Rust's char::is_whitespace). */
static bool white_space(utf8proc_int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* The start of the whitespace run that ends at text[i], not before lo. */
static size_t space_before(const char *text, size_t lo, size_t i)
{
    while (i > lo) {
        size_t j = i - 1;
        while (j > lo && ((unsigned char)text[j] & 0xC0) == 0x80) j--;
        utf8proc_int32_t c;
        utf8proc_iterate((const utf8proc_uint8_t *)text + j, (utf8proc_ssize_t)(i - j), &c);
        if (!white_space(c)) break;
        i = j;
    }
    return i;
}

/* The end of the whitespace run that starts at text[i]. */
static size_t space_after(const char *text, size_t i, size_t len)
{
    while (i < len) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0 || !white_space(c)) break;
        i += (size_t)k;
    }
    return i;
}

/* Splits text[0..len) at the added tokens of the pass: the input as given
 * (segments between go to encode_segment) or, normalised, a segment's text
 * (pieces between go to encode_piece). */
static int split_added(enc *e, const char *text, size_t len, bool normalized)
{
    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        const bpe_added *a = e->b->n_added ? added_at(e->b, text, i, len, normalized) : NULL;
        if (!a) {
            i++;
            continue;
        }
        size_t start = a->flags & BPE_LSTRIP ? space_before(text, seg, i) : i;
        size_t end = a->flags & BPE_RSTRIP ? space_after(text, i + a->len, len) : i + a->len;
        int rc = start > seg ? normalized ? encode_piece(e, seg, start) : encode_segment(e, text, (int64_t)seg,
                                                                                       (int64_t)start)
                             : KV_OK;
        if (rc || out_push(e, a->id, normalized ? in_input(e, start, true) : (int64_t)start,
                           normalized ? in_input(e, end, false) : (int64_t)end))
            return e->err->code;
        seg = i = end;
    }
    if (len <= seg) return KV_OK;
    return normalized ? encode_piece(e, seg, len) : encode_segment(e, text, (int64_t)seg, (int64_t)len);
}

int bpe_encode(const bpe_model *b, const char *text, size_t len, bool add_special, bpe_out *out, kv_err *err)
{
    int64_t bad = bpe_utf8_invalid(text, len);
    if (bad >= 0)
        return kv_fail(err, KV_EINPUT, "the text is not valid UTF-8 at byte offset %lld (byte 0x%02X)",
                       (long long)bad, (unsigned char)text[bad]);
    enc e = {.b = b, .out = out, .err = err};
    int rc = KV_OK;
    for (int k = 0; add_special && !rc && k < b->n_prefix; k++) rc = out_push(&e, b->prefix[k], 0, 0);
    if (!rc) rc = split_added(&e, text, len, false);
    for (int k = 0; add_special && !rc && k < b->n_suffix; k++)
        rc = out_push(&e, b->suffix[k], (int64_t)len, (int64_t)len);
    free(e.s), free(e.heap), free(e.cache), free(e.pool), free(e.words);
    return rc;
}
