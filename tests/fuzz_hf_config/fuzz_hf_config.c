/* fuzz_hf_config: libFuzzer harness for a Hugging Face checkpoint's
 * config.json (model/formats/hf_config.c) and the checks the HF loader runs
 * on what it reads (model_config_check, model_set_llama3_scaling).
 *
 * The input is the whole file, read through an in-memory file
 * (tests/fuzz_file.h). A failure must be one well-formed line naming the
 * file. A config that is read must say what the JSON says: the harness
 * parses the same bytes with jansson and checks every shape field, the
 * transformers defaults for absent ones (num_key_value_heads = heads,
 * head_dim = hidden / heads, rope_theta 10000, rms_norm_eps 1e-6,
 * max_position_embeddings 0 when absent), tie_word_embeddings and the llama3
 * scaling numbers. A config that also passes model_config_check must be one
 * the forward pass can run (heads a multiple of kv heads, even head_dim,
 * finite theta > 1), and its llama3 RoPE divisors finite and positive.
 * ASan (with leak checking) and UBSan report the rest. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/formats/hf.h"
#include "model/model.h"

#define FUZZ_NAME "fuzz_hf_config"
#define WHERE fuzz_path
#include "tests/fuzz_file.h"
#include "tests/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The integer at key, or `dflt` when it is absent or null. */
static int64_t int_or(json_t *o, const char *key, int64_t dflt)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return dflt;
    CHECK(json_is_integer(v), "\"%s\" accepted as an integer", key);
    return json_integer_value(v);
}

static double num_or(json_t *o, const char *key, double dflt)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return dflt;
    CHECK(json_is_number(v), "\"%s\" accepted as a number", key);
    return json_number_value(v);
}

/* What was read against the JSON itself. */
static void check_fields(json_t *root, const model_config *c, const hf_features *f)
{
    CHECK(json_is_object(root), "a config that is not an object was read");
    const struct {
        const char *key;
        int64_t got;
    } F[] = {{"hidden_size", c->dim},           {"intermediate_size", c->ffn_dim},
             {"num_hidden_layers", c->n_layers}, {"num_attention_heads", c->n_heads},
             {"vocab_size", c->vocab_size}};
    for (size_t i = 0; i < sizeof F / sizeof F[0]; i++)
        CHECK(int_or(root, F[i].key, -1) == F[i].got, "%s read as %lld", F[i].key,
              (long long)F[i].got);
    CHECK(c->n_kv_heads == int_or(root, "num_key_value_heads", c->n_heads), "num_key_value_heads");
    int64_t hd = int_or(root, "head_dim", -1);
    CHECK(c->head_dim == (hd >= 0 ? hd : c->dim / c->n_heads) && c->head_dim > 0, "head_dim %lld",
          (long long)c->head_dim);
    CHECK(c->context_len == int_or(root, "max_position_embeddings", 0), "context length");
    CHECK(c->rope_theta == num_or(root, "rope_theta", 10000.0), "rope_theta %g", c->rope_theta);
    CHECK(c->norm_eps == num_or(root, "rms_norm_eps", 1e-6), "rms_norm_eps %g", c->norm_eps);
    CHECK(isfinite(c->rope_theta) && isfinite(c->norm_eps), "non-finite theta or epsilon");
    CHECK(f->tied == json_is_true(json_object_get(root, "tie_word_embeddings")), "tied");
    if (f->llama3) {
        json_t *rs = json_object_get(root, "rope_scaling");
        CHECK(f->factor == num_or(rs, "factor", NAN), "llama3 factor");
        CHECK(f->original_ctx == num_or(rs, "original_max_position_embeddings", NAN), "llama3 ctx");
    }
}

/* A config model_config_check passed: runnable shapes, then the RoPE tables. */
static void check_runnable(kv_model *m, const hf_features *f)
{
    const model_config *c = &m->cfg;
    CHECK(c->n_heads % c->n_kv_heads == 0 && c->head_dim % 2 == 0, "heads %lld/%lld, head_dim %lld",
          (long long)c->n_heads, (long long)c->n_kv_heads, (long long)c->head_dim);
    CHECK(isfinite(c->rope_theta) && c->rope_theta > 1.0, "rope_theta %g", c->rope_theta);
    CHECK(c->sliding_window >= 0, "sliding window %lld", (long long)c->sliding_window);
    if (!f->llama3) return;
    kv_err err = {0};
    int rc = model_set_llama3_scaling(m, f->factor, f->low_freq_factor, f->high_freq_factor,
                                      f->original_ctx, WHERE, &err);
    if (rc) {
        check_err(rc, &err, "llama3 scaling");
        return;
    }
    for (int64_t i = 0; i < c->head_dim / 2; i++)
        CHECK(isfinite(m->rope_div[i]) && m->rope_div[i] > 0, "rope divisor %lld = %g",
              (long long)i, m->rope_div[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_file_set(data, size);
    kv_model m;
    model_init(&m);
    hf_features f;
    kv_err err = {0};
    int rc = hf_read_config(fuzz_path, &m.cfg, &f, &err);
    if (rc) {
        check_err(rc, &err, "hf_read_config");
        model_free(&m);
        return 0;
    }
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    CHECK(root, "a config jansson cannot parse was read");
    check_fields(root, &m.cfg, &f);
    json_decref(root);
    snprintf(m.cfg.name, sizeof m.cfg.name, "fuzz");
    if ((rc = model_config_check(&m.cfg, WHERE, &err))) check_err(rc, &err, "model_config_check");
    else check_runnable(&m, &f);
    model_free(&m);
    return 0;
}
