/* format: what each model format's reader gives the table of formats in
 * model/load.c: a probe, which says whether the format claims a model spec,
 * and a loader, which fills the model from it. A new format is a reader
 * that defines the two (declared here) and one row of that table. */
#ifndef KV_FORMAT_H
#define KV_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "model/model.h"
#include "core/kv_error.h"

/* What a probe looks at, in the order model_load learns it: each level is
 * gathered once, when the first row that needs it is probed, and failing
 * to gather it is model_load's error (no such path; an empty or unreadable
 * file). */
typedef enum {
    SOURCE_SPEC,  /* the spec's text */
    SOURCE_STAT,  /* and stat() of the path it names */
    SOURCE_HEAD,  /* and the first bytes of that file */
} model_source_level;

typedef struct {
    const char *spec;       /* as given: a path, or e.g. "random:NAME" */
    const char *tokenizer;  /* --tokenizer, for the loader of a format that takes one; else NULL */
    model_source_level level;  /* gathered so far */
    struct stat st;         /* from SOURCE_STAT */
    uint8_t head[4];        /* from SOURCE_HEAD: the first n_head bytes, zeros after */
    size_t n_head;
} model_source;

/* ---- the readers: probe (claims s?) and load (fills m, which model_load
 * has emptied, and frees when the load fails) ---------------------------- */

/* "random:NAME[:SEED]" (model_random.c): a core/model_shapes.h shape with
 * seeded random weights and no vocabulary. */
bool model_probe_random(const model_source *s);
int model_load_random(const model_source *s, kv_model *m, kv_err *err);

/* A Hugging Face checkpoint directory (load_hf.c): config.json,
 * safetensors (one file or shards), tokenizer.json when present. */
bool model_probe_hf(const model_source *s);
int model_load_hf(const model_source *s, kv_model *m, kv_err *err);

/* A GGUF file (load_gguf.c), by its magic, or by its name so that a
 * damaged one is reported as one: config, weights, vocabulary. */
bool model_probe_gguf(const model_source *s);
int model_load_gguf(const model_source *s, kv_model *m, kv_err *err);

/* Only the tokenizer of the GGUF file at path (no tensors needed): *has
 * false when it has none. A gpt2 (byte-level BPE) vocabulary gets its
 * encoder from tokenizer.ggml.merges and tokenizer.ggml.pre. */
int gguf_read_tokenizer(const char *path, kv_vocab *v, bool *has, kv_err *err);

/* The same from a parsed file (gguf.h), e.g. one parsed from memory. With
 * 16-bit weights asked for (m->wtype_want), tensors already of that type
 * point into g's data: *in_place says so (g must then outlive m). */
struct gguf_file;
int model_from_gguf(const struct gguf_file *g, kv_model *m, bool *in_place, kv_err *err);

/* A llama2.c legacy checkpoint (load_llama2c.c): any other file;
 * s->tokenizer names its tokenizer.bin (NULL: no vocabulary). */
bool model_probe_llama2c(const model_source *s);
int model_load_llama2c(const model_source *s, kv_model *m, kv_err *err);

#endif
