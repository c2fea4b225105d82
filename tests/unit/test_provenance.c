/* The provenance record (provenance/): sha256 and size against FIPS 180-2's
 * published digests (one block, and a million 'a's read in several 1 MiB
 * pieces); the command as typed, shell-quoted; no time unless
 * SOURCE_DATE_EPOCH or --timestamp, and SOURCE_DATE_EPOCH's time exact; a
 * malformed one refused; the JSON and the /provenance group written and read
 * back field for field, equal records as equal bytes; steps de-duplicated;
 * a Hugging Face directory's files in name order, others left out. */
#include "testutil.h"

#include <hdf5.h>

#include "core/h5util.h"
#include "provenance/provenance.h"

static void put(const char *name, const char *text, size_t repeat)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", tu_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (size_t i = 0; i < repeat; i++) fputs(text, f);
    fclose(f);
}

static void begin(prov_record *p)
{
    char *argv[] = {"capture", "--prompt", "it's", "-o", "t.h5"};
    kv_err err = {0};
    assert_int_equal(prov_begin(p, 5, argv, &err), KV_OK);
}

static void hashes(void **state)
{
    (void)state;
    put("abc", "abc", 1);
    put("million", "aaaaaaaaaa", 100000);
    char path[400];
    prov_record p;
    begin(&p);
    kv_err err = {0};
    snprintf(path, sizeof path, "%s/abc", tu_dir);
    assert_int_equal(prov_add_file(&p, "tokens", path, "abc", &err), KV_OK);
    snprintf(path, sizeof path, "%s/million", tu_dir);
    assert_int_equal(prov_add_file(&p, "trace", path, NULL, &err), KV_OK);
    assert_string_equal(p.inputs[0].sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_string_equal(p.inputs[0].path, "abc");
    assert_int_equal(p.inputs[0].size, 3);
    assert_string_equal(p.inputs[1].sha256, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    assert_int_equal(p.inputs[1].size, 1000000);
    assert_string_equal(prov_find_input(&p, "trace")->path, path);
    assert_null(prov_find_input(&p, "model"));
    snprintf(path, sizeof path, "%s/nosuch", tu_dir);
    assert_int_equal(prov_add_file(&p, "trace", path, NULL, &err), KV_EFAIL); /* an OS error: core/fileopen.h */
    assert_non_null(strstr(err.msg, "nosuch: cannot open: No such file or directory"));
    prov_free(&p);
}

static void command_and_time(void **state)
{
    (void)state;
    prov_record p;
    begin(&p);
    assert_string_equal(p.command, "kvtrace capture --prompt 'it'\\''s' -o t.h5");
    assert_string_equal(p.verb, "capture");
    assert_int_equal(p.argc, 5);
    kv_err err = {0};
    unsetenv("SOURCE_DATE_EPOCH");
    assert_int_equal(prov_set_time(&p, false, &err), KV_OK);
    assert_string_equal(p.time, "");
    assert_int_equal(prov_set_time(&p, true, &err), KV_OK);
    assert_int_equal(strlen(p.time), 20);
    assert_string_equal(p.time_source, "--timestamp");
    setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
    assert_int_equal(prov_set_time(&p, false, &err), KV_OK);
    assert_string_equal(p.time, "2023-11-14T22:13:20Z");
    assert_string_equal(p.time_source, "SOURCE_DATE_EPOCH");
    setenv("SOURCE_DATE_EPOCH", "12x", 1);
    assert_int_equal(prov_set_time(&p, true, &err), KV_EUSAGE);
    assert_non_null(strstr(err.msg, "SOURCE_DATE_EPOCH='12x'"));
    unsetenv("SOURCE_DATE_EPOCH");
    prov_free(&p);
}

/* A record with every field set. */
static void full_record(prov_record *p)
{
    begin(p);
    kv_err err = {0};
    char path[400];
    snprintf(path, sizeof path, "%s/abc", tu_dir);
    put("abc", "abc", 1);
    assert_int_equal(prov_add_file(p, "model", path, NULL, &err), KV_OK);
    assert_int_equal(prov_set_text(&p->prompt, "text", &err), KV_OK);
    assert_int_equal(prov_set_text(&p->model, path, &err), KV_OK);
    prov_set_seed(p, 18446744073709551615ull);
    prov_set_temperature(p, 0.7);
    assert_int_equal(prov_add_step(p, "synth", "kvtrace synth -o a", &err), KV_OK);
    assert_int_equal(prov_add_step(p, "synth", "kvtrace synth -o a", &err), KV_OK);
    assert_int_equal(p->n_steps, 1);
    setenv("SOURCE_DATE_EPOCH", "0", 1);
    assert_int_equal(prov_set_time(p, false, &err), KV_OK);
    unsetenv("SOURCE_DATE_EPOCH");
}

static void same(const prov_record *a, const prov_record *b)
{
    char *ja = prov_to_json(a), *jb = prov_to_json(b);
    assert_string_equal(ja, jb);
    free(ja), free(jb);
    assert_string_equal(b->time, "1970-01-01T00:00:00Z");
    assert_true(b->has_seed && b->seed == 18446744073709551615ull);
    assert_true(b->has_temperature && b->temperature == 0.7);
    assert_int_equal(b->n_inputs, 1);
    assert_string_equal(b->inputs[0].sha256, a->inputs[0].sha256);
    assert_string_equal(b->steps[0].command, "kvtrace synth -o a");
    assert_string_equal(b->argv[2], "it's");
}

static void json_round_trip(void **state)
{
    (void)state;
    prov_record p, q;
    full_record(&p);
    kv_err err = {0};
    bool present = true;
    assert_int_equal(prov_read_json(tu_dir, &q, &present, &err), KV_OK);
    assert_false(present);
    assert_int_equal(prov_write_json(&p, tu_dir, &err), KV_OK);
    assert_int_equal(prov_read_json(tu_dir, &q, &present, &err), KV_OK);
    assert_true(present);
    same(&p, &q);
    prov_free(&q);
    assert_int_equal(prov_from_json("{\"verb\": 1}", "x", &q, &err), KV_EINPUT);
    assert_int_equal(prov_from_json("[", "x", &q, &err), KV_EINPUT);
    prov_free(&p);
}

static void h5_round_trip(void **state)
{
    (void)state;
    prov_record p, q;
    full_record(&p);
    char path[400];
    snprintf(path, sizeof path, "%s/p.h5", tu_dir);
    kv_err err = {0};
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    H5Fclose(f);
    bool present = true;
    assert_int_equal(prov_read_h5(path, &q, &present, &err), KV_OK);
    assert_false(present);
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_int_equal(prov_write_h5(f, &p, &err), KV_OK);
    char command[256];
    hid_t g = H5Gopen2(f, "provenance", H5P_DEFAULT);
    assert_int_equal(h5u_read_attr_str(g, path, "command", command, sizeof command, NULL, &err), KV_OK);
    assert_string_equal(command, p.command);
    H5Gclose(g);
    H5Fclose(f);
    assert_int_equal(prov_read_h5(path, &q, &present, &err), KV_OK);
    assert_true(present);
    same(&p, &q);
    prov_free(&q);
    prov_free(&p);
    assert_int_equal(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

static void model_directory(void **state)
{
    (void)state;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/hf", tu_dir);
    assert_int_equal(mkdir(dir, 0777), 0);
    const char *names[] = {"hf/model-00002.safetensors", "hf/config.json", "hf/model-00001.safetensors",
                           "hf/model.safetensors.index.json", "hf/tokenizer.json", "hf/README.md", "hf/x.bin"};
    for (int i = 0; i < 7; i++) put(names[i], names[i], 1);
    prov_record p;
    begin(&p);
    kv_err err = {0};
    assert_int_equal(prov_add_model(&p, dir, &err), KV_OK);
    const char *want[] = {"config.json", "model-00001.safetensors", "model-00002.safetensors",
                          "model.safetensors.index.json", "tokenizer.json"};
    assert_int_equal(p.n_inputs, 5);
    for (int i = 0; i < 5; i++) {
        char path[500];
        snprintf(path, sizeof path, "%s/%s", dir, want[i]);
        assert_string_equal(p.inputs[i].path, path);
        assert_string_equal(p.inputs[i].role, "model");
    }
    assert_string_equal(p.model, dir);
    assert_int_equal(prov_add_model(&p, "random:llama-3.2-1b", &err), KV_OK);
    assert_int_equal(p.n_inputs, 5);
    assert_string_equal(p.model, "random:llama-3.2-1b");
    prov_free(&p);
}

int main(void)
{
    h5u_quiet();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hashes),
        cmocka_unit_test(command_and_time),
        cmocka_unit_test(json_round_trip),
        cmocka_unit_test(h5_round_trip),
        cmocka_unit_test(model_directory),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
