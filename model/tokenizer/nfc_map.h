/* nfc_map: NFC (utf8proc) of a text together with a map from each byte
 * offset of the normalised text back to the original, so that a token cut
 * from the normalised text gets its span in the text as given.
 *
 * The text is cut into units: a character of combining class 0 and the
 * non-starters after it, joined with the next unit while NFC would compose
 * across the cut (NFC(a b) != NFC(a) NFC(b)). A unit NFC leaves as it is
 * maps byte for byte; a unit NFC changes maps as a whole: an offset inside
 * its normalised bytes goes to the unit's start as a token start (lo) and
 * to its end as a token end (hi). */
#ifndef KV_NFC_MAP_H
#define KV_NFC_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "core/kv_error.h"

typedef struct {
    char *text;  /* the normalised text (malloc'd) */
    size_t len;
    int64_t *lo; /* [len + 1]: an offset in text as a start in the original */
    int64_t *hi; /* [len + 1]: the same as an end */
} nfc_map;

/* NFC of s[0..len) (valid UTF-8) into *m; *changed false (and m empty) when
 * NFC leaves the text as it is. */
int nfc_map_make(const char *s, size_t len, nfc_map *m, int *changed, kv_err *err);

void nfc_map_free(nfc_map *m);

#endif
