/* The record as JSON (jansson): written with its keys in one fixed order, so
 * equal records are equal bytes, and read back for steps and `kvtrace info`. */
#include "provenance/provenance.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"

static json_t *text_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static json_t *inputs_json(const prov_record *p)
{
    json_t *a = json_array();
    for (int i = 0; a && i < p->n_inputs; i++) {
        const prov_input *in = &p->inputs[i];
        json_t *o = json_object();
        json_object_set_new(o, "role", json_string(in->role));
        json_object_set_new(o, "path", json_string(in->path));
        json_object_set_new(o, "size", json_integer(in->size));
        json_object_set_new(o, "sha256", json_string(in->sha256));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *steps_json(const prov_record *p)
{
    json_t *a = json_array();
    for (int i = 0; a && i < p->n_steps; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "verb", json_string(p->steps[i].verb));
        json_object_set_new(o, "command", json_string(p->steps[i].command));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *record_json(const prov_record *p)
{
    json_t *o = json_object(), *argv = json_array();
    for (int i = 0; argv && i < p->argc; i++) json_array_append_new(argv, json_string(p->argv[i]));
    json_object_set_new(o, "kvtrace_provenance", json_integer(PROV_FORMAT));
    json_object_set_new(o, "verb", text_or_null(p->verb));
    json_object_set_new(o, "command", text_or_null(p->command));
    json_object_set_new(o, "argv", argv);
    json_object_set_new(o, "kvtrace_version", text_or_null(p->version));
    if (p->time[0]) {
        json_object_set_new(o, "time", json_string(p->time));
        json_object_set_new(o, "time_source", json_string(p->time_source));
    }
    if (p->model) json_object_set_new(o, "model", json_string(p->model));
    if (p->prompt) json_object_set_new(o, "prompt", json_string(p->prompt));
    if (p->has_seed) json_object_set_new(o, "seed", json_integer((json_int_t)p->seed));
    if (p->has_temperature) json_object_set_new(o, "temperature", json_real(p->temperature));
    json_object_set_new(o, "inputs", inputs_json(p));
    json_object_set_new(o, "steps", steps_json(p));
    return o;
}

char *prov_to_json(const prov_record *p)
{
    json_t *o = record_json(p);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) {
        free(text);
        return NULL;
    }
    line[n] = '\n', line[n + 1] = '\0';
    return line;
}

/* o[key] as text into *field: absent or null leaves it NULL; another type is an error. */
static int get_text(json_t *o, const char *key, char **field, const char *where, kv_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return KV_OK;
    if (!json_is_string(v)) return kv_fail(err, KV_EINPUT, "%s: provenance '%s' is not a string", where, key);
    return prov_set_text(field, json_string_value(v), err);
}

static int get_inputs(json_t *a, prov_record *p, const char *where, kv_err *err)
{
    size_t i;
    json_t *o;
    json_array_foreach(a, i, o) {
        json_t *size = json_object_get(o, "size"), *sha = json_object_get(o, "sha256");
        prov_input *grown = realloc(p->inputs, sizeof *grown * (size_t)(p->n_inputs + 1));
        if (!grown) return kv_fail(err, KV_EFAIL, "provenance: out of memory");
        p->inputs = grown;
        prov_input *in = &p->inputs[p->n_inputs++];
        memset(in, 0, sizeof *in);
        if (!json_is_integer(size) || !json_is_string(sha) || strlen(json_string_value(sha)) != 64)
            return kv_fail(err, KV_EINPUT, "%s: provenance input %zu lacks an integer size or a sha256", where, i);
        in->size = json_integer_value(size);
        memcpy(in->sha256, json_string_value(sha), 65);
        int rc = get_text(o, "role", &in->role, where, err);
        if (!rc) rc = get_text(o, "path", &in->path, where, err);
        if (!rc && (!in->role || !in->path)) rc = kv_fail(err, KV_EINPUT, "%s: provenance input %zu lacks a role or path", where, i);
        if (rc) return rc;
    }
    return KV_OK;
}

static int get_steps(json_t *a, prov_record *p, const char *where, kv_err *err)
{
    size_t i;
    json_t *o;
    json_array_foreach(a, i, o) {
        json_t *verb = json_object_get(o, "verb"), *cmd = json_object_get(o, "command");
        if (!json_is_string(verb) || !json_is_string(cmd))
            return kv_fail(err, KV_EINPUT, "%s: provenance step %zu lacks a verb or command", where, i);
        int rc = prov_add_step(p, json_string_value(verb), json_string_value(cmd), err);
        if (rc) return rc;
    }
    return KV_OK;
}

static int get_time(json_t *o, prov_record *p)
{
    json_t *t = json_object_get(o, "time"), *src = json_object_get(o, "time_source");
    if (json_is_string(t)) snprintf(p->time, sizeof p->time, "%s", json_string_value(t));
    if (json_is_string(src)) snprintf(p->time_source, sizeof p->time_source, "%s", json_string_value(src));
    return KV_OK;
}

static int from_object(json_t *o, const char *where, prov_record *p, kv_err *err)
{
    json_t *seed = json_object_get(o, "seed"), *temp = json_object_get(o, "temperature");
    json_t *argv = json_object_get(o, "argv"), *inputs = json_object_get(o, "inputs"), *steps = json_object_get(o, "steps");
    if (!json_is_object(o) || !json_is_integer(json_object_get(o, "kvtrace_provenance")))
        return kv_fail(err, KV_EINPUT, "%s: not a kvtrace provenance record", where);
    int rc = get_text(o, "verb", &p->verb, where, err);
    if (!rc) rc = get_text(o, "command", &p->command, where, err);
    if (!rc) rc = get_text(o, "kvtrace_version", &p->version, where, err);
    if (!rc) rc = get_text(o, "model", &p->model, where, err);
    if (!rc) rc = get_text(o, "prompt", &p->prompt, where, err);
    if (!rc) rc = get_time(o, p);
    if (!rc && json_is_integer(seed)) prov_set_seed(p, (uint64_t)json_integer_value(seed));
    if (!rc && json_is_number(temp)) prov_set_temperature(p, json_number_value(temp));
    size_t n = json_is_array(argv) ? json_array_size(argv) : 0;
    if (!rc && n && !(p->argv = calloc(n, sizeof *p->argv))) rc = kv_fail(err, KV_EFAIL, "provenance: out of memory");
    for (size_t i = 0; !rc && i < n; i++, p->argc++)
        rc = prov_set_text(&p->argv[i], json_is_string(json_array_get(argv, i)) ? json_string_value(json_array_get(argv, i)) : "", err);
    if (!rc && json_is_array(inputs)) rc = get_inputs(inputs, p, where, err);
    if (!rc && json_is_array(steps)) rc = get_steps(steps, p, where, err);
    return rc;
}

int prov_from_json(const char *text, const char *where, prov_record *p, kv_err *err)
{
    memset(p, 0, sizeof *p);
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    if (!o) return kv_fail(err, KV_EINPUT, "%s: provenance is not JSON (line %d: %s)", where, je.line, je.text);
    int rc = from_object(o, where, p, err);
    json_decref(o);
    if (rc) prov_free(p);
    return rc;
}

int prov_write_json(const prov_record *p, const char *dir, kv_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" PROV_FILE, dir);
    char *text = prov_to_json(p);
    if (!text) return kv_fail(err, KV_EFAIL, "%s: out of memory", path);
    kv_outfile out;
    int rc = outfile_begin(&out, path, true, err);
    if (rc) {
        free(text);
        return rc;
    }
    FILE *f = fopen(out.tmp_path, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = false;
    free(text);
    if (ok) return outfile_commit(&out, err);
    outfile_abort(&out);
    return kv_fail(err, KV_EFAIL, "%s: cannot write", path);
}

int prov_read_json(const char *dir, prov_record *p, bool *present, kv_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" PROV_FILE, dir);
    memset(p, 0, sizeof *p);
    *present = false;
    FILE *f = fopen(path, "rb");
    if (!f) return KV_OK;
    json_error_t je;
    json_t *o = json_loadf(f, 0, &je);
    fclose(f);
    if (!o) return kv_fail(err, KV_EINPUT, "%s: not JSON (line %d: %s)", path, je.line, je.text);
    int rc = from_object(o, path, p, err);
    json_decref(o);
    if (rc) prov_free(p);
    else *present = true;
    return rc;
}
