/* The chat template and BOS/EOS texts of a Hugging Face tokenizer, from the
 * files beside its tokenizer.json (hf.h): chat_template.jinja when present
 * (transformers reads it before the config's), else tokenizer_config.json's
 * chat_template (a string, or a list of {name, template} of which the one
 * named "default"); bos_token and eos_token from tokenizer_config.json (a
 * string or an {"content": ...} object). Absent files mean no template. */
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileopen.h"
#include "core/utf8.h"
#include "model/formats/hf.h"

static int set_text(char **dst, const char *s, const char *path, const char *what, kv_err *err)
{
    if (kv_utf8_invalid(s, strlen(s)) >= 0) return kv_fail(err, KV_EINPUT, "%s: %s is not valid UTF-8", path, what);
    if (!(*dst = strdup(s))) return kv_fail(err, KV_EFAIL, "out of memory");
    return KV_OK;
}

/* bos_token / eos_token: absent or null leaves *dst NULL. */
static int token_text(json_t *cfg, const char *key, char **dst, const char *path, kv_err *err)
{
    json_t *t = json_object_get(cfg, key);
    if (json_is_object(t)) t = json_object_get(t, "content");
    if (!t || json_is_null(t)) return KV_OK;
    if (!json_is_string(t) || strlen(json_string_value(t)) != json_string_length(t))
        return kv_fail(err, KV_EINPUT, "%s: %s must be a string or {\"content\": string}", path, key);
    return set_text(dst, json_string_value(t), path, key, err);
}

/* chat_template: a string, or the list's template named "default". */
static int config_template(json_t *cfg, kv_vocab *v, const char *path, kv_err *err)
{
    json_t *t = json_object_get(cfg, "chat_template"), *x;
    size_t i;
    if (json_is_array(t)) {
        json_t *found = NULL;
        json_array_foreach(t, i, x) {
            json_t *name = json_object_get(x, "name");
            if (json_is_string(name) && strcmp(json_string_value(name), "default") == 0) found = json_object_get(x, "template");
        }
        if (!found)
            return kv_fail(err, KV_EINPUT, "%s: chat_template is a list without one named \"default\"", path);
        t = found;
    }
    if (!t || json_is_null(t)) return KV_OK;
    if (!json_is_string(t) || strlen(json_string_value(t)) != json_string_length(t))
        return kv_fail(err, KV_EINPUT, "%s: chat_template must be a string (or a list of {name, template})", path);
    return set_text(&v->chat_template, json_string_value(t), path, "chat_template", err);
}

static int read_config(const char *path, bool have_template, kv_vocab *v, kv_err *err)
{
    int rc = kv_input_check(path, true, err);
    if (rc || access(path, F_OK) != 0) return rc;
    json_error_t je;
    json_t *cfg = json_load_file(path, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
    if (!cfg) return kv_fail(err, KV_EINPUT, "%s: malformed JSON at line %d: %.200s", path, je.line, je.text);
    if (!json_is_object(cfg)) rc = kv_fail(err, KV_EINPUT, "%s: not a JSON object", path);
    if (!rc && !have_template) rc = config_template(cfg, v, path, err);
    if (!rc) rc = token_text(cfg, "bos_token", &v->chat_bos, path, err);
    if (!rc) rc = token_text(cfg, "eos_token", &v->chat_eos, path, err);
    json_decref(cfg);
    return rc;
}

/* The whole file at path, NUL-terminated, into *text; a NUL byte inside is refused. */
static int read_file(const char *path, char **text, kv_err *err)
{
    FILE *f = kv_input_fopen(path, err);
    if (!f) return err->code;
    size_t n = 0, cap = 4096;
    char *s = malloc(cap);
    for (size_t got = 1; s && got > 0;) {
        if (n + 1 >= cap) {
            char *g = realloc(s, cap *= 2);
            if (!g) free(s);
            s = g;
            if (!s) break;
        }
        got = fread(s + n, 1, cap - n - 1, f);
        n += got;
    }
    const bool bad = ferror(f);
    fclose(f);
    if (!s) return kv_fail(err, KV_EFAIL, "out of memory");
    s[n] = '\0';
    if (bad || strlen(s) != n) {
        free(s);
        return kv_fail(err, bad ? KV_EFAIL : KV_EINPUT, "%s: %s", path, bad ? "cannot read" : "holds a NUL byte");
    }
    *text = s;
    return KV_OK;
}

int hf_read_chat(const char *tokenizer_json, kv_vocab *v, kv_err *err)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s", tokenizer_json);
    const char *d = dirname(dir);
    snprintf(path, sizeof path, "%s/chat_template.jinja", d);
    int rc = kv_input_check(path, true, err);
    if (!rc && access(path, F_OK) == 0) {
        char *text = NULL;
        rc = read_file(path, &text, err);
        if (!rc) rc = set_text(&v->chat_template, text, path, "the template", err);
        free(text);
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", d);
    if (!rc) rc = read_config(path, v->chat_template != NULL, v, err);
    return rc;
}
