/* fuzz_gguf: libFuzzer harness for the GGUF reader (model/formats/gguf.c,
 * gguf_value.c, gguf_meta.c) and the model loader on top of it (load_gguf.c).
 *
 * The input is a whole file, parsed from memory (gguf_parse_buffer; libFuzzer
 * hands over an exactly sized heap copy, so ASan sees any read past its end).
 * A failed parse must give code 1 or 3 and one non-empty line that starts
 * with the file name. A successful parse must describe only bytes inside the
 * input, and then every accessor is driven: every key through every typed
 * getter, every array through the array readers, every string element,
 * every tensor lookup and conversion, and finally model_from_gguf, whose
 * model is freed. Any violated property calls abort(); ASan (with leak
 * checking) and UBSan report the rest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/formats/format.h"
#include "model/formats/ggml_types.h"
#include "model/formats/gguf.h"
#include "model/model.h"

#define FUZZ_NAME "fuzz_gguf"
#define WHERE "fuzz.gguf"
#include "tests/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const uint8_t *base, size_t size, const void *p, uint64_t n, const char *what)
{
    const uint8_t *q = p;
    CHECK(q >= base && (size_t)(q - base) <= size && n <= size - (size_t)(q - base),
          "%s: %llu bytes at %p outside the input [%p, +%zu)", what, (unsigned long long)n, p,
          (const void *)base, size);
}

/* Every typed getter on one key: success or a well-formed error. */
static void drive_kv(const gguf_file *g, const gguf_kv *kv, const uint8_t *data, size_t size)
{
    const char *key = gguf_kv_key(kv);
    kv_err err = {0};
    const gguf_kv *found = gguf_find_kv(g, key);
    if (found != kv) { /* a key holding a NUL: its C string may name another key, or none */
        CHECK(!found || strcmp(gguf_kv_key(found), key) == 0, "key '%s' finds another", key);
        return;
    }
    uint32_t u32 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    float f = 0;
    bool b = false;
    const char *s = NULL;
    int rc;
    if ((rc = gguf_get_u32(g, key, true, &u32, &err))) check_err(rc, &err, "get_u32");
    if ((rc = gguf_get_i32(g, key, true, &i32, &err))) check_err(rc, &err, "get_i32");
    if ((rc = gguf_get_u64(g, key, true, &u64, &err))) check_err(rc, &err, "get_u64");
    if ((rc = gguf_get_f32(g, key, true, &f, &err))) check_err(rc, &err, "get_f32");
    if ((rc = gguf_get_bool(g, key, true, &b, &err))) check_err(rc, &err, "get_bool");
    if ((rc = gguf_get_str(g, key, true, &s, &err))) check_err(rc, &err, "get_str");
    else CHECK(strlen(s) < size, "string longer than the file");
    const gguf_kv *arr;
    uint64_t n = 0;
    if ((rc = gguf_get_array(g, key, true, GGUF_N_VALUE_TYPES, &arr, &n, &err))) {
        check_err(rc, &err, "get_array");
        return;
    }
    CHECK(arr == kv && n == gguf_kv_count_elems(kv), "array lookup");
    if (gguf_kv_elem_type(kv) == GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            size_t len;
            const char *p = gguf_array_str(g, kv, i, &len);
            inside(data, size, p, len, "string element");
        }
        return;
    }
    uint64_t esz = gguf_value_size(gguf_kv_elem_type(kv));
    inside(data, size, gguf_kv_data(kv), n * esz, "array data");
    float *fs = malloc((n ? n : 1) * sizeof *fs);
    int32_t *is = malloc((n ? n : 1) * sizeof *is);
    CHECK(fs && is, "out of memory for %llu elements", (unsigned long long)n);
    if ((rc = gguf_array_f32(g, kv, fs, n, &err))) check_err(rc, &err, "array_f32");
    if ((rc = gguf_array_i32(g, kv, is, n, &err))) check_err(rc, &err, "array_i32");
    free(fs);
    free(is);
}

static void drive_tensor(const gguf_file *g, const gguf_tensor *t, const uint8_t *data, size_t size)
{
    CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "n_dims %u", t->n_dims);
    uint64_t n = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) n *= t->ne[d]; /* checked not to overflow */
    CHECK(n == t->n_elems, "n_elems %llu, product %llu", (unsigned long long)t->n_elems,
          (unsigned long long)n);
    inside(data, size, t->data, t->nbytes, t->name);
    CHECK(t->data == data + t->offset, "data pointer and offset disagree");
    const gguf_tensor *found = gguf_find_tensor(g, t->name);
    /* a name holding a NUL: its C string may name another tensor, or none */
    CHECK(found == t || !found || strcmp(found->name, t->name) == 0, "tensor '%s' finds another",
          t->name);
    kv_err err = {0};
    int rc = gguf_tensor_readable(g, t, &err);
    if (rc) {
        check_err(rc, &err, "tensor_readable");
        return;
    }
    /* the types kvtrace decodes (docs/capture.md): F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, BF16 */
    static const uint32_t DECODED[] = {0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30};
    bool known = false;
    for (size_t k = 0; k < sizeof DECODED / sizeof *DECODED; k++) known = known || t->type == DECODED[k];
    CHECK(known, "reads type %u", t->type);
    const ggml_type_info *ti = ggml_type_get(t->type);
    CHECK(n % ti->blck == 0 && t->nbytes == n / ti->blck * ti->size, "nbytes %llu for %llu elements",
          (unsigned long long)t->nbytes, (unsigned long long)n);
    float *dst = malloc((n ? n : 1) * sizeof *dst);
    CHECK(dst, "out of memory");
    if ((rc = gguf_tensor_read_f32(g, t, dst, n, &err))) check_err(rc, &err, "read_f32");
    free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file *g = NULL;
    kv_err err = {0};
    int rc = gguf_parse_buffer(data, size, WHERE, &g, &err);
    if (rc) {
        CHECK(g == NULL, "failed parse returned a file");
        check_err(rc, &err, "parse");
        return 0;
    }
    CHECK(gguf_version(g) == 2 || gguf_version(g) == 3, "version %u", gguf_version(g));
    for (int64_t i = 0; i < gguf_kv_count(g); i++) drive_kv(g, gguf_kv_at(g, i), data, size);
    for (int64_t i = 0; i < gguf_tensor_count(g); i++)
        drive_tensor(g, gguf_tensor_at(g, i), data, size);
    kv_model m;
    memset(&m, 0, sizeof m);
    bool in_place; /* float32 asked for (model_init): never */
    if ((rc = model_from_gguf(g, &m, &in_place, &err))) {
        check_err(rc, &err, "model_from_gguf");
    } else {
        CHECK(model_config_check(&m.cfg, WHERE, &err) == KV_OK, "loaded a bad config: %s",
              err.msg);
        CHECK(m.tok_embd && m.output && m.output_norm && m.layers, "missing weights");
    }
    model_free(&m);
    gguf_close(g);
    return 0;
}
