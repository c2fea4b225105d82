/* fuzz_safetensors: libFuzzer harness for the safetensors reader
 * (model/formats/safetensors.c).
 *
 * The input is a whole file, parsed from memory (st_parse_buffer; libFuzzer
 * hands over an exactly sized heap copy, so ASan sees any read past its end).
 * A failed parse must give code 1 or 3 and one non-empty line that starts
 * with the file name. A successful parse must describe only bytes inside the
 * input: every tensor's data lies inside it, its size is its shape times its
 * dtype's size, no two tensors overlap, lookups by name find each tensor;
 * then every tensor is converted (or refused with a well-formed error).
 * The parse must succeed exactly when the independent oracle (st_oracle.c)
 * says the file is valid: no false acceptance, no false rejection. Any
 * violated property calls abort(); ASan (with leak checking) and UBSan
 * report the rest. Inputs are made by a structure-aware mutator
 * (st_mutate.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/formats/safetensors.h"
#include "tests/fuzz_safetensors/st_fuzz.h"

#define FUZZ_NAME "fuzz_safetensors"
#define WHERE "fuzz.safetensors"
#include "tests/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drive_tensor(const st_file *f, const st_tensor *t, const uint8_t *data, size_t size)
{
    CHECK(t->n_dims >= 0 && t->n_dims <= ST_MAX_DIMS, "n_dims %d", t->n_dims);
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) {
        CHECK(t->shape[d] >= 0, "negative dimension");
        n *= (uint64_t)t->shape[d]; /* checked not to overflow */
    }
    CHECK(n == t->n_elems, "n_elems %llu, product %llu", (unsigned long long)t->n_elems,
          (unsigned long long)n);
    CHECK(t->nbytes == n * st_dtype_size(t->dtype), "nbytes");
    CHECK(t->offset <= size && t->nbytes <= size - t->offset, "data outside the input");
    CHECK(t->data == data + t->offset, "data pointer and offset disagree");
    CHECK(st_find(f, t->name) == t, "lookup of '%s'", t->name);
    kv_err err = {0};
    int rc = st_tensor_readable(f, t, &err);
    if (rc) {
        check_err(rc, &err, "readable");
        return;
    }
    float *dst = malloc((n ? n : 1) * sizeof *dst);
    CHECK(dst, "out of memory");
    if ((rc = st_tensor_read_f32(f, t, dst, n, &err))) check_err(rc, &err, "read_f32");
    free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file *f = NULL;
    kv_err err = {0};
    int rc = st_parse_buffer(data, size, WHERE, &f, &err);
    const bool valid = stz_valid(data, size);
    CHECK(!rc || rc == KV_EFAIL || !valid, "a valid file refused: %s", err.msg);
    CHECK(rc || valid, "an invalid file accepted");
    if (rc) {
        CHECK(f == NULL, "failed parse returned a file");
        check_err(rc, &err, "parse");
        return 0;
    }
    for (int64_t i = 0; i < st_tensor_count(f); i++) {
        const st_tensor *t = st_tensor_at(f, i);
        drive_tensor(f, t, data, size);
        if (i > 0) {
            const st_tensor *p = st_tensor_at(f, i - 1);
            CHECK(strcmp(p->name, t->name) < 0, "names not sorted and unique");
        }
    }
    for (int64_t i = 0; i < st_tensor_count(f); i++) /* pairwise overlap, on small inputs */
        for (int64_t j = i + 1; j < st_tensor_count(f) && st_tensor_count(f) < 64; j++) {
            const st_tensor *a = st_tensor_at(f, i), *b = st_tensor_at(f, j);
            CHECK(!a->nbytes || !b->nbytes || a->offset + a->nbytes <= b->offset ||
                  b->offset + b->nbytes <= a->offset, "tensors overlap");
        }
    st_close(f);
    return 0;
}
