/* Inputs of a provenance record: each file's size and sha256 (OpenSSL's
 * libcrypto, streaming 1 MiB at a time: memory stays flat whatever the file),
 * and the files that make a model. */
#include "core/fileopen.h"
#include "provenance/provenance.h"

#include <dirent.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { HASH_BLOCK = 1 << 20 };

/* sha256 of a whole file as lowercase hex, and its size. */
static int file_sha256(const char *path, char hex[65], int64_t *size, kv_err *err)
{
    FILE *f = kv_input_fopen(path, err);
    if (!f) return err->code;
    unsigned char *buf = malloc(HASH_BLOCK), md[EVP_MAX_MD_SIZE];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = buf && ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    size_t got;
    *size = 0;
    while (ok && (got = fread(buf, 1, HASH_BLOCK, f)) > 0) {
        ok = EVP_DigestUpdate(ctx, buf, got) == 1;
        *size += (int64_t)got;
    }
    ok = ok && !ferror(f);
    unsigned len = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == 32;
    EVP_MD_CTX_free(ctx);
    free(buf);
    fclose(f);
    if (!ok) return kv_fail(err, KV_EINPUT, "%s: cannot read to record its sha256", path);
    for (unsigned i = 0; i < len; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return KV_OK;
}

int prov_add_file(prov_record *p, const char *role, const char *path, const char *shown, kv_err *err)
{
    prov_input in = {0};
    int rc = file_sha256(path, in.sha256, &in.size, err);
    if (rc) return rc;
    prov_input *grown = realloc(p->inputs, sizeof *grown * (size_t)(p->n_inputs + 1));
    if (!grown) return kv_fail(err, KV_EFAIL, "provenance: out of memory");
    p->inputs = grown;
    rc = prov_set_text(&in.role, role, err);
    if (!rc) rc = prov_set_text(&in.path, shown ? shown : path, err);
    p->inputs[p->n_inputs++] = in; /* prov_free frees a half-filled one */
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* The files of a Hugging Face directory that define the model, in name order. */
static int add_model_dir(prov_record *p, const char *dir, kv_err *err)
{
    DIR *d = opendir(dir);
    if (!d) return kv_fail(err, KV_EINPUT, "%s: cannot list the model directory", dir);
    char **names = NULL;
    int n = 0, rc = KV_OK;
    for (struct dirent *e; !rc && (e = readdir(d)) != NULL;) {
        const char *s = e->d_name;
        if (!(strcmp(s, "config.json") == 0 || strcmp(s, "tokenizer.json") == 0 || ends_with(s, ".safetensors") ||
              strcmp(s, "model.safetensors.index.json") == 0))
            continue;
        char **grown = realloc(names, sizeof *names * (size_t)(n + 1));
        if (!grown || !(grown[n] = strdup(s))) rc = kv_fail(err, KV_EFAIL, "provenance: out of memory");
        if (grown) names = grown, n += rc == KV_OK;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; !rc && i < n; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(len);
        if (!path) rc = kv_fail(err, KV_EFAIL, "provenance: out of memory");
        else snprintf(path, len, "%s/%s", dir, names[i]), rc = prov_add_file(p, "model", path, NULL, err);
        free(path);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int prov_add_model(prov_record *p, const char *model, kv_err *err)
{
    int rc = prov_set_text(&p->model, model, err);
    struct stat st;
    if (rc || strncmp(model, "random:", 7) == 0) return rc;
    if (stat(model, &st) != 0) return kv_fail(err, KV_EINPUT, "%s: no such model file or directory", model);
    return S_ISDIR(st.st_mode) ? add_model_dir(p, model, err) : prov_add_file(p, "model", model, NULL, err);
}
