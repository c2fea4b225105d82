/* nfc_map: NFC with an offset map back to the original (see nfc_map.h). */
#include "model/tokenizer/nfc_map.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void nfc_map_free(nfc_map *m)
{
    free(m->text), free(m->lo), free(m->hi);
    memset(m, 0, sizeof *m);
}

/* NFC of s[0..n): malloc'd into *out, its length returned (< 0: utf8proc's error). */
static utf8proc_ssize_t nfc(const char *s, size_t n, char **out)
{
    utf8proc_uint8_t *o = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &o,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    *out = (char *)o;
    return r;
}

/* The end of the unit that starts at s[i]: the character there and the non-starters after it. */
static size_t unit_end(const char *s, size_t len, size_t i)
{
    utf8proc_int32_t c;
    i += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
    while (i < len) {
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0 || utf8proc_get_property(c)->combining_class == 0) break;
        i += (size_t)k;
    }
    return i;
}

/* Whether NFC composes across the cut at k: NFC(s[i..k2)) != NFC(s[i..k)) NFC(s[k..k2)), where
 * u[0..nu) is NFC(s[i..k)). -1 when utf8proc fails. */
static int composes_across(const char *s, size_t i, size_t k, size_t k2, const char *u, utf8proc_ssize_t nu)
{
    char *both = NULL, *next = NULL;
    utf8proc_ssize_t nb = nfc(s + i, k2 - i, &both), nn = nfc(s + k, k2 - k, &next);
    int r = nb < 0 || nn < 0 ? -1
          : !(nb == nu + nn && memcmp(both, u, (size_t)nu) == 0 && memcmp(both + nu, next, (size_t)nn) == 0);
    free(both), free(next);
    return r;
}

#define REFINE_MAX 128 /* bytes: longer units (long runs of combining marks) map as a whole */

/* Where the normalised unit's offset q (a character boundary of u) is in
 * the original: p in (i, k) with NFC(s[i..p)) == u[0..q), or -1. */
static int64_t boundary(const char *s, size_t i, size_t k, const char *u, size_t q)
{
    for (size_t p = i + 1; p < k; p++) {
        if (((unsigned char)s[p] & 0xC0) == 0x80) continue;
        char *pre = NULL;
        utf8proc_ssize_t n = nfc(s + i, p - i, &pre);
        bool hit = n == (utf8proc_ssize_t)q && memcmp(pre, u, q) == 0;
        free(pre);
        if (hit) return (int64_t)p;
    }
    return -1;
}

/* Maps the unit s[i..k), whose NFC u[0..nu) sits at m->text + j: each
 * character boundary of u that a prefix of the unit normalises to maps
 * there; an offset between such boundaries goes to the one before it as a
 * start (lo), to the one after it as an end (hi). */
static void map_unit(nfc_map *m, const char *s, size_t i, size_t k, size_t j, const char *u, size_t nu)
{
    const bool same = nu == k - i && memcmp(u, s + i, nu) == 0, refine = !same && k - i <= REFINE_MAX;
    int64_t last = (int64_t)i;
    for (size_t t = 0; t < nu; t++) { /* lo, and hi for the boundaries found */
        bool at_char = t == 0 || ((unsigned char)u[t] & 0xC0) != 0x80;
        int64_t p = t == 0 ? (int64_t)i : same ? (int64_t)(i + t) : refine && at_char ? boundary(s, i, k, u, t) : -1;
        if (p >= 0) last = p;
        m->lo[j + t] = last;
        m->hi[j + t] = p;
    }
    int64_t next = (int64_t)k;
    for (size_t t = nu; t-- > 0;) { /* hi between boundaries: the next one */
        if (m->hi[j + t] >= 0) next = m->hi[j + t];
        else m->hi[j + t] = next;
    }
}

/* Fills m->lo / m->hi, unit by unit; KV_EFAIL when utf8proc fails. */
static int fill(nfc_map *m, const char *s, size_t len, kv_err *err)
{
    size_t i = 0, j = 0;
    while (i < len) {
        size_t k = unit_end(s, len, i);
        char *u = NULL;
        utf8proc_ssize_t nu = nfc(s + i, k - i, &u);
        int across = 0;
        while (nu >= 0 && k < len && (across = composes_across(s, i, k, unit_end(s, len, k), u, nu)) == 1) {
            k = unit_end(s, len, k);
            free(u);
            nu = nfc(s + i, k - i, &u);
        }
        if (nu < 0 || across < 0) {
            free(u);
            return kv_fail(err, KV_EFAIL, "utf8proc: %s", utf8proc_errmsg(nu < 0 ? nu : UTF8PROC_ERROR_NOMEM));
        }
        if (j + (size_t)nu > m->len || memcmp(m->text + j, u, (size_t)nu) != 0) { /* cannot happen: one unit */
            free(u);
            map_unit(m, s, i, len, j, m->text + j, m->len - j);
            return KV_OK;
        }
        map_unit(m, s, i, k, j, u, (size_t)nu);
        free(u);
        i = k, j += (size_t)nu;
    }
    return KV_OK;
}

int nfc_map_make(const char *s, size_t len, nfc_map *m, int *changed, kv_err *err)
{
    memset(m, 0, sizeof *m);
    *changed = 0;
    if (!len) return KV_OK;
    utf8proc_ssize_t n = nfc(s, len, &m->text);
    if (n < 0) return kv_fail(err, KV_EFAIL, "utf8proc: %s", utf8proc_errmsg(n));
    if ((size_t)n == len && memcmp(m->text, s, len) == 0) {
        nfc_map_free(m);
        return KV_OK;
    }
    m->len = (size_t)n;
    m->lo = malloc((m->len + 1) * sizeof *m->lo);
    m->hi = malloc((m->len + 1) * sizeof *m->hi);
    if (!m->lo || !m->hi) {
        nfc_map_free(m);
        return kv_fail(err, KV_EFAIL, "out of memory");
    }
    m->lo[m->len] = m->hi[m->len] = (int64_t)len;
    int rc = fill(m, s, len, err);
    if (rc) nfc_map_free(m);
    else *changed = 1;
    return rc;
}
