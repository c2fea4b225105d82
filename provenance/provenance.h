/* provenance: the one record of where an output came from (docs/provenance.md).
 * Every verb that writes something builds one record:
 * the command line as typed, kvtrace's version, each input file's path, size
 * and sha256, the seed, temperature and kind of prompt where the verb has
 * them, the commands that made its inputs (steps), and the time only when
 * SOURCE_DATE_EPOCH or --timestamp asks for it, so equal inputs give equal
 * records. It is kept apart from the data: an HDF5 file gets the attribute
 * group /provenance (prov_write_h5), an output directory the sidecar
 * provenance.json (prov_write_json). Byte-identity promises are about the
 * data and exclude this record.
 *
 * One serialisation, JSON (keys in a fixed order, 2-space indent): the
 * sidecar is it, and /provenance holds it as the attribute `json` beside the
 * same fields as flat attributes for h5py.
 */
#ifndef KV_PROVENANCE_H
#define KV_PROVENANCE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/kv_error.h"

#define PROV_FILE "provenance.json"   /* the sidecar in an output directory */
#define PROV_GROUP "provenance"       /* the attribute group in an HDF5 file */
#define PROV_FORMAT 1                 /* the record's format version */

typedef struct {
    char *role;          /* model, tokenizer, prompt_file, tokens, trace, results, analysis */
    char *path;          /* as given (a model directory's files: DIR/NAME) */
    int64_t size;        /* bytes */
    char sha256[65];     /* lowercase hex */
} prov_input;

typedef struct {
    char *verb;
    char *command;
} prov_step;

typedef struct {
    char *verb;            /* capture, synth, sim, analyze, plot, fidelity, demo */
    char *command;         /* "kvtrace VERB ARGS..." as typed, shell-quoted where needed */
    int argc;
    char **argv;           /* [argc] the arguments as typed, argv[0] the verb */
    char *version;         /* KVTRACE_VERSION of the writer */
    char time[32];         /* ISO 8601 UTC; "" when not asked for */
    char time_source[24];  /* "SOURCE_DATE_EPOCH" or "--timestamp"; "" with no time */
    char *model;           /* --model as given (random:NAME has no file), or NULL */
    char *prompt;          /* text | file | ids | bos (none given), or NULL: no prompt */
    bool has_seed, has_temperature;
    uint64_t seed;
    double temperature;
    prov_input *inputs;    /* [n_inputs] in the order added */
    int n_inputs;
    prov_step *steps;      /* [n_steps] the commands that made the inputs, oldest first */
    int n_steps;
} prov_record;

/* Starts a record from a verb's arguments (argv[0] the verb), before the
 * option parser permutes them. The time is not set yet. */
int prov_begin(prov_record *p, int argc, char **argv, kv_err *err);

/* The time: SOURCE_DATE_EPOCH (seconds since 1970, UTC) when set, else the
 * current time when `timestamp` (--timestamp), else none. A malformed
 * SOURCE_DATE_EPOCH is a usage error. */
int prov_set_time(prov_record *p, bool timestamp, kv_err *err);

void prov_free(prov_record *p);

int prov_set_text(char **field, const char *value, kv_err *err);
void prov_set_seed(prov_record *p, uint64_t seed);
void prov_set_temperature(prov_record *p, double temperature);

/* Hashes `path` (streaming, 1 MiB at a time) and appends it as an input
 * recorded under `shown` (NULL: path). A file that cannot be read is KV_EINPUT. */
int prov_add_file(prov_record *p, const char *role, const char *path, const char *shown, kv_err *err);

/* A model as --model names it: a file (GGUF, llama2.c .bin) is one input; a
 * Hugging Face directory its config.json, model.safetensors.index.json,
 * every *.safetensors file and tokenizer.json that exist (name order);
 * random:NAME[:SEED] no file. The spec itself goes to p->model. */
int prov_add_model(prov_record *p, const char *model, kv_err *err);

/* Appends a step (the command that made an input), unless an equal command
 * is already there. */
int prov_add_step(prov_record *p, const char *verb, const char *command, kv_err *err);

/* The steps of an input's own record and then its own command: the trace's
 * /provenance, or DIR/provenance.json. An input without a record adds
 * nothing; one whose record cannot be read adds nothing either (it is not
 * data; `kvtrace info` says what is wrong with it). */
int prov_add_upstream_dir(prov_record *p, const char *dir, kv_err *err);

/* A trace a verb reads (sim, analyze): hashed as input `trace`, then its own
 * record's steps, when it can be read; one that cannot adds nothing (the
 * verb's reader says what is wrong with it). */
int prov_add_trace(prov_record *p, const char *path, kv_err *err);

/* The first input of a role, or NULL. */
const prov_input *prov_find_input(const prov_record *p, const char *role);

/* ---- the record written and read back ------------------------------------ */

/* The JSON text (malloc'd, ending in a newline), or NULL when out of memory. */
char *prov_to_json(const prov_record *p);
/* Parses a record from JSON text; `where` names it in errors (KV_EINPUT). */
int prov_from_json(const char *text, const char *where, prov_record *p, kv_err *err);

/* DIR/provenance.json, whole or not at all. */
int prov_write_json(const prov_record *p, const char *dir, kv_err *err);
/* DIR/provenance.json back; *present false (and KV_OK) when there is none. */
int prov_read_json(const char *dir, prov_record *p, bool *present, kv_err *err);

/* The group /provenance under an open HDF5 file or group (an hid_t), without
 * object times. Its signature is trace_create_opts.annotate's: `record` is a
 * const prov_record *. */
int prov_write_h5(int64_t loc_id, const void *record, kv_err *err);
/* FILE's /provenance back; *present false (and KV_OK) when there is none. */
int prov_read_h5(const char *path, prov_record *p, bool *present, kv_err *err);

/* The record for people: command, version, time, seed, inputs, steps. */
void prov_print(FILE *f, const prov_record *p);

#endif
