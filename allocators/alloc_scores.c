/* alloc_scores: the head-importance file of `--head-scores FILE` (headkv,
 * duo; docs/allocators.md). A CSV whose first three columns are
 * `layer,kv_head,score` (the file `kvtrace analyze` writes; further columns
 * are ignored), one row per (layer, kv head) of the model, each exactly
 * once; scores finite and >= 0, higher = more important, not all 0. Any
 * other shape is refused naming the file and the row (KV_EINPUT). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "core/fileopen.h"
#include "allocators/alloc.h"

/* Splits PATH into the directory and name csv_read takes. */
static void split_path(const char *path, char *dir, size_t cap, const char **name)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, cap, ".");
        *name = path;
        return;
    }
    snprintf(dir, cap, "%.*s", (int)(slash - path), path);
    *name = slash + 1;
}

static int read_rows(const csv_table *c, int64_t L, int64_t K, double *scores, kv_err *err)
{
    unsigned char *seen = kv_calloc((size_t)(L * K), 1, "head scores", err);
    if (!seen) return err->code;
    int rc = KV_OK;
    double sum = 0;
    for (size_t r = 0; !rc && r < c->n_rows; r++) {
        int64_t l, g;
        double s;
        rc = csv_int(c, r, 0, 0, (int64_t)1 << 40, &l, err);
        if (!rc) rc = csv_int(c, r, 1, 0, (int64_t)1 << 40, &g, err);
        if (!rc) rc = csv_double(c, r, 2, false, &s, err);
        if (rc) break;
        if (l >= L || g >= K)
            rc = csv_fail(c, r, err, "(layer %lld, kv head %lld) is not in the trace (%lld layers, %lld kv heads)",
                          (long long)l, (long long)g, (long long)L, (long long)K);
        else if (seen[l * K + g])
            rc = csv_fail(c, r, err, "(layer %lld, kv head %lld) is given twice", (long long)l, (long long)g);
        else if (!(s >= 0) || !isfinite(s))
            rc = csv_fail(c, r, err, "score %g is not a finite number >= 0", s);
        if (rc) break;
        seen[l * K + g] = 1, scores[l * K + g] = s, sum += s;
    }
    for (int64_t x = 0; !rc && x < L * K; x++)
        if (!seen[x])
            rc = kv_fail(err, KV_EINPUT, "%s: (layer %lld, kv head %lld) has no row (one per (layer, kv head) of "
                         "the trace: %lld x %lld)", c->path, (long long)(x / K), (long long)(x % K), (long long)L,
                         (long long)K);
    if (!rc && !(sum > 0)) rc = kv_fail(err, KV_EINPUT, "%s: every score is 0 (no head is more important)", c->path);
    free(seen);
    return rc;
}

int alloc_head_scores_read(const char *path, int64_t L, int64_t K, double *scores, kv_err *err)
{
    char dir[4096];
    const char *name;
    split_path(path, dir, sizeof dir, &name);
    csv_table c = {0};
    bool present = false;
    int rc = kv_input_check(path, false, err);   /* missing or unreadable: exit 1, a directory: exit 2 */
    if (!rc) rc = csv_read(&c, dir, name, &present, err);
    if (!rc && !present) rc = kv_fail(err, KV_EINPUT, "%s: no such file (--head-scores)", path);
    static const char *const COLS[] = {"layer", "kv_head", "score"};
    if (!rc) rc = csv_expect(&c, COLS, 3, true, err);
    if (!rc) rc = read_rows(&c, L, K, scores, err);
    csv_free(&c);
    return rc;
}
