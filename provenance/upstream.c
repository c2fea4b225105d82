/* Steps: the commands that made a verb's inputs, taken from the inputs' own
 * records (a trace's /provenance, a directory's provenance.json), so that a
 * report can show the whole chain from capture (or synth) to plot. */
#include <unistd.h>

#include "provenance/provenance.h"

/* The steps of `up` (an input's own record), then its command. */
static int add_upstream(prov_record *p, const prov_record *up, kv_err *err)
{
    int rc = KV_OK;
    for (int i = 0; !rc && i < up->n_steps; i++) rc = prov_add_step(p, up->steps[i].verb, up->steps[i].command, err);
    if (!rc && up->command && up->command[0]) rc = prov_add_step(p, up->verb ? up->verb : "", up->command, err);
    return rc;
}

/* The record that `reader` finds at `where` (prov_read_h5 or prov_read_json), added as above. */
static int add_from(prov_record *p, int (*reader)(const char *, prov_record *, bool *, kv_err *), const char *where,
                    kv_err *err)
{
    prov_record up;
    bool present = false;
    kv_err ignored = {0};
    int rc = KV_OK;
    if (reader(where, &up, &present, &ignored) == KV_OK && present) {
        rc = add_upstream(p, &up, err);
        prov_free(&up);
    }
    return rc;
}

static int prov_add_upstream_h5(prov_record *p, const char *path, kv_err *err)
{
    return add_from(p, prov_read_h5, path, err);
}

int prov_add_upstream_dir(prov_record *p, const char *dir, kv_err *err)
{
    return add_from(p, prov_read_json, dir, err);
}

int prov_add_trace(prov_record *p, const char *path, kv_err *err)
{
    if (access(path, R_OK) != 0) return KV_OK;
    int rc = prov_add_file(p, "trace", path, NULL, err);
    return rc ? rc : prov_add_upstream_h5(p, path, err);
}
