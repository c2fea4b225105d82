/* The results directory's small files (see results_dir.h). */
#include "results/results_dir.h"

#include <stdio.h>
#include <string.h>

void results_config_label(const char *policy, const char *params, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s", policy, params[0] ? ":" : "", params);
}

void results_run_label(const char *config, const char *allocator, int64_t chunk, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s@%s/%lld", config, allocator, (long long)chunk);
}

int results_copy_file(const char *dir, const char *name, const char *outdir, bool *copied, kv_err *err)
{
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/%s", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", outdir, name);
    *copied = false;
    FILE *in = fopen(src, "rb");
    if (!in) return KV_OK;
    FILE *o = fopen(dst, "wb");
    if (!o) {
        fclose(in);
        return kv_fail(err, KV_EFAIL, "%s: cannot create", dst);
    }
    char buf[65536];
    size_t n;
    int rc = KV_OK;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, o) != n) break;
    if (ferror(in)) rc = kv_fail(err, KV_EFAIL, "%s: read failed", src);
    if ((ferror(o) | (fclose(o) != 0)) && !rc) rc = kv_fail(err, KV_EFAIL, "%s: write failed", dst);
    fclose(in);
    *copied = rc == KV_OK;
    return rc;
}

int results_concat_file(const char *const *dirs, int n, const char *name, const char *outdir, kv_err *err)
{
    char dst[4200];
    snprintf(dst, sizeof dst, "%s/%s", outdir, name);
    FILE *o = NULL;
    int rc = KV_OK;
    for (int i = 0; !rc && i < n; i++) {
        char src[4200];
        snprintf(src, sizeof src, "%s/%s", dirs[i], name);
        FILE *in = fopen(src, "rb");
        if (!in) continue;
        const bool later = o != NULL;
        if (!o && !(o = fopen(dst, "wb"))) rc = kv_fail(err, KV_EFAIL, "%s: cannot create", dst);
        int c = 0;
        if (!rc && later) /* the header row once */
            while ((c = fgetc(in)) != EOF && c != '\n') {}
        char buf[65536];
        size_t k;
        while (!rc && (k = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, k, o) != k) rc = kv_fail(err, KV_EFAIL, "%s: write failed", dst);
        if (!rc && ferror(in)) rc = kv_fail(err, KV_EFAIL, "%s: read failed", src);
        fclose(in);
    }
    if (o && (ferror(o) | (fclose(o) != 0)) && !rc) rc = kv_fail(err, KV_EFAIL, "%s: write failed", dst);
    return rc;
}
