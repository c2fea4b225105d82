/* index: the traces of a study, from the command line or from index.jsonl
 * (docs/study.md: one JSON object a line, exactly id, file, tokens, sha256). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cli_args.h"
#include "core/fileopen.h"
#include "study/study.h"

static const char *const INDEX_KEYS[] = {"id", "file", "tokens", "sha256"};

bool study_id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > STUDY_ID_MAX || id[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", id[i])) return false;
    return true;
}

void study_set_free(study_set *s)
{
    for (int i = 0; s->t && i < s->n; i++) free(s->t[i].path);
    free(s->t), free(s->index);
    memset(s, 0, sizeof *s);
}

static int add_trace(study_set *s, kv_err *err)
{
    study_trace *t = realloc(s->t, sizeof *t * (size_t)(s->n + 1));
    if (!t) return kv_fail(err, KV_EFAIL, "study: out of memory");
    s->t = t;
    memset(&s->t[s->n], 0, sizeof *s->t);
    s->t[s->n].tokens = -1;
    s->n++;
    return KV_OK;
}

/* A trace named on the command line: its id is its file name's stem, every
 * byte outside the id alphabet replaced by '_'. */
static int add_file(study_set *s, const char *path, kv_err *err)
{
    if (add_trace(s, err)) return err->code;
    study_trace *t = &s->t[s->n - 1];
    if (!(t->path = strdup(path))) return kv_fail(err, KV_EFAIL, "study: out of memory");
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(t->id, sizeof t->id, "%s", base[0] ? base : "trace");
    char *dot = strrchr(t->id, '.');
    if (dot && dot != t->id) *dot = '\0';
    for (char *c = t->id; *c; c++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", *c)) *c = '_';
    if (t->id[0] == '.') t->id[0] = '_';
    return KV_OK;
}

static bool hex64(const char *h)
{
    if (strlen(h) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!strchr("0123456789abcdef", h[i])) return false;
    return true;
}

/* One line of the index into s (its errors name the index and line). */
static int index_line(study_set *s, const char *dir, const char *text, int line, kv_err *err)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    int rc = KV_OK;
    const char *key;
    json_t *v;
    if (!o) return kv_fail(err, KV_EINPUT, "%s:%d: not JSON (%s)", s->index, line, je.text);
    if (!json_is_object(o)) rc = kv_fail(err, KV_EINPUT, "%s:%d: not a JSON object", s->index, line);
    json_object_foreach(o, key, v) {
        bool known = false;
        for (size_t k = 0; k < sizeof INDEX_KEYS / sizeof *INDEX_KEYS; k++) known |= strcmp(key, INDEX_KEYS[k]) == 0;
        if (!rc && !known)
            rc = kv_fail(err, KV_EINPUT, "%s:%d: unknown field '%.60s' (an index line has id, file, tokens, sha256)",
                         s->index, line, key);
    }
    const char *id = json_string_value(json_object_get(o, "id")), *file = json_string_value(json_object_get(o, "file"));
    const char *sha = json_string_value(json_object_get(o, "sha256"));
    json_t *tok = json_object_get(o, "tokens");
    if (!rc && (!id || !study_id_ok(id)))
        rc = kv_fail(err, KV_EINPUT, "%s:%d: 'id' must be 1-%d of A-Z a-z 0-9 _ . - (not starting with '.')",
                     s->index, line, STUDY_ID_MAX);
    if (!rc && (!file || !file[0] || strchr(file, '/') || file[0] == '.' || strlen(file) >= sizeof s->t->file))
        rc = kv_fail(err, KV_EINPUT, "%s:%d: 'file' must be a file name in the index's directory", s->index, line);
    if (!rc && (!json_is_integer(tok) || json_integer_value(tok) < 1))
        rc = kv_fail(err, KV_EINPUT, "%s:%d: 'tokens' must be an integer >= 1", s->index, line);
    if (!rc && (!sha || !hex64(sha)))
        rc = kv_fail(err, KV_EINPUT, "%s:%d: 'sha256' must be 64 lowercase hex digits", s->index, line);
    for (int i = 0; !rc && i < s->n; i++)
        if (strcmp(s->t[i].id, id) == 0)
            rc = kv_fail(err, KV_EINPUT, "%s:%d: id '%s' is also on line %d", s->index, line, id, s->t[i].line);
    if (!rc) rc = add_trace(s, err);
    if (!rc) {
        study_trace *t = &s->t[s->n - 1];
        snprintf(t->id, sizeof t->id, "%s", id);
        snprintf(t->file, sizeof t->file, "%s", file);
        snprintf(t->sha256, sizeof t->sha256, "%s", sha);
        t->tokens = json_integer_value(tok), t->line = line;
        size_t n = strlen(dir) + strlen(file) + 2;
        if (!(t->path = malloc(n))) rc = kv_fail(err, KV_EFAIL, "study: out of memory");
        else snprintf(t->path, n, "%s/%s", dir, file);
        struct stat st;
        if (!rc && (stat(t->path, &st) != 0 || !S_ISREG(st.st_mode)))
            rc = kv_fail(err, KV_EINPUT, "%s:%d: trace %s %s", s->index, line, t->path,
                         errno == ENOENT ? "does not exist" : "is not a readable file");
        if (!rc) t->dev = (uint64_t)st.st_dev, t->ino = (uint64_t)st.st_ino;
        for (int i = 0; !rc && i < s->n - 1; i++)   /* the same file under two ids would count one prompt twice */
            if (s->t[i].dev == t->dev && s->t[i].ino == t->ino)
                rc = kv_fail(err, KV_EINPUT, "%s:%d: trace %s is the file of line %d too (id '%s'): each prompt "
                             "has its own trace", s->index, line, t->path, s->t[i].line, s->t[i].id);
    }
    json_decref(o);
    return rc;
}

int study_jsonl_read(const char *path, bool skip_blank, const char *empty,
                     int (*fn)(void *ctx, const char *text, int line, kv_err *err), void *ctx, kv_err *err)
{
    FILE *f = kv_input_fopen(path, err);
    if (!f) return err->code;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = KV_OK, line = 0, handed = 0;
    while (!rc && (len = getline(&buf, &cap, f)) >= 0) {
        line++;
        if (skip_blank && strspn(buf, " \t\r\n") == (size_t)len) continue;
        if ((size_t)len != strlen(buf)) rc = kv_fail(err, KV_EINPUT, "%s:%d: holds a NUL byte", path, line);
        else rc = fn(ctx, buf, line, err), handed++;
    }
    if (!rc && ferror(f)) rc = kv_fail(err, KV_EFAIL, "%s: read error", path);
    if (!rc && !handed) rc = kv_fail(err, KV_EINPUT, "%s: %s", path, empty);
    free(buf);
    fclose(f);
    return rc;
}

typedef struct {
    study_set *s;
    const char *dir;
} index_ctx;

static int index_line_cb(void *ctx, const char *text, int line, kv_err *err)
{
    index_ctx *c = ctx;
    return index_line(c->s, c->dir, text, line, err);
}

/* Reads the index at s->index, whose traces lie in `dir`. */
static int read_index(study_set *s, const char *dir, kv_err *err)
{
    index_ctx c = {s, dir};
    return study_jsonl_read(s->index, false, "names no traces", index_line_cb, &c, err);
}

static int resolve_index(study_set *s, const char *word, bool is_dir, kv_err *err)
{
    size_t n = strlen(word) + sizeof STUDY_INDEX + 2;
    char *dir = malloc(n);
    if (!dir || !(s->index = malloc(n))) {
        free(dir);
        return kv_fail(err, KV_EFAIL, "study: out of memory");
    }
    if (is_dir) {
        snprintf(dir, n, "%s", word);
        snprintf(s->index, n, "%s/" STUDY_INDEX, word);
    } else {
        snprintf(s->index, n, "%s", word);
        snprintf(dir, n, "%s", word);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, n, ".");
    }
    struct stat st;
    int rc = is_dir && stat(s->index, &st) != 0
                 ? kv_fail(err, KV_EUSAGE, "%s: is a directory without " STUDY_INDEX " (a study's directory "
                           "holds one: kvtrace capture --prompts writes it)", word)
                 : read_index(s, dir, err);
    free(dir);
    return rc;
}

int study_set_resolve(const char *verb, char **words, int argc, study_set *s, kv_err *err)
{
    memset(s, 0, sizeof *s);
    struct stat st;
    const size_t len = argc == 1 ? strlen(words[0]) : 0;
    int rc = KV_OK;
    if (argc == 1 && stat(words[0], &st) == 0 && S_ISDIR(st.st_mode)) rc = resolve_index(s, words[0], true, err);
    else if (argc == 1 && len > 6 && strcmp(words[0] + len - 6, ".jsonl") == 0) rc = resolve_index(s, words[0], false, err);
    else
        for (int i = 0; !rc && i < argc; i++) rc = add_file(s, words[i], err);
    for (int i = 0; !rc && !s->index && i < s->n; i++)
        for (int j = 0; !rc && j < i; j++)
            if (strcmp(s->t[i].id, s->t[j].id) == 0)
                rc = cli_usage(err, verb, "%s and %s have the same prompt id '%s' (their file names' stem)",
                               s->t[j].path, s->t[i].path, s->t[i].id);
    if (rc) study_set_free(s);
    return rc;
}

int study_check_tokens(const study_set *s, int i, int64_t T, kv_err *err)
{
    const study_trace *t = &s->t[i];
    if (t->tokens < 0 || t->tokens == T) return KV_OK;
    return kv_fail(err, KV_EINPUT, "%s:%d: %s has T = %lld, the index says tokens = %lld", s->index, t->line, t->path,
                   (long long)T, (long long)t->tokens);
}

int study_check_sha256(const study_set *s, int i, const char *got, kv_err *err)
{
    const study_trace *t = &s->t[i];
    if (!t->line || strcmp(t->sha256, got) == 0) return KV_OK;
    return kv_fail(err, KV_EINPUT, "%s:%d: %s has sha256 %.12s..., the index says %.12s... (the trace changed "
                   "since the index was written)", s->index, t->line, t->path, got, t->sha256);
}

int study_index_line(FILE *f, const char *id, const char *file, int64_t tokens, const char *sha256, kv_err *err)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", id, "file", file, "tokens", (json_int_t)tokens, "sha256", sha256);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    int rc = text && fprintf(f, "%s\n", text) > 0 ? KV_OK : kv_fail(err, KV_EFAIL, "index: cannot write a line");
    free(text);
    json_decref(o);
    return rc;
}
