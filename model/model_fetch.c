#include "model/model_fetch.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The published origin; the first is the repository's current name, the
 * second its old one (the host redirects renamed repositories). */
static const char *const ORIGINS[] = {
    "https://huggingface.co/ggml-org/models-moved/resolve/main/tinyllamas/stories260K.gguf",
    "https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf",
};

static int user_cache_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') n = snprintf(buf, cap, "%s/kvtrace", xdg);
    else if (home && home[0]) n = snprintf(buf, cap, "%s/.cache/kvtrace", home);
    else return -1;
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int model_file_sha256(const char *path, char *hex, kv_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return kv_fail(err, KV_EFAIL, "%s: cannot open: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    unsigned char buf[1 << 16], md[EVP_MAX_MD_SIZE];
    size_t got;
    while (ok && (got = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(ctx, buf, got) == 1;
    ok = ok && !ferror(f);
    unsigned int len = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == 32;
    EVP_MD_CTX_free(ctx);
    fclose(f);
    if (!ok) return kv_fail(err, KV_EFAIL, "%s: cannot read to compute its sha256", path);
    for (unsigned int i = 0; i < len; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return KV_OK;
}

/* mkdir -p for the cache directory (two levels at most below an existing one). */
static int make_dirs(const char *dir)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* curl -fsSL URL -o OUT; returns curl's exit status, 127 when curl is missing. */
static int run_curl(const char *url, const char *out)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execlp("curl", "curl", "-fsSL", "--retry", "2", "--connect-timeout", "20", "-o", out, url, (char *)NULL);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int where_to_put_it(kv_err *err, const char *dir, const char *why)
{
    return kv_fail(err, KV_EFAIL,
                   "the default model %s is not in $KVTRACE_MODEL_DIR or %s and %s; download it from %s "
                   "(sha256 %s) into %s, or pass --model",
                   MODEL_DEFAULT_NAME, dir, why, ORIGINS[0], MODEL_DEFAULT_SHA256, dir);
}

/* Fetches into dir/.stories260K.gguf.tmp.PID, checks size and sha256, renames. */
static int download(const char *dir, char *buf, size_t cap, kv_err *err)
{
    char tmp[4200], hex[65];
    if (make_dirs(dir) != 0) return where_to_put_it(err, dir, "its cache directory cannot be created");
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, MODEL_DEFAULT_NAME, (long)getpid());
    snprintf(buf, cap, "%s/%s", dir, MODEL_DEFAULT_NAME);
    fprintf(stderr, "kvtrace: downloading %s into %s\n", MODEL_DEFAULT_NAME, dir);
    int rc = -1;
    for (size_t i = 0; i < sizeof ORIGINS / sizeof ORIGINS[0] && rc != 0 && rc != 127; i++) rc = run_curl(ORIGINS[i], tmp);
    if (rc != 0) {
        unlink(tmp);
        return where_to_put_it(err, dir, rc == 127 ? "curl is not installed" : "the download failed (offline?)");
    }
    struct stat st;
    int bad = stat(tmp, &st) != 0 || st.st_size != MODEL_DEFAULT_BYTES;
    if (!bad && model_file_sha256(tmp, hex, err)) bad = 1;
    if (!bad && strcmp(hex, MODEL_DEFAULT_SHA256) != 0) bad = 2;
    if (bad) {
        unlink(tmp);
        return kv_fail(err, KV_EFAIL, "%s: the downloaded file is not the published one (%s); nothing kept",
                       buf, bad == 2 ? "sha256 differs" : "size differs");
    }
    if (rename(tmp, buf) != 0) {
        unlink(tmp);
        return kv_fail(err, KV_EFAIL, "%s: cannot rename the download into place: %s", buf, strerror(errno));
    }
    return KV_OK;
}

int model_default_path(char *buf, size_t cap, bool download_ok, kv_err *err)
{
    char cache[4096] = "";
    const bool have_cache = user_cache_dir(cache, sizeof cache) == 0;
    const char *dirs[2] = {getenv("KVTRACE_MODEL_DIR"), have_cache ? cache : NULL};
    struct stat st;
    for (int i = 0; i < 2; i++) {
        if (!dirs[i] || !dirs[i][0]) continue;
        snprintf(buf, cap, "%s/%s", dirs[i], MODEL_DEFAULT_NAME);
        if (stat(buf, &st) == 0) return KV_OK;
    }
    if (!have_cache) return where_to_put_it(err, "~/.cache/kvtrace", "HOME is not set");
    if (!download_ok) return where_to_put_it(err, cache, "downloading was not asked for");
    return download(cache, buf, cap, err);
}
