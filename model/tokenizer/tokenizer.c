/* tokenizer: SentencePiece-BPE encoding as llama.cpp's llm_tokenizer_spm, and
 * decoding for printing (see tokenizer.h).
 *
 * Encoding keeps the symbols (runs of the escaped text) in a doubly linked
 * list and every adjacent pair whose concatenation is a piece in a binary
 * max-heap ordered by (score, then leftmost). A popped pair is stale when
 * either side has changed since it was pushed: a merge always grows the left
 * symbol and empties the right one, so comparing the stored length with the
 * current lengths detects it (llama.cpp's check). */
#include "model/tokenizer/tokenizer.h"

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/spm_hf.h"

#include <stdlib.h>
#include <string.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 "▁" */

typedef struct {
    int32_t prev, next; /* neighbours in the list, -1 at the ends */
    int32_t start, n;   /* bytes [start, start + n) of the escaped text; n = 0: merged away */
} spm_symbol;

typedef struct {
    int32_t left, right; /* symbol indices */
    float score;
    int32_t size; /* bytes of the merged piece when pushed */
} spm_bigram;

typedef struct {
    const kv_vocab *v;
    const char *text; /* escaped text */
    spm_symbol *sym;
    spm_bigram *heap;
    size_t heap_n, heap_cap;
} spm_state;

/* ---- priority queue ---- */

static int bigram_before(const spm_bigram *a, const spm_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heap_push(spm_state *s, spm_bigram b)
{
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        spm_bigram *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return -1;
        s->heap = h, s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
    return 0;
}

static spm_bigram heap_pop(spm_state *s)
{
    spm_bigram top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* ---- encoding ---- */

/* Length of the well-formed UTF-8 character at s (1 for a malformed byte). */
static int32_t utf8_len(const unsigned char *s, size_t left)
{
    unsigned char c = s[0];
    int32_t n;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else return 1;
    if ((size_t)n > left || s[1] < lo || s[1] > hi) return 1;
    for (int32_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 1;
    return n;
}

/* The text as the vocabulary spells it: dummy prefix, ' ' as "▁". */
static char *spm_escape(const kv_vocab *v, const char *text, size_t len, size_t *out_len)
{
    char *out = malloc(3 * len + 4);
    if (!out) return NULL;
    size_t o = 0;
    if (len && v->add_space_prefix) memcpy(out, SPACE_MARK, 3), o = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ')
            memcpy(out + o, SPACE_MARK, 3), o += 3;
        else
            out[o++] = text[i];
    }
    *out_len = o;
    return out;
}

static int try_add_bigram(spm_state *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return 0;
    int32_t size = s->sym[left].n + s->sym[right].n;
    if (s->v->hf) { /* tokenizer.json: the pair's merge rank, lower first */
        const char *t = s->text;
        int32_t a = vocab_find(s->v, t + s->sym[left].start, (size_t)s->sym[left].n);
        int32_t b = vocab_find(s->v, t + s->sym[right].start, (size_t)s->sym[right].n);
        int32_t rank = spm_hf_rank(s->v->hf, a, b);
        return rank < 0 ? 0 : heap_push(s, (spm_bigram){left, right, -(float)rank, size});
    }
    int32_t id = vocab_find(s->v, s->text + s->sym[left].start, (size_t)size);
    if (id < 0) return 0;
    return heap_push(s, (spm_bigram){left, right, s->v->scores[id], size});
}

/* Splits into characters and merges; returns -1 when out of memory. */
static int spm_merge(spm_state *s, size_t len)
{
    int32_t count = 0;
    for (size_t off = 0; off < len; count++) {
        int32_t n = utf8_len((const unsigned char *)s->text + off, len - off);
        s->sym[count] = (spm_symbol){count - 1, off + (size_t)n < len ? count + 1 : -1, (int32_t)off, n};
        off += (size_t)n;
    }
    for (int32_t i = 1; i < count; i++)
        if (try_add_bigram(s, i - 1, i)) return -1;
    while (s->heap_n) {
        spm_bigram b = heap_pop(s);
        spm_symbol *l = &s->sym[b.left], *r = &s->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = b.left;
        if (try_add_bigram(s, l->prev, b.left) || try_add_bigram(s, b.left, l->next)) return -1;
    }
    return 0;
}

/* A byte that no piece covers: "<0xHH>", else the one-byte piece, else unk. */
static int32_t byte_token(const kv_vocab *v, unsigned char c)
{
    if (v->byte_id[c] >= 0) return v->byte_id[c];
    int32_t id = c ? vocab_find(v, (const char *)&c, 1) : -1;
    return id >= 0 ? id : v->unk;
}

/* Appends the ids of the merged symbols to out (room for one id per byte). */
static int spm_emit(const spm_state *s, int32_t *out, int64_t *n, kv_err *err)
{
    for (int32_t i = s->sym ? 0 : -1; i >= 0; i = s->sym[i].next) {
        const char *p = s->text + s->sym[i].start;
        int32_t id = vocab_find(s->v, p, (size_t)s->sym[i].n);
        if (id >= 0) {
            out[(*n)++] = id;
            continue;
        }
        for (int32_t k = 0; k < s->sym[i].n; k++) {
            unsigned char c = (unsigned char)p[k];
            if ((id = byte_token(s->v, c)) < 0)
                return kv_fail(err, KV_EINPUT,
                               "cannot encode byte 0x%02X: the vocabulary has no token <0x%02X>, no "
                               "one-byte piece and no unknown token",
                               c, c);
            out[(*n)++] = id;
        }
    }
    return KV_OK;
}

static int spm_encode(const kv_vocab *v, const char *text, size_t len, int32_t *out, int64_t *n,
                      kv_err *err)
{
    if (len > ((size_t)INT32_MAX - 4) / 3)
        return kv_fail(err, KV_EINPUT, "a prompt of %zu bytes is too long to encode", len);
    spm_state s = {.v = v};
    size_t elen = 0;
    char *esc = spm_escape(v, text, len, &elen);
    s.text = esc;
    s.sym = elen ? malloc(elen * sizeof *s.sym) : NULL;
    int rc = KV_OK;
    if (!esc || (elen && !s.sym) || spm_merge(&s, elen))
        rc = kv_fail(err, KV_EFAIL, "out of memory encoding a prompt of %zu bytes", len);
    else
        rc = spm_emit(&s, out, n, err);
    free(s.heap);
    free(s.sym);
    free(esc);
    return rc;
}

/* One word of a tokenizer.json's normalised text: the piece itself under
 * ignore_merges, else merged by rank. sym has room for len symbols. */
static int hf_word(const kv_vocab *v, const char *word, size_t len, spm_symbol *sym, int32_t *out,
                   int64_t *n, kv_err *err)
{
    int32_t id = v->hf->ignore_merges ? vocab_find(v, word, len) : -1;
    if (id >= 0) {
        out[(*n)++] = id;
        return KV_OK;
    }
    spm_state s = {.v = v, .text = word, .sym = sym};
    int rc = spm_merge(&s, len) ? kv_fail(err, KV_EFAIL, "out of memory encoding a prompt") : KV_OK;
    if (!rc) rc = spm_emit(&s, out, n, err);
    free(s.heap);
    return rc;
}

/* A text segment between added tokens: normalised, split into words at
 * each "▁" (Metaspace split), each word merged. buf: 3 * len + 3 bytes. */
static int hf_segment(const kv_vocab *v, const char *text, size_t len, bool first, char *buf,
                      spm_symbol *sym, int32_t *out, int64_t *n, kv_err *err)
{
    size_t m = spm_hf_normalize(v->hf, text, len, first, buf);
    int rc = KV_OK;
    for (size_t w = 0, e; w < m && !rc; w = e) {
        e = w + 1;
        while (e < m && !(v->hf->split && e + 3 <= m && memcmp(buf + e, SPACE_MARK, 3) == 0)) e++;
        rc = hf_word(v, buf + w, e - w, sym, out, n, err);
    }
    return rc;
}

/* A tokenizer.json's SentencePiece-style encoding (spm_hf.h): added tokens
 * matched first, the segments between them normalised and merged by rank,
 * the template's ids around them when add_special. out: room for
 * 6 * len + 3 + 2 * SPM_HF_TEMPLATE_MAX ids. */
static int hf_encode(const kv_vocab *v, const char *text, size_t len, bool add_special, int32_t *out,
                     int64_t *n, kv_err *err)
{
    const spm_hf *h = v->hf;
    for (int k = 0; add_special && k < h->n_prefix; k++) out[(*n)++] = h->prefix[k];
    char *buf = malloc(3 * len + 3);
    spm_symbol *sym = malloc((3 * len + 3) * sizeof *sym);
    int rc = buf && sym ? KV_OK : kv_fail(err, KV_EFAIL, "out of memory encoding a prompt of %zu bytes", len);
    size_t seg = 0;
    for (size_t i = 0; i <= len && !rc;) {
        size_t m = 0;
        int32_t id = i < len && h->n_added ? spm_hf_added_at(h, text, i, len, &m) : -1;
        if (id < 0 && i < len) {
            i++;
            continue;
        }
        if (i > seg) rc = hf_segment(v, text + seg, i - seg, seg == 0, buf, sym, out, n, err);
        if (id >= 0 && !rc) out[(*n)++] = id;
        i += id >= 0 ? m : 1;
        seg = i;
    }
    for (int k = 0; add_special && k < h->n_suffix && !rc; k++) out[(*n)++] = h->suffix[k];
    free(buf);
    free(sym);
    return rc;
}

int tokenizer_encode(const kv_vocab *v, const char *text, size_t len, bool add_bos, int32_t **ids,
                     int64_t *n, kv_err *err)
{
    *ids = NULL;
    *n = 0;
    if (v->kind == VOCAB_BYTE_BPE) return tokenizer_encode_offsets(v, text, len, add_bos, ids, NULL, n, err);
    if (add_bos && v->bos < 0 && !v->hf)
        return kv_fail(err, KV_EINPUT, "cannot add BOS: the vocabulary has no BOS token");
    if (len > ((size_t)INT32_MAX - 64) / 6)
        return kv_fail(err, KV_EINPUT, "a prompt of %zu bytes is too long to encode", len);
    /* at most one id per escaped byte, plus BOS (tokenizer.json: see hf_encode) */
    size_t cap = 6 * len + 5 + 2 * SPM_HF_TEMPLATE_MAX;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out) return kv_fail(err, KV_EFAIL, "out of memory encoding a prompt of %zu bytes", len);
    int64_t count = 0;
    if (add_bos && !v->hf) out[count++] = v->bos;
    int rc = v->hf ? hf_encode(v, text, len, add_bos, out, &count, err)
                   : spm_encode(v, text, len, out, &count, err);
    if (rc) {
        free(out);
        return rc;
    }
    int32_t *shrunk = realloc(out, (size_t)(count ? count : 1) * sizeof *out);
    *ids = shrunk ? shrunk : out;
    *n = count;
    return KV_OK;
}

int tokenizer_encode_offsets(const kv_vocab *v, const char *text, size_t len, bool add_special, int32_t **ids,
                             int64_t **offsets, int64_t *n, kv_err *err)
{
    *ids = NULL;
    *n = 0;
    if (offsets) *offsets = NULL;
    if (v->kind == VOCAB_BYTE_BPE && !v->bpe)
        return kv_fail(err, KV_EUSAGE, "this byte-level BPE vocabulary has no merges to encode with (GGUF "
                       "tokenizers of this kind are not read yet): give the prompt as ids with --tokens FILE");
    if (v->kind != VOCAB_BYTE_BPE) {
        if (offsets)
            return kv_fail(err, KV_EUSAGE, "offsets are given for byte-level BPE tokenizers only (not yet for "
                           "SentencePiece ones)");
        return tokenizer_encode(v, text, len, add_special, ids, n, err);
    }
    bpe_out out = {0};
    int rc = bpe_encode(v->bpe, text, len, add_special, &out, err);
    if (rc) {
        free(out.ids), free(out.off);
        return rc;
    }
    if (!out.ids && !(out.ids = malloc(sizeof *out.ids))) rc = kv_fail(err, KV_EFAIL, "out of memory");
    *ids = out.ids;
    *n = out.n;
    if (offsets) *offsets = out.off;
    else free(out.off);
    return rc;
}

/* ---- decoding ---- */

typedef struct {
    char *buf;
    size_t cap; /* bytes that may be written, the NUL excluded */
    size_t len; /* bytes produced (may exceed cap) */
    bool drop_space; /* drop the next byte if it is ' ' (only the first) */
} sink;

static void sink_put(sink *s, unsigned char c)
{
    if (s->drop_space) {
        s->drop_space = false;
        if (c == ' ') return;
    }
    if (s->len < s->cap) s->buf[s->len] = (char)c;
    s->len++;
}

/* Value of "<0xHH>" (either case), or -1. */
static int byte_value(const char *p)
{
    int v = 0;
    if (strlen(p) != 6 || strncmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The code point of the UTF-8 character at p (well-formed, n bytes). */
static uint32_t utf8_code(const unsigned char *p, int32_t n)
{
    if (n == 1) return p[0];
    uint32_t c = p[0] & (0x7f >> n);
    for (int32_t i = 1; i < n; i++) c = c << 6 | (p[i] & 0x3f);
    return c;
}

/* GPT-2 byte-level BPE: printable bytes stand for themselves, the 68 others
 * (0..32, 127..160, 173) for U+0100.. in order. Returns the byte, or -1. */
static int gpt2_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    if (k <= 32) return (int)k;           /* 0..32 */
    if (k <= 32 + 34) return (int)(k + 94); /* 127..160 */
    return 173;
}

static void put_text(sink *s, const kv_vocab *v, const char *piece)
{
    const unsigned char *p = (const unsigned char *)piece;
    size_t len = strlen(piece);
    for (size_t i = 0; i < len;) {
        int32_t n = utf8_len(p + i, len - i);
        if (v->kind == VOCAB_SPM && n == 3 && memcmp(p + i, SPACE_MARK, 3) == 0) {
            sink_put(s, ' ');
        } else if (v->kind == VOCAB_BYTE_BPE && gpt2_byte(utf8_code(p + i, n)) >= 0) {
            sink_put(s, (unsigned char)gpt2_byte(utf8_code(p + i, n)));
        } else {
            for (int32_t k = 0; k < n; k++) sink_put(s, p[i + k]);
        }
        i += (size_t)n;
    }
}

static void piece_to_sink(const kv_vocab *v, int32_t prev, int32_t id, sink *s)
{
    if (id < 0 || id >= v->n || !v->pieces || !v->pieces[id]) return;
    const char *piece = v->pieces[id];
    switch (v->types[id]) {
    case VOCAB_CONTROL:
        /* byte-level BPE's special tokens print as their text, as the
         * reference decoders do without skip_special_tokens */
        if (v->kind == VOCAB_BYTE_BPE)
            for (const char *c = piece; *c; c++) sink_put(s, (unsigned char)*c);
        return;
    case VOCAB_UNUSED:
        return;
    case VOCAB_UNKNOWN:
        for (const char *c = piece; *c; c++) sink_put(s, (unsigned char)*c);
        return;
    case VOCAB_BYTE: {
        int b = byte_value(piece);
        if (b >= 0)
            sink_put(s, (unsigned char)b);
        else
            put_text(s, v, piece);
        return;
    }
    default:
        if (v->types[id] == VOCAB_USER && v->kind == VOCAB_BYTE_BPE) {
            /* byte-level BPE's added tokens are stored as text (llama.cpp) */
            for (const char *c = piece; *c; c++) sink_put(s, (unsigned char)*c);
            return;
        }
        /* after BOS the dummy-prefix space goes, as llama2.c's decode */
        s->drop_space = v->kind == VOCAB_SPM && prev >= 0 && prev == v->bos &&
                        (v->add_space_prefix || (v->hf && (v->hf->strip_start || v->hf->strip_first_token)));
        put_text(s, v, piece);
        s->drop_space = false;
    }
}

size_t tokenizer_piece_text(const kv_vocab *v, int32_t prev, int32_t id, char *buf, size_t cap)
{
    sink s = {buf, cap ? cap - 1 : 0, 0, false};
    piece_to_sink(v, prev, id, &s);
    if (cap) buf[s.len < cap - 1 ? s.len : cap - 1] = '\0';
    return s.len;
}

/* A run of byte tokens as the ByteFallback decoder gives it: the bytes when
 * they are UTF-8, else one U+FFFD per byte. */
static void put_byte_run(sink *s, const unsigned char *run, size_t k)
{
    bool ok = true;
    for (size_t i = 0; i < k && ok;) {
        int32_t m = utf8_len(run + i, k - i);
        ok = m > 1 || run[i] < 0x80;
        i += (size_t)m;
    }
    for (size_t i = 0; i < k; i++)
        if (ok) sink_put(s, run[i]);
        else for (int j = 0; j < 3; j++) sink_put(s, (unsigned char)"\xef\xbf\xbd"[j]);
}

/* A tokenizer.json's decoder (spm_hf.h): every token's piece, "▁" as ' ',
 * runs of "<0xHH>" through ByteFallback (the leading spaces the decoder
 * strips are the caller's). Like snprintf without the NUL: the full length. */
static size_t hf_decode(const kv_vocab *v, const int32_t *ids, int64_t n, char *buf, size_t cap)
{
    sink s = {buf, cap, 0, false};
    unsigned char run[256];
    size_t k = 0;
    for (int64_t i = 0; i <= n; i++) {
        int32_t id = i < n ? ids[i] : -1;
        const char *p = id >= 0 && id < v->n && v->pieces[id] ? v->pieces[id] : "";
        int b = i < n && v->hf->byte_fallback ? byte_value(p) : -1;
        if (b >= 0 && k < sizeof run) {
            run[k++] = (unsigned char)b;
            continue;
        }
        put_byte_run(&s, run, k);
        k = 0;
        if (b >= 0) run[k++] = (unsigned char)b;
        else if (i < n) put_text(&s, v, p);
    }
    return s.len;
}

char *tokenizer_decode_len(const kv_vocab *v, const int32_t *ids, int64_t n, size_t *len)
{
    if (v->hf) {
        size_t need = hf_decode(v, ids, n, NULL, 0), cut = 0;
        char *out = malloc(need + 1);
        if (!out) return NULL;
        hf_decode(v, ids, n, out, need);
        const char *first = n && ids[0] >= 0 && ids[0] < v->n ? v->pieces[ids[0]] : NULL;
        int strip = v->hf->strip_start; /* Strip; Metaspace: the first token's "▁" */
        if (v->hf->strip_first_token && first && strncmp(first, SPACE_MARK, 3) == 0) strip++;
        while ((int)cut < strip && cut < need && out[cut] == ' ') cut++;
        memmove(out, out + cut, need - cut);
        need -= cut;
        out[need] = '\0';
        if (len) *len = need;
        return out;
    }
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (int64_t i = 0; i < n; i++) {
        int32_t prev = i ? ids[i - 1] : -1;
        size_t k = tokenizer_piece_text(v, prev, ids[i], NULL, 0);
        if (used + k + 1 > cap) {
            while (used + k + 1 > cap) cap *= 2;
            char *grown = realloc(out, cap);
            if (!grown) {
                free(out);
                return NULL;
            }
            out = grown;
        }
        used += tokenizer_piece_text(v, prev, ids[i], out + used, cap - used);
    }
    out[used] = '\0';
    if (len) *len = used;
    return out;
}

char *tokenizer_decode(const kv_vocab *v, const int32_t *ids, int64_t n)
{
    return tokenizer_decode_len(v, ids, n, NULL);
}
