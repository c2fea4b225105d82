/* The provenance record in memory: started from the arguments, filled by the
 * verb, the time only when asked for, steps from the inputs' own records. */
#include "provenance/provenance.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cli_args.h"
#include "core/version.h"

int prov_set_text(char **field, const char *value, kv_err *err)
{
    char *copy = value ? strdup(value) : NULL;
    if (value && !copy) return kv_fail(err, KV_EFAIL, "provenance: out of memory");
    free(*field);
    *field = copy;
    return KV_OK;
}

int prov_begin(prov_record *p, int argc, char **argv, kv_err *err)
{
    memset(p, 0, sizeof *p);
    p->argv = calloc((size_t)(argc > 0 ? argc : 1), sizeof *p->argv);
    p->command = cli_command_line(argc, argv);
    int rc = p->argv && p->command ? KV_OK : kv_fail(err, KV_EFAIL, "provenance: out of memory");
    for (int i = 0; !rc && i < argc; i++, p->argc++) rc = prov_set_text(&p->argv[i], argv[i], err);
    if (!rc) rc = prov_set_text(&p->verb, argc > 0 ? argv[0] : "", err);
    if (!rc) rc = prov_set_text(&p->version, KVTRACE_VERSION, err);
    if (rc) prov_free(p);
    return rc;
}

/* SOURCE_DATE_EPOCH: a whole number of seconds, as reproducible-builds.org defines it. */
static int source_date_epoch(const char *s, time_t *out, kv_err *err)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < 0 || v > 253402300799LL) /* up to 9999-12-31 */
        return kv_fail(err, KV_EUSAGE, "SOURCE_DATE_EPOCH='%s' is not a number of seconds since 1970", s);
    *out = (time_t)v;
    return KV_OK;
}

int prov_set_time(prov_record *p, bool timestamp, kv_err *err)
{
    const char *env = getenv("SOURCE_DATE_EPOCH");
    time_t t;
    p->time[0] = p->time_source[0] = '\0';
    if (env && env[0]) { /* set but empty: as unset */
        int rc = source_date_epoch(env, &t, err);
        if (rc) return rc;
        snprintf(p->time_source, sizeof p->time_source, "SOURCE_DATE_EPOCH");
    } else if (timestamp) {
        t = time(NULL);
        snprintf(p->time_source, sizeof p->time_source, "--timestamp");
    } else {
        return KV_OK;
    }
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(p->time, sizeof p->time, "%Y-%m-%dT%H:%M:%SZ", &tm))
        return kv_fail(err, KV_EFAIL, "provenance: cannot format the time");
    return KV_OK;
}

void prov_free(prov_record *p)
{
    for (int i = 0; i < p->argc; i++) free(p->argv[i]);
    for (int i = 0; i < p->n_inputs; i++) free(p->inputs[i].role), free(p->inputs[i].path);
    for (int i = 0; i < p->n_steps; i++) free(p->steps[i].verb), free(p->steps[i].command);
    free(p->argv), free(p->inputs), free(p->steps);
    free(p->verb), free(p->command), free(p->version), free(p->model), free(p->prompt);
    memset(p, 0, sizeof *p);
}

void prov_set_seed(prov_record *p, uint64_t seed)
{
    p->has_seed = true, p->seed = seed;
}

void prov_set_temperature(prov_record *p, double temperature)
{
    p->has_temperature = true, p->temperature = temperature;
}

int prov_add_step(prov_record *p, const char *verb, const char *command, kv_err *err)
{
    for (int i = 0; i < p->n_steps; i++)
        if (strcmp(p->steps[i].command, command) == 0) return KV_OK;
    prov_step *s = realloc(p->steps, sizeof *s * (size_t)(p->n_steps + 1));
    if (!s) return kv_fail(err, KV_EFAIL, "provenance: out of memory");
    p->steps = s;
    s = &p->steps[p->n_steps];
    memset(s, 0, sizeof *s);
    int rc = prov_set_text(&s->verb, verb, err);
    if (!rc) rc = prov_set_text(&s->command, command, err);
    p->n_steps++; /* counted even when half filled: prov_free frees what is there */
    return rc;
}

const prov_input *prov_find_input(const prov_record *p, const char *role)
{
    for (int i = 0; i < p->n_inputs; i++)
        if (strcmp(p->inputs[i].role, role) == 0) return &p->inputs[i];
    return NULL;
}

void prov_print(FILE *f, const prov_record *p)
{
    fprintf(f, "provenance\n  command     %s\n  version     kvtrace %s\n", p->command ? p->command : "",
            p->version ? p->version : "?");
    if (p->time[0]) fprintf(f, "  time        %s (%s)\n", p->time, p->time_source);
    if (p->model) fprintf(f, "  model       %s\n", p->model);
    if (p->prompt) fprintf(f, "  prompt      %s\n", p->prompt);
    if (p->has_seed) fprintf(f, "  seed        %llu\n", (unsigned long long)p->seed);
    if (p->has_temperature) fprintf(f, "  temperature %g\n", p->temperature);
    for (int i = 0; i < p->n_inputs; i++)
        fprintf(f, "  input       %-11s %s (%lld bytes, sha256 %s)\n", p->inputs[i].role, p->inputs[i].path,
                (long long)p->inputs[i].size, p->inputs[i].sha256);
    for (int i = 0; i < p->n_steps; i++) fprintf(f, "  made by     %s\n", p->steps[i].command);
}
